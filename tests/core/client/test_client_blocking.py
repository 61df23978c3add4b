"""The blocking facade, driven from a plain thread while the broker runs on the test's trio loop."""

import queue

import trio

from core.client import ConsumeFromWhere, Message, Producer, PullConsumer, PushConsumer


async def test_blocking_producer_and_consumers(cluster):
    ns = cluster.namesrv

    def script():
        callbacks = queue.Queue()
        with Producer(ns, "PGBlock") as p:
            r1 = p.send(Message("TopicBlock", "sync", tags="A"))
            fut = p.send_async(Message("TopicBlock", "async", tags="A"), lambda r, e: callbacks.put((r, e)))
            r2 = fut.result(timeout=5)
            p.send_oneway(Message("TopicBlock", "oneway", tags="A"))
            r3 = p.send_orderly(Message("TopicBlock", "ordered", tags="A"), "key-1")
            assert callbacks.get(timeout=5) == (r2, None)
        got = queue.Queue()
        consumer = PushConsumer(ns, "GBlock", consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("TopicBlock", "A", lambda msgs, ctx: [got.put(m.body) for m in msgs]).start()
        try:
            pushed = sorted(got.get(timeout=10) for _ in range(4))
        finally:
            consumer.shutdown()
        with PullConsumer(ns, "GBlockPull") as pull:
            qs = pull.fetch_queues("TopicBlock")
            pull.assign(qs)
            polled = []
            while len(polled) < 4:
                polled.extend(m.body for m in pull.poll(5))
        return [r1, r2, r3], pushed, sorted(polled)

    results, pushed, polled = await trio.to_thread.run_sync(script)
    assert all(r.ok for r in results)
    assert pushed == polled == sorted([b"sync", b"async", b"oneway", b"ordered"])
