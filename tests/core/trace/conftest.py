"""A name server and a broker with ``traceTopicEnable`` on 127.0.0.1 port 0 (data in tmp_path)."""

import pytest
from cluster import broker_cluster


@pytest.fixture
async def cluster(nursery, tmp_path):
    async with broker_cluster(nursery, tmp_path, trace_topic_enable=True) as c:
        yield c
