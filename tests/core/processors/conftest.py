"""A name server and a broker with its remoting role, on 127.0.0.1 port 0, data in tmp_path."""

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from core.broker import Broker, BrokerConfig
from core.namesrv import run_namesrv
from core.processors import BrokerRemoting
from core.remoting.client import RemotingClient
from core.store import StoreConfig

sys.path.insert(0, str(Path(__file__).parent))  # wire.py

# Short delay levels so retries and delayed messages take a fraction of a second.
TEST_DELAY_LEVELS = "100ms 200ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms 300ms"


@dataclass
class Cluster:
    namesrv: str
    broker_addr: str
    broker: Broker
    remoting: BrokerRemoting
    client: RemotingClient


@pytest.fixture
async def cluster(nursery, tmp_path):
    ns_port = await nursery.start(run_namesrv, "127.0.0.1", 0)
    namesrv = f"127.0.0.1:{ns_port}"
    cfg = BrokerConfig(listen_port=0, broker_ip1="127.0.0.1")
    scfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=4 * 1024 * 1024)
    broker = Broker(cfg, scfg)
    async with trio.open_nursery() as broker_side:
        await broker_side.start(broker.run)
        remoting = BrokerRemoting(broker, "127.0.0.1", 0, [namesrv], delay_levels=TEST_DELAY_LEVELS)
        port = await broker_side.start(remoting.run)
        client = RemotingClient(broker_side)
        yield Cluster(namesrv, f"127.0.0.1:{port}", broker, remoting, client)
        client.aclose_nowait()
        broker_side.cancel_scope.cancel()  # broker first: it unregisters from the live name server
