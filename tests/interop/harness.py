"""Run a name server and a broker (trio) in a background thread for the blocking C++ client.

`ClusterThread` starts ``trio.run`` in a daemon thread, waits until both
listeners are bound and registered, and offers `call` to run a coroutine
function in the trio thread (to inspect the broker from a test). `stop`
cancels everything and joins the thread.
"""

from __future__ import annotations

import threading
from typing import Any, Awaitable, Callable

import trio

from core.broker import Broker, BrokerConfig
from core.namesrv import run_namesrv
from core.processors import BrokerRemoting
from core.store import StoreConfig

# Delay levels for tests (reference 6.2 order, but short): level 3 stays 10 s so
# the delay test measures the real level-3 delay; retries use levels 3..18, so
# send-back tests set the group's first retry level through the put path instead.
FAST_DELAY_LEVELS = "100ms 200ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms"


class ClusterThread:
    def __init__(self, data_dir: str, *, delay_levels: str | None = None, broker_config: dict | None = None,
                 acl: str | None = None):
        self.data_dir = data_dir
        self.acl = acl
        self.delay_levels = delay_levels
        self.broker_config = broker_config or {}
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self.namesrv = ""
        self.broker_addr = ""
        self.broker: Broker | None = None
        self.remoting: BrokerRemoting | None = None
        self._thread = threading.Thread(target=self._main, name="mqgate-cluster", daemon=True)

    def start(self, timeout: float = 20) -> "ClusterThread":
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("cluster did not start")
        if self._error:
            raise self._error
        return self

    def _main(self) -> None:
        try:
            trio.run(self._run)
        except BaseException as exc:  # reported to the test thread
            self._error = exc
            self._ready.set()

    async def _run(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._cancel = scope
            async with trio.open_nursery() as nursery:
                ns_port = await nursery.start(run_namesrv, "127.0.0.1", 0)
                self.namesrv = f"127.0.0.1:{ns_port}"
                cfg = BrokerConfig.from_dict({"listenPort": 0, "brokerIP1": "127.0.0.1", **self.broker_config})
                scfg = StoreConfig(store_path_root_dir=self.data_dir, mapped_file_size_commit_log=64 * 1024 * 1024)
                self.broker = Broker(cfg, scfg)
                async with trio.open_nursery() as broker_side:
                    await broker_side.start(self.broker.run)
                    self.remoting = BrokerRemoting(self.broker, "127.0.0.1", 0, [self.namesrv],
                                                   delay_levels=self.delay_levels, acl=self.acl)
                    port = await broker_side.start(self.remoting.run)
                    self.broker_addr = f"127.0.0.1:{port}"
                    self._ready.set()
                    await trio.sleep_forever()

    def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run ``await fn(*args)`` in the trio thread and return its result."""
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def call_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def stop(self) -> None:
        if self._token is not None and self._cancel is not None:
            try:
                trio.from_thread.run_sync(self._cancel.cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join(30)


def wait_for(pred: Callable[[], bool], timeout: float = 20.0, interval: float = 0.05) -> bool:
    """Poll ``pred`` from the test thread until true or ``timeout``; its last value."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


async def _route_ready(namesrv: str, topic: str, timeout: float) -> bool:
    from core.remoting import RemotingCommand, RequestCode
    from core.remoting.client import open_remoting_client

    async with open_remoting_client() as client:
        with trio.move_on_after(timeout):
            while True:
                req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
                if (await client.invoke(namesrv, req)).code == 0:
                    return True
                await trio.sleep(0.02)
    return False


def create_topic(cluster: ClusterThread, topic: str, queues: int = 4, timeout: float = 5.0) -> None:
    """Create ``topic`` on the broker and wait until the name server routes it."""
    from core.broker import TopicConfig

    cluster.call(cluster.broker.update_topic, TopicConfig(topic, queues, queues, 6))
    if not cluster.call(_route_ready, cluster.namesrv, topic, timeout):
        raise TimeoutError(f"no route for {topic}")


def queue_count(cluster: ClusterThread, topic: str, queue_id: int = 0) -> int:
    return cluster.call_sync(cluster.broker.max_offset, topic, queue_id)
