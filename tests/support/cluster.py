"""A name server and a broker with its remoting role on 127.0.0.1 port 0, data
in a temporary directory: what the client and processor tests talk to."""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

import trio

from core.broker import Broker, BrokerConfig
from core.namesrv import run_namesrv
from core.processors import BrokerRemoting
from core.remoting.client import RemotingClient
from core.store import StoreConfig

# Short delay levels, so retries (level 3 + reconsume times) and delayed messages take a fraction of a second.
TEST_DELAY_LEVELS = " ".join(["100ms", "200ms"] + ["300ms"] * 16)


@dataclass
class Cluster:
    namesrv: str
    broker_addr: str
    broker: Broker
    remoting: BrokerRemoting
    client: RemotingClient  # a raw remoting client, for tests that speak the wire themselves


async def create_routed_topic(c: Cluster, topic: str, queues: int = 1) -> None:
    """Create ``topic`` on the broker and wait until the name server routes it
    (registration is asynchronous)."""
    from core.client.api import open_client_api

    async with open_client_api() as api:
        await api.create_topic(c.broker_addr, topic, queues, queues)
        with trio.fail_after(10):
            while await api.get_route(c.namesrv, topic) is None:
                await trio.sleep(0.02)


@asynccontextmanager
async def broker_cluster(nursery: trio.Nursery, root: Path, **broker_options) -> AsyncIterator[Cluster]:
    """``broker_options``: more `BrokerConfig` fields (``enable_property_filter=True``...)."""
    ns_port = await nursery.start(run_namesrv, "127.0.0.1", 0)
    namesrv = f"127.0.0.1:{ns_port}"
    cfg = BrokerConfig(listen_port=0, broker_ip1="127.0.0.1", **broker_options)
    scfg = StoreConfig(store_path_root_dir=str(root / "store"), mapped_file_size_commit_log=4 * 1024 * 1024)
    broker = Broker(cfg, scfg)
    async with trio.open_nursery() as broker_side:
        await broker_side.start(broker.run)
        remoting = BrokerRemoting(broker, "127.0.0.1", 0, [namesrv], delay_levels=TEST_DELAY_LEVELS)
        port = await broker_side.start(remoting.run)
        client = RemotingClient(broker_side)
        yield Cluster(namesrv, f"127.0.0.1:{port}", broker, remoting, client)
        client.aclose_nowait()
        broker_side.cancel_scope.cancel()  # broker first: it unregisters from the live name server
