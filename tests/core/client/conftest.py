"""A name server and a broker on 127.0.0.1 port 0 (data in tmp_path) for our client to talk to."""

from dataclasses import dataclass

import pytest
import trio

from core.broker import Broker, BrokerConfig
from core.namesrv import run_namesrv
from core.processors import BrokerRemoting
from core.store import StoreConfig

# Short delay levels, so a retry (level 3 + reconsume times) comes back in ~0.3 s.
TEST_DELAY_LEVELS = " ".join(["100ms", "200ms"] + ["300ms"] * 16)


@dataclass
class Cluster:
    namesrv: str
    broker_addr: str
    broker: Broker
    remoting: BrokerRemoting


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
        yield Cluster(namesrv, f"127.0.0.1:{port}", broker, remoting)
        broker_side.cancel_scope.cancel()


@pytest.fixture
def offset_dir(tmp_path):
    return tmp_path / "offsets"
