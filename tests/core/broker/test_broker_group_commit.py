"""SYNC_FLUSH: concurrent senders share fsyncs (group commit), and every ack is durable."""

from __future__ import annotations

import trio

from core.broker import FlushDiskType, SendStatus, TopicConfig, open_broker
from core.store.message import Message


async def test_64_concurrent_sync_flush_senders_share_fsyncs(broker_config, store_config):
    config = broker_config.replace(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with open_broker(config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 4, 4))
        before = broker.flush_count
        results = []

        async def sender(i: int):
            r = await broker.send(Message("T", b"m%d" % i))
            results.append(r)
            # the ack means the log is durable past this entry
            assert broker.flushed_offset > r.physical_offset

        async with trio.open_nursery() as nursery:
            for i in range(64):
                nursery.start_soon(sender, i)
        assert len(results) == 64 and all(r.status is SendStatus.SEND_OK for r in results)
        flushes = broker.flush_count - before
        assert 1 <= flushes < 64


async def test_wait_false_is_not_waited_for(broker_config, store_config):
    config = broker_config.replace(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with open_broker(config, store_config) as broker:
        before = broker.flush_count
        r = await broker.send(Message("T", b"x", properties={"WAIT": "false"}))
        assert r.status is SendStatus.SEND_OK and broker.flush_count == before


async def test_send_many_waits_once(broker_config, store_config):
    config = broker_config.replace(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with open_broker(config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        before = broker.flush_count
        results = await broker.send_many([(Message("T", b"%d" % i), 0) for i in range(50)])
        assert all(r.status is SendStatus.SEND_OK for r in results)
        assert broker.flush_count - before == 1
