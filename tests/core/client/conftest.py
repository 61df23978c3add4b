"""A name server and a broker on 127.0.0.1 port 0 (data in tmp_path) for our client to talk to."""

import pytest
from cluster import broker_cluster


@pytest.fixture
async def cluster(nursery, tmp_path):
    async with broker_cluster(nursery, tmp_path) as c:
        yield c


@pytest.fixture
def offset_dir(tmp_path):
    return tmp_path / "offsets"
