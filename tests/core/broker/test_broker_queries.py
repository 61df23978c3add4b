"""Queries over the store: offset by time, by key, by message id, min/max, earliest time."""

from __future__ import annotations

from core.broker import TopicConfig, open_broker
from core.store.message import Message


async def test_offset_by_timestamp(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        stamps = []
        for i in range(40):
            r = await broker.send(Message("T", b"%d" % i))
            stamps.append(r.store_timestamp)
        assert stamps == sorted(stamps)
        for ts in sorted(set(stamps)):
            expected = next(i for i, s in enumerate(stamps) if s >= ts)
            assert await broker.offset_by_time("T", 0, ts) == expected
        assert await broker.offset_by_time("T", 0, 0) == 0
        assert await broker.earliest_store_time("T", 0) == stamps[0]
        assert broker.min_offset("T", 0) == 0 and broker.max_offset("T", 0) == 40


async def test_query_by_key_and_by_msg_id(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        sent = []
        for i in range(10):
            keys = "order-%d shared" % (i % 3)
            sent.append(await broker.send(Message("T", b"%d" % i, properties={"KEYS": keys})))
        found = await broker.query_message("T", "order-1", max_num=32)
        assert sorted(m.body for m in found.messages()) == [b"1", b"4", b"7"]
        limited = await broker.query_message("T", "shared", max_num=4)
        assert len(limited.messages()) == 4
        none = await broker.query_message("Other", "order-1")
        assert none.messages() == []
        windowed = await broker.query_message("T", "shared", 32, begin_ts=sent[-1].store_timestamp + 10_000)
        assert windowed.messages() == []
        by_uniq = await broker.query_message("T", sent[5].uniq_key)
        assert [m.body for m in by_uniq.messages()] == [b"5"]

        m = await broker.view_message(sent[3].msg_id)
        assert m is not None and m.body == b"3" and m.msg_id == sent[3].msg_id
        raw = await broker.read_at(sent[3].physical_offset)
        assert raw is not None and len(raw) == m.size
        assert await broker.view_message("not-an-id") is None
