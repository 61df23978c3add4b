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


async def test_sync_master_without_a_slave_answers_slave_not_available(broker_config, store_config):
    from core.broker import BrokerRole

    config = broker_config.replace(broker_role=BrokerRole.SYNC_MASTER)
    async with open_broker(config, store_config) as broker:
        r = await broker.send(Message("T", b"x"))
        assert r.status is SendStatus.SLAVE_NOT_AVAILABLE and r.status.code == 11 and r.ok  # stored anyway
        assert (await broker.pull("G", "T", r.queue_id, 0)).message_count == 1


async def test_slave_and_unwritable_broker_refuse_sends(broker_config, store_config):
    from core.broker import BrokerRole

    async with open_broker(broker_config.replace(broker_role=BrokerRole.SLAVE, broker_id=1), store_config) as broker:
        assert (await broker.send(Message("T", b"x"))).status is SendStatus.SERVICE_NOT_AVAILABLE
    async with open_broker(broker_config.replace(broker_permission=4), store_config) as broker:
        assert (await broker.send(Message("T", b"x"))).status is SendStatus.NO_PERMISSION
