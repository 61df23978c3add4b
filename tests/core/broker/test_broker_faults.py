"""A disk that refuses new files: sends answer SERVICE_NOT_AVAILABLE ("the broker's disk is full"), the broker keeps serving."""

from __future__ import annotations

from faults import max_file_size

from core.broker import FlushDiskType, PullStatus, SendStatus, open_broker
from core.store.message import Message

SEG = 1 << 20


async def test_send_on_a_full_disk_answers_service_not_available(broker_config, store_config):
    cfg = broker_config.replace(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with open_broker(cfg, store_config) as broker:
        body = b"x" * 10_000
        sent = []
        while broker.store.max_phy_offset + 2 * 10_200 < SEG:
            r = await broker.send(Message(topic="T", body=body), queue_id=0)
            assert r.status is SendStatus.SEND_OK
            sent.append(r)
        with max_file_size(SEG // 2):
            refused = []
            for _ in range(3):
                refused.append(await broker.send(Message(topic="T", body=body), queue_id=0))
            assert refused[-1].status is SendStatus.SERVICE_NOT_AVAILABLE and not refused[-1].ok
            assert "the broker's disk is full" in refused[-1].remark  # RocketMQ's wording, with the file
            assert "00000000000001048576" in refused[-1].remark
            batch = await broker.send_batch([Message(topic="T", body=body) for _ in range(3)], queue_id=0)
            assert batch.status is SendStatus.SERVICE_NOT_AVAILABLE
        ok = await broker.send(Message(topic="T", body=body), queue_id=0)
        assert ok.status is SendStatus.SEND_OK
        stored = [r for r in refused if r.ok]
        assert ok.queue_offset == len(sent) + len(stored)
        offsets, off = [], 0
        while off <= ok.queue_offset:
            got = await broker.pull("G", "T", 0, off, 32)
            assert got.status is PullStatus.FOUND
            offsets += [m.queue_offset for m in got.messages()]
            off = got.next_begin_offset
        assert offsets == list(range(ok.queue_offset + 1))
