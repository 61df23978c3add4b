"""The issue's client scenarios with our client: ordered, broadcasting, retry to DLQ, rebalance."""

import trio

from core.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageModel,
    open_producer,
    open_push_consumer,
    select_by_hash,
)

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


class Collector:
    def __init__(self, answer=None):
        self.msgs = []
        self.changed = trio.Event()
        self.answer = answer

    def __call__(self, msgs, ctx):
        self.msgs.extend(msgs)
        self.changed.set()
        self.changed = trio.Event()
        return self.answer(msgs) if self.answer else None

    async def until(self, pred, timeout=10.0):
        if isinstance(pred, int):
            n = pred
            pred = lambda: len(self.msgs) >= n  # noqa: E731
        with trio.fail_after(timeout):
            while not pred():
                await self.changed.wait()


async def test_ordered_messages_by_order_id(cluster):
    # RocketMQ's example: 3 orders, 10 steps each, sent with a selector by order id
    orders = [15103111039, 15103111065, 15103117235]
    queue_of = {}
    async with open_producer(cluster.namesrv, "PG") as producer:
        for step in range(10):
            for oid in orders:
                msg = Message("TopicOrder", f"{oid}:{step}", tags=f"Tag{step % 3}", keys=[str(oid)])
                r = await producer.send(msg, selector=select_by_hash, arg=oid)
                assert queue_of.setdefault(oid, r.queue) == r.queue
    got = Collector()
    async with open_push_consumer(cluster.namesrv, "GOrder", {"TopicOrder": "*"}, got, orderly=True,
                                  consume_from=FIRST):
        await got.until(30)
    for oid in orders:
        steps = [int(m.body.split(b":")[1]) for m in got.msgs if m.body.startswith(str(oid).encode())]
        assert steps == list(range(10))


async def test_orderly_suspend_retries_same_message_in_place(cluster):
    async with open_producer(cluster.namesrv, "PG") as producer:
        for i in range(3):
            await producer.send_orderly(Message("TopicOrderRetry", f"s{i}"), "order-1")
    tries = []

    def listener(msgs, ctx):
        tries.append(msgs[0].body)
        if msgs[0].body == b"s1" and tries.count(b"s1") < 3:
            ctx.suspend_current_queue_ms = 10
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    got = Collector(lambda msgs: listener(msgs, got.ctx))
    got.ctx = None

    def wrapped(msgs, ctx):
        got.ctx = ctx
        return got(msgs, ctx)

    async with open_push_consumer(cluster.namesrv, "GOrderRetry", {"TopicOrderRetry": "*"}, wrapped, orderly=True,
                                  consume_from=FIRST):
        await got.until(lambda: b"s2" in tries)
    assert tries == [b"s0", b"s1", b"s1", b"s1", b"s2"]


async def test_broadcasting_each_consumer_gets_everything(cluster, offset_dir):
    async with open_producer(cluster.namesrv, "PG") as producer:
        for i in range(12):
            await producer.send(Message("TopicBroadcast", f"b{i}"))
    a, b = Collector(), Collector()
    opts = dict(message_model=MessageModel.BROADCASTING, consume_from=FIRST, offset_dir=offset_dir)
    async with open_push_consumer(cluster.namesrv, "GBroadcast", {"TopicBroadcast": "*"}, a, **opts) as ca:
        async with open_push_consumer(cluster.namesrv, "GBroadcast", {"TopicBroadcast": "*"}, b, **opts):
            await a.until(12)
            await b.until(12)
        path = ca.offsets.path
    assert sorted(m.body for m in a.msgs) == sorted(m.body for m in b.msgs) == sorted(f"b{i}".encode() for i in range(12))
    assert path.exists() and '"offset":3' in path.read_text()  # local offsets: 3 messages per queue


async def test_reconsume_later_goes_through_retry_then_dlq(cluster):
    async with open_producer(cluster.namesrv, "PG") as producer:
        sent = await producer.send(Message("TopicRetry", "please-retry", keys=["rk"]))
    got = Collector(lambda msgs: ConsumeConcurrentlyStatus.RECONSUME_LATER)
    async with open_push_consumer(cluster.namesrv, "GRetry", {"TopicRetry": "*"}, got, consume_from=FIRST,
                                  max_reconsume_times=2):
        await got.until(3)
        # third delivery (reconsume 2) was refused too: it goes to %DLQ%GRetry, not back again
        with trio.fail_after(10):
            while cluster.broker.max_offset("%DLQ%GRetry", 0) < 1:
                await cluster.broker.queue_changed("%DLQ%GRetry", 0).wait()
    assert [m.reconsume_times for m in got.msgs] == [0, 1, 2]
    assert all(m.topic == "TopicRetry" and m.msg_id == sent.msg_id for m in got.msgs)
    assert [m.queue.topic for m in got.msgs] == ["TopicRetry", "%RETRY%GRetry", "%RETRY%GRetry"]
    dlq = (await cluster.broker.read_queue("%DLQ%GRetry", 0, 0)).messages()
    assert len(dlq) == 1 and dlq[0].body == b"please-retry" and dlq[0].properties["RETRY_TOPIC"] == "TopicRetry"


async def test_rebalance_two_then_three_consumers(cluster):
    async with open_producer(cluster.namesrv, "PG") as producer:
        await producer.send(Message("TopicSplit", "x"))  # creates the topic: 4 queues
    cols = [Collector() for _ in range(3)]
    opts = dict(consume_from=FIRST, rebalance_interval=60)

    def owned(consumers):
        return [sorted(mq.queue_id for mq in c.pqs if mq.topic == "TopicSplit") for c in consumers]

    async def until_split(consumers, expected):
        # each member re-splits on NOTIFY_CONSUMER_IDS_CHANGED; wait for the next rebalance of any
        with trio.fail_after(10):
            while sorted(owned(consumers)) != expected:
                async with trio.open_nursery() as n:
                    for c in consumers:
                        async def one(ev=c.rebalanced):
                            await ev.wait()
                            n.cancel_scope.cancel()
                        n.start_soon(one)

    async with open_push_consumer(cluster.namesrv, "GSplit", {"TopicSplit": "*"}, cols[0], **opts) as c1:
        async with open_push_consumer(cluster.namesrv, "GSplit", {"TopicSplit": "*"}, cols[1], **opts) as c2:
            await until_split([c1, c2], [[0, 1], [2, 3]])
            async with open_push_consumer(cluster.namesrv, "GSplit", {"TopicSplit": "*"}, cols[2], **opts) as c3:
                await until_split([c1, c2, c3], [[0, 1], [2], [3]])
            await until_split([c1, c2], [[0, 1], [2, 3]])  # and back when it leaves


async def test_delay_level_3_arrives_after_its_delay(cluster):
    # the test broker's level 3 is 300 ms (10 s with RocketMQ's default levels)
    async with open_producer(cluster.namesrv, "PG") as producer:
        sent = await producer.send(Message("TopicDelay", "later", delay_level=3))  # parked, topic created
    got = Collector()
    async with open_push_consumer(cluster.namesrv, "GDelay", {"TopicDelay": "*"}, got, consume_from=FIRST):
        await got.until(1)
    m = got.msgs[0]
    assert m.msg_id == sent.msg_id and m.topic == "TopicDelay" and "DELAY" not in m.properties
    assert m.store_timestamp - m.born_timestamp >= 300  # stored again in TopicDelay once due
