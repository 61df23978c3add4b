"""The PUBACKs of a read's QoS 1 batch (gateway/publishing.py): written
together, in arrival order, byte for byte what one event per ack would
give, and only once the log is durable past every message they answer
(SYNC_FLUSH). A refusal in the middle of a batch keeps its place and code."""

from __future__ import annotations

import pytest

from core.broker import BrokerConfig, FlushDiskType
from gateway.mqtt import PubAck, Publish, encode

from .conftest import Client, running_gateway

SYNC = BrokerConfig(default_topic_queue_nums=4, listen_port=0, flush_disk_type=FlushDiskType.SYNC_FLUSH)


@pytest.mark.parametrize("version", [4, 5])
async def test_a_batch_of_pubacks_is_durable_ordered_and_exact(tmp_path, version):
    async with running_gateway(tmp_path / "store", broker_config=SYNC) as (broker, _gw, port):
        pub, _ = await Client.connect(port, "batcher", version=version)
        pids = list(range(1, 31))  # within our Receive Maximum (32) for 5.0
        await pub.send(*[Publish(topic=f"batch/{pid % 3}", payload=b"m%d" % pid, qos=1, packet_id=pid)
                         for pid in pids])  # one write: one read, one batch
        expected = b"".join(encode(PubAck(packet_id=pid), version) for pid in pids)
        assert len(expected) == 4 * len(pids)
        assert await pub.read_exactly(len(expected)) == expected
        # acknowledged: the commit log is on disk past every message of the batch
        assert broker.flushed_offset >= broker.store.max_phy_offset > 0
        assert broker.store.flushed_offset >= broker.store.max_phy_offset

        # A refusal in the middle ($SYS may not be published to) keeps its place.
        await pub.send(*[Publish(topic="$SYS/no" if pid == 35 else "batch/x", payload=b"x", qos=1, packet_id=pid)
                         for pid in range(31, 41)])
        acks = [await pub.expect(PubAck) for _ in range(10)]
        assert [a.packet_id for a in acks] == list(range(31, 41))
        refused = 0x87 if version == 5 else 0  # 3.1.1 cannot carry the code: acknowledged and dropped
        assert [a.reason_code for a in acks] == [refused if a.packet_id == 35 else 0 for a in acks]
        assert broker.flushed_offset >= broker.store.max_phy_offset

        # the flows are finished: the same packet ids are new messages again, stored and acknowledged
        await pub.send(*[Publish(topic="batch/again", payload=b"y", qos=1, packet_id=pid) for pid in (1, 2, 3)])
        assert await pub.read_exactly(12) == b"".join(encode(PubAck(packet_id=p), version) for p in (1, 2, 3))
        await pub.disconnect()
