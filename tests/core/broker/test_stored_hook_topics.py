"""Stored hooks that name their topics (``add_stored_hook(topics=...)``) and
UNIQ_KEYs made per batch (`UniqKeyGenerator.next_many`), issue 13.

Real store files in tmp_path; the hooks are the test's own (the public
extension API).
"""

from __future__ import annotations

import logging

import pytest

from core.broker import SendResult, SendStatus, TopicConfig, TopicHooks, open_broker
from core.broker.uniq_key import UniqKeyGenerator
from core.store.message import Message


def msg(topic: str, body: bytes, **props: str) -> Message:
    return Message(topic=topic, body=body, properties=dict(props))


def park_or_refuse(m: Message) -> SendResult | None:
    """A put hook: LATER moves the message to topic Parked, REFUSE refuses it."""
    if m.properties.get("LATER"):
        m.topic = "Parked"
    if m.properties.get("REFUSE"):
        return SendResult(SendStatus.NO_PERMISSION, topic=m.topic, remark="refused by the test hook")
    return None


async def test_a_stored_hook_hears_its_topics_only_and_every_message_its_hooks_in_order(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        for t in ("A", "B", "Parked"):
            await broker.update_topic(TopicConfig(t, 1, 1))
        broker.add_put_hook(park_or_refuse)
        heard = []
        asked = []

        def not_b(topic: str) -> bool:
            asked.append(topic)
            return topic != "B"

        broker.add_stored_hook(lambda m, r: heard.append(("all", m.body, r.ok)))
        broker.add_stored_hook(lambda m, r: heard.append(("A", m.body, r.ok)), topics=("A",))
        broker.add_stored_hook(lambda m, r: heard.append(("not B", m.body, r.ok)), topics=not_b)
        broker.add_stored_hook(lambda m, r: heard.append(("Parked", m.body, r.ok)), topics={"Parked"})
        results = await broker.send_many([(msg("A", b"a1"), 0), (msg("B", b"b1"), 0), (msg("A", b"a2", LATER="1"), 0),
                                          (msg("A", b"a3", REFUSE="1"), 0), (msg("A", b"a4"), 0)])
        assert [r.ok for r in results] == [True, True, True, False, True]
        # each message: the hooks of the topic it is stored on (a2: Parked), in the order added
        assert heard == [("all", b"a1", True), ("A", b"a1", True), ("not B", b"a1", True),
                         ("all", b"b1", True),
                         ("all", b"a2", True), ("not B", b"a2", True), ("Parked", b"a2", True),
                         ("all", b"a3", False), ("A", b"a3", False), ("not B", b"a3", False),
                         ("all", b"a4", True), ("A", b"a4", True), ("not B", b"a4", True)]
        assert sorted(asked) == ["A", "B", "Parked"]  # the predicate: once per topic

        heard.clear()
        await broker.send(msg("B", b"b2"), queue_id=0)
        assert (await broker.send_batch([msg("B", b"b3"), msg("B", b"b4")], queue_id=0)).ok
        assert heard == [("all", b"b2", True), ("all", b"b3", True), ("all", b"b4", True)]
        assert sorted(asked) == ["A", "B", "Parked"]  # answers kept

        broker.add_stored_hook(lambda m, r: heard.append(("new", m.body, r.ok)), topics=not_b)
        heard.clear()
        await broker.send(msg("B", b"b5"), queue_id=0)
        assert heard == [("all", b"b5", True)]
        assert asked.count("B") == 3  # a hook added: every predicate is asked again


async def test_a_failing_topic_predicate_is_logged_and_its_hook_hears(broker_config, store_config, caplog):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("A", 1, 1))
        heard = []

        def broken(topic: str) -> bool:
            raise RuntimeError("a bug in a filter")

        broker.add_stored_hook(lambda m, r: heard.append(m.body), topics=broken)
        with caplog.at_level(logging.ERROR, logger="core.broker.sending"):
            assert (await broker.send(msg("A", b"x"), queue_id=0)).ok
        assert heard == [b"x"]
        assert "topic filter of stored hook" in caplog.text
        with pytest.raises(TypeError, match="not the string"):
            broker.add_stored_hook(lambda m, r: None, topics="A")  # one name is not a collection of names


def test_topic_hooks_forget_their_answers_past_the_cache_bound():
    hooks = TopicHooks()
    asked = []
    hooks.add(print, topics=lambda t: asked.append(t) or True)
    for i in range(5000):
        assert hooks.for_topic(f"t{i}") == (print,)
    assert len(hooks.by_topic) <= 4096 and len(asked) == 5000


def test_next_many_continues_the_sequence_of_next_and_wraps_the_counter():
    g = UniqKeyGenerator("10.1.2.3")
    first = g.next()
    keys = g.next_many(70_000)  # more than one millisecond's counter (16 bits)
    last = g.next()
    every = [first] + keys + [last]
    assert len(keys) == 70_000 and len(set(every)) == len(every)
    assert {len(k) for k in every} == {32} and all(k == k.upper() for k in every)
    assert {k[:20] for k in every} == {first[:20]} and first.startswith("0A010203")  # ip, pid, random: once
    stamps = [(int(k[20:28], 16), int(k[28:], 16)) for k in every]  # (ms in the month, counter)
    assert all(a < b for a, b in zip(stamps, stamps[1:]))
    for (t0, c0), (t1, c1) in zip(stamps[1:-1], stamps[2:-1]):  # inside the batch: the next counter, or a wrap
        assert (t1, c1) == (t0, c0 + 1) or (c0 == 0xFFFF and (t1, c1) == (t0 + 1, 0))
    assert g.next_many(0) == []
