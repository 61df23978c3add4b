"""The push consumer's flow control (Java ``DefaultMQPushConsumerImpl.pullMessage``): a
queue stops being pulled while it holds more than ``pull_threshold_size_for_queue``
MiB of bodies, or (concurrent consumers) offsets spanning more than
``consume_concurrently_max_span``; pulling resumes as the listener catches up.
Real name server and broker on 127.0.0.1, our producer and push consumer."""

import trio
from cluster import create_routed_topic

from core.client import ConsumeFromWhere, Message, open_producer, open_push_consumer

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


async def _send(cluster, topic: str, n: int, size: int) -> None:
    async with open_producer(cluster.namesrv, "PG-flow") as producer:
        for i in range(n):
            await producer.send(Message(topic, b"%06d" % i + b"x" * (size - 6)))


async def test_a_queue_holding_more_than_the_size_threshold_is_not_pulled(cluster):
    await create_routed_topic(cluster, "FlowSize")
    await _send(cluster, "FlowSize", 40, 64 * 1024)  # 2.5 MiB in all
    release = trio.Event()
    got = []

    async def slow(msgs, ctx):
        await release.wait()
        got.extend(msgs)

    async with open_push_consumer(cluster.namesrv, "GFlowSize", {"FlowSize": "*"}, slow, consume_from=FIRST,
                                  pull_batch_size=4, pull_threshold_size_for_queue=1) as consumer:
        with trio.fail_after(10):
            while not consumer.flow_controlled:
                await trio.sleep(0.02)
        await trio.sleep(0.3)  # no pull goes out while it is held back
        (pq,) = [q for mq, q in consumer.pqs.items() if mq.topic == "FlowSize"]
        assert len(pq) <= 20 and pq.bytes <= 1024 * 1024 + 4 * 64 * 1024  # the threshold and one pull past it
        release.set()
        with trio.fail_after(20):
            while len(got) < 40:
                await trio.sleep(0.05)
    assert sorted(m.body[:6] for m in got) == [b"%06d" % i for i in range(40)]


async def test_stuck_messages_stop_pulls_past_the_span(cluster):
    """Java's rule: the span is the highest offset held minus the lowest. With the two
    oldest messages stuck in the listener (two consuming slots) the rest stay cached, and
    pulls stop once they span more than the limit, far below the count threshold."""
    await create_routed_topic(cluster, "FlowSpan")
    await _send(cluster, "FlowSpan", 60, 16)
    release = trio.Event()
    done = []

    async def stuck_on_first_two(msgs, ctx):
        if msgs[0].queue_offset < 2:
            await release.wait()
        done.extend(msgs)

    async with open_push_consumer(cluster.namesrv, "GFlowSpan", {"FlowSpan": "*"}, stuck_on_first_two,
                                  consume_from=FIRST, pull_batch_size=4, consume_concurrency=2,
                                  consume_concurrently_max_span=10) as consumer:
        with trio.fail_after(10):
            while not consumer.flow_controlled:
                await trio.sleep(0.02)
        await trio.sleep(0.3)  # no pull goes out while it is held back
        (pq,) = [q for mq, q in consumer.pqs.items() if mq.topic == "FlowSpan"]
        assert pq.span() > 10 and 0 in pq.msgs and len(pq) <= 16  # the span, and the pull that crossed it
        assert not done
        release.set()
        with trio.fail_after(20):
            while len(done) < 60:
                await trio.sleep(0.05)
        info = consumer.running_info()
        assert info["properties"]["consumeConcurrentlyMaxSpan"] == "10"
