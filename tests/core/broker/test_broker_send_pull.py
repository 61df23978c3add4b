"""Send and pull through a real store: round trip, queues, auto-creation, errors, tags."""

from __future__ import annotations

from core.broker import (
    BrokerConfig, PullStatus, SendStatus, TopicConfig, open_broker, parse_subscription,
)
from core.store.message import Message, PROPERTY_CLUSTER, PROPERTY_WAIT, pack_host


def msg(topic: str, body: bytes = b"hello", **props: str) -> Message:
    return Message(topic=topic, body=body, properties=dict(props))


async def test_send_then_pull_round_trip(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        sent = await broker.send(msg("T", b"payload", TAGS="TagA", KEYS="k1 k2", WAIT="true"),
                                 queue_id=1)
        assert sent.status is SendStatus.SEND_OK and sent.ok
        assert (sent.topic, sent.queue_id, sent.queue_offset) == ("T", 1, 0)
        assert len(sent.msg_id) == 32 and len(sent.uniq_key) == 32

        got = await broker.pull("G", "T", 1, 0, 32, "*")
        assert got.status is PullStatus.FOUND
        assert (got.next_begin_offset, got.min_offset, got.max_offset) == (1, 0, 1)
        [m] = got.messages()
        assert m.body == b"payload" and m.tags == "TagA" and m.keys == ["k1", "k2"]
        assert m.queue_id == 1 and m.queue_offset == 0 and m.msg_id == sent.msg_id
        assert m.properties[PROPERTY_CLUSTER] == broker_config.broker_cluster_name
        assert PROPERTY_WAIT not in m.properties
        assert m.properties["UNIQ_KEY"] == sent.uniq_key
        assert m.store_host == pack_host(broker_config.broker_ip1, broker_config.listen_port)
        assert m.born_timestamp > 0 and m.store_timestamp >= m.born_timestamp - 1000

        # offset == max: nothing new (19), nextBegin stays
        empty = await broker.pull("G", "T", 1, 1, 32, "*")
        assert empty.status is PullStatus.PULL_NOT_FOUND and empty.next_begin_offset == 1
        # offset > max: moved to max (21)
        moved = await broker.pull("G", "T", 1, 5, 32, "*")
        assert moved.status is PullStatus.PULL_OFFSET_MOVED and moved.next_begin_offset == 0  # min, as RocketMQ when min == 0
        # a queue with no entries: 19 at offset 0, 21 elsewhere
        assert (await broker.pull("G", "T", 2, 0, 32, "*")).status is PullStatus.PULL_NOT_FOUND
        assert (await broker.pull("G", "T", 2, 3, 32, "*")).status is PullStatus.PULL_OFFSET_MOVED


async def test_round_robin_over_write_queues(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        results = [await broker.send(msg("RR", bytes([i]))) for i in range(8)]
        assert [r.queue_id for r in results] == [0, 1, 2, 3, 0, 1, 2, 3]
        assert [r.queue_offset for r in results] == [0, 0, 0, 0, 1, 1, 1, 1]
        assert broker.get_topic("RR").write_queue_nums == broker_config.default_topic_queue_nums
        for qid in range(4):
            assert broker.max_offset("RR", qid) == 2


async def test_auto_create_off_answers_topic_not_exist(store_config):
    config = BrokerConfig(auto_create_topic_enable=False)
    async with open_broker(config, store_config) as broker:
        r = await broker.send(msg("Nope"))
        assert r.status is SendStatus.TOPIC_NOT_EXIST and r.status.code == 17 and not r.ok
        assert broker.get_topic("Nope") is None
        assert (await broker.pull("G", "Nope", 0, 0)).status is PullStatus.TOPIC_NOT_EXIST
        await broker.update_topic(TopicConfig("Made", 2, 2))
        assert (await broker.send(msg("Made"))).status is SendStatus.SEND_OK
        # retry topics are created whatever the setting, with one queue
        r = await broker.send(msg("%RETRY%G"))
        assert r.ok and broker.get_topic("%RETRY%G").write_queue_nums == 1


async def test_send_errors(broker_config, store_config):
    async with open_broker(broker_config.replace(max_message_size=300), store_config) as broker:
        await broker.update_topic(TopicConfig("T", 2, 2))
        await broker.update_topic(TopicConfig("RO", 1, 1, perm=4))
        assert (await broker.send(msg("T", b"x" * 301))).status is SendStatus.MESSAGE_ILLEGAL
        assert (await broker.send(msg("bad.topic"))).status is SendStatus.SYSTEM_ERROR
        assert (await broker.send(msg("T"), queue_id=2)).status is SendStatus.SYSTEM_ERROR
        assert (await broker.send(msg("RO"))).status is SendStatus.NO_PERMISSION
        assert (await broker.send(msg("SCHEDULE_TOPIC_XXXX"))).status is SendStatus.NO_PERMISSION
        assert (await broker.send(msg("SCHEDULE_TOPIC_XXXX"), queue_id=2, internal=True)).ok
        assert (await broker.send(msg("T", P="x" * 40000))).status is SendStatus.MESSAGE_ILLEGAL
        assert (await broker.pull("G", "T", 7, 0)).status is PullStatus.SYSTEM_ERROR
        assert (await broker.pull("G", "T", 0, 0, 32, "||")).status is PullStatus.SUBSCRIPTION_PARSE_FAILED


async def test_batch_and_send_many(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        batch = await broker.send_batch([msg("B", bytes([i]), KEYS=f"k{i}") for i in range(5)], queue_id=2)
        assert batch.ok and batch.queue_id == 2 and batch.queue_offset == 0 and batch.msg_count == 5
        ids = batch.msg_id.split(",")
        assert len(ids) == 5 and len(set(ids)) == 5
        got = await broker.pull("G", "B", 2, 0, 32)
        assert [m.body for m in got.messages()] == [bytes([i]) for i in range(5)]
        assert [m.msg_id for m in got.messages()] == ids
        assert [m.queue_offset for m in got.messages()] == list(range(5))

        bad = await broker.send_batch([msg("B"), msg("C")])
        assert bad.status is SendStatus.MESSAGE_ILLEGAL
        assert (await broker.send_batch([msg("B", DELAY="3")])).status is SendStatus.MESSAGE_ILLEGAL
        for timer in ("TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELIVER_MS", "__STARTDELIVERTIME"):
            refused = await broker.send_batch([msg("B"), msg("B", **{timer: "5000"})])  # parking would take it off the batch's queue
            assert refused.status is SendStatus.MESSAGE_ILLEGAL and "delayed" in refused.remark
        assert broker.max_offset("B", 2) == 5

        many = await broker.send_many([(msg("M1"), 0), (msg("M2"), None), (msg("nope.x"), None), (msg("M1"), 0)])
        assert [r.status for r in many] == [SendStatus.SEND_OK, SendStatus.SEND_OK, SendStatus.SYSTEM_ERROR, SendStatus.SEND_OK]
        assert [r.queue_offset for r in many if r.topic == "M1"] == [0, 1]


async def test_tag_filter(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        for tag in ["TagA", "TagB", "TagC", "TagA", None]:
            props = {"TAGS": tag} if tag else {}
            assert (await broker.send(msg("T", tag.encode() if tag else b"-", **props))).ok
        got = await broker.pull("G", "T", 0, 0, 32, "TagA || TagC")
        assert got.status is PullStatus.FOUND
        assert [m.tags for m in got.messages()] == ["TagA", "TagC", "TagA"]
        assert got.next_begin_offset == 5
        everything = await broker.pull("G", "T", 0, 0, 32, parse_subscription("T", "*"))
        assert everything.message_count == 5
        none = await broker.pull("G", "T", 0, 0, 32, "TagZ")
        assert none.status is PullStatus.PULL_RETRY_IMMEDIATELY and none.next_begin_offset == 5
