"""A name server and a broker with its remoting role, on 127.0.0.1 port 0, data in tmp_path."""

import sys
from pathlib import Path

import pytest
from cluster import broker_cluster

sys.path.insert(0, str(Path(__file__).parent))  # wire.py


@pytest.fixture
async def cluster(nursery, tmp_path):
    async with broker_cluster(nursery, tmp_path) as c:
        yield c
