"""In-process brokers with their remoting role, restartable on one store (helpers for the transaction tests)."""

import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from core.broker import Broker, BrokerConfig
from core.processors import BrokerRemoting
from core.store import StoreConfig
from core.timers import TimerConfig, TimerMessageService

TEST_DELAY_LEVELS = " ".join(["100ms", "200ms", "1s"] + ["300ms"] * 15)


@dataclass
class Node:
    broker: Broker
    remoting: BrokerRemoting
    addr: str

    @property
    def transactions(self):
        return self.remoting.transactions


TEST_TIMERS = TimerConfig(precision_ms=100, slots_total=600, roll_window_slots=100,
                          timerlog_file_size=1 << 20, max_delay_s=3600)
_WALL_AT_IMPORT = int(time.time() * 1000)


def clock_ms() -> int:
    """Wall-clock ms that follow trio's clock (virtual under MockClock)."""
    return _WALL_AT_IMPORT + int(trio.current_time() * 1000)


@asynccontextmanager
async def broker_node(root, namesrv=None, *, timers=False, **config):
    """A broker and its remoting role on 127.0.0.1 port 0 over the store at ``root``
    (with a timer service when ``timers``); clean shutdown on exit."""
    cfg = BrokerConfig(listen_port=0, broker_ip1="127.0.0.1", **config)
    scfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=4 << 20,
                       mapped_file_size_consume_queue=20 * 4096, max_hash_slot_num=4096, max_index_num=65536)
    broker = Broker(cfg, scfg)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        if timers:
            service = TimerMessageService(broker, TEST_TIMERS, now_ms=clock_ms)
            service.install()
            await nursery.start(service.run)
            broker.timers = service
        remoting = BrokerRemoting(broker, "127.0.0.1", 0, [namesrv] if namesrv else [], delay_levels=TEST_DELAY_LEVELS)
        port = await nursery.start(remoting.run)
        try:
            yield Node(broker, remoting, f"127.0.0.1:{port}")
        finally:
            nursery.cancel_scope.cancel()
