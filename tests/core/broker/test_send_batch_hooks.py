"""`Broker.send_batch` and the put and stored hooks: each item is hooked like a
single send (the MQTT gateway's routing is a pair of such hooks), while the
batch stays one topic, one queue, stored whole or not at all.

Real store files in tmp_path; the hooks are the test's own (the public
extension API).
"""

from __future__ import annotations

from core.broker import LMQ_TOPIC_PREFIX, SendResult, SendStatus, open_broker
from core.store.message import PROPERTY_INNER_MULTI_DISPATCH, Message

OK = SendStatus.SEND_OK


def items(n: int, **props: str) -> list[Message]:
    return [Message(topic="B", body=b"item %d" % i, properties=dict(props)) for i in range(n)]


async def test_each_item_goes_through_the_put_and_stored_hooks_in_order(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        assert (await broker.send_batch(items(2), queue_id=1)).ok  # the queue does not start at 0 below
        put_seen, heard = [], []
        broker.add_put_hook(lambda m: put_seen.append((m.body, m.queue_id)))
        broker.add_stored_hook(lambda m, r: heard.append((m.body, r)))
        result = await broker.send_batch(items(4), queue_id=1)
        assert result.status is OK and result.msg_count == 4 and result.queue_offset == 2
        assert put_seen == [(b"item %d" % i, 1) for i in range(4)]  # stamped with the batch's queue first
        assert [body for body, _r in heard] == [b"item %d" % i for i in range(4)]
        stored = (await broker.read_queue("B", 1, 2, 32)).messages()
        for (body, r), m in zip(heard, stored, strict=True):
            # each item's own outcome: the offsets a single send of it would report
            assert (r.status, r.topic, r.queue_id, r.msg_count) == (OK, "B", 1, 1)
            assert (r.queue_offset, r.physical_offset, r.msg_id, r.uniq_key) == (
                m.queue_offset, m.physical_offset, m.msg_id, m.properties["UNIQ_KEY"])
            assert body == m.body
        assert result.msg_id.split(",") == [r.msg_id for _b, r in heard]


async def test_a_put_hook_can_dispatch_items_to_light_queues(broker_config, store_config):
    """What the gateway does for persistent sessions: each item gets a unit in the session's queue."""
    async with open_broker(broker_config, store_config) as broker:
        session = LMQ_TOPIC_PREFIX + "session-1"

        def dispatch(m: Message) -> None:
            if m.body != b"item 1":
                m.properties[PROPERTY_INNER_MULTI_DISPATCH] = session

        broker.add_put_hook(dispatch)
        assert (await broker.send_batch(items(3), queue_id=0)).ok
        got = await broker.read_queue(session, 0, 0, 32)
        assert [m.body for m in got.messages()] == [b"item 0", b"item 2"]
        assert [m.body for m in (await broker.read_queue("B", 0, 0, 32)).messages()] == [b"item 0", b"item 1", b"item 2"]


async def test_an_item_refused_by_a_put_hook_refuses_the_batch(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        refusal = SendResult(SendStatus.NO_PERMISSION, topic="B", remark="refused by the test hook")
        broker.add_put_hook(lambda m: refusal if m.body == b"item 1" else None)
        heard = []
        broker.add_stored_hook(lambda m, r: heard.append((m.body, r.status)))
        result = await broker.send_batch(items(3), queue_id=0)
        assert result is refusal
        # the stored hooks hear of exactly the items whose put hooks ran (a hook may hold state for them)
        assert heard == [(b"item 0", SendStatus.NO_PERMISSION), (b"item 1", SendStatus.NO_PERMISSION)]
        assert broker.max_offset("B", 0) == 0


async def test_a_put_hook_that_moves_an_item_refuses_the_batch(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        def park(m: Message) -> None:
            if m.body == b"item 2":
                m.topic = "ELSEWHERE"

        broker.add_put_hook(park)
        heard = []
        broker.add_stored_hook(lambda m, r: heard.append(r.status))
        result = await broker.send_batch(items(3), queue_id=0)
        assert result.status is SendStatus.MESSAGE_ILLEGAL and "batch" in result.remark
        assert heard == [SendStatus.MESSAGE_ILLEGAL] * 3
        assert broker.max_offset("B", 0) == 0 and broker.get_topic("ELSEWHERE") is None


async def test_the_stored_hooks_hear_a_batch_the_store_refuses(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        heard = []
        broker.add_put_hook(lambda m: None)
        broker.add_stored_hook(lambda m, r: heard.append(r.status))
        huge = items(2)
        huge[1].properties["P"] = "x" * 40_000  # past the 32 KiB the properties may take
        result = await broker.send_batch(huge, queue_id=0)
        assert not result.ok
        assert heard == [result.status] * 2
        assert broker.max_offset("B", 0) == 0


async def test_a_hook_with_when_runs_only_on_messages_that_carry_one_of_its_properties(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        seen = []
        broker.add_put_hook(lambda m: seen.append(("first", m.body)))
        broker.add_put_hook(lambda m: seen.append(("when", m.body)), when=("DELAY_ME", "OR_ME"))
        broker.add_put_hook(lambda m: seen.append(("last", m.body)))
        plain = Message(topic="B", body=b"plain")
        marked = Message(topic="B", body=b"marked", properties={"OR_ME": "1"})
        assert all(r.ok for r in await broker.send_many([(plain, 0), (marked, 0)]))
        assert (await broker.send_batch(items(1, DELAY_ME="1"), queue_id=0)).ok
        # in the order they were added; the `when` hook skips the plain message only
        assert seen == [("first", b"plain"), ("last", b"plain"),
                        ("first", b"marked"), ("when", b"marked"), ("last", b"marked"),
                        ("first", b"item 0"), ("when", b"item 0"), ("last", b"item 0")]
