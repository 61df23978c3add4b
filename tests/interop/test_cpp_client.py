"""The unmodified PyPI `rocketmq` 0.4.4 client (C++ 1.2.x) against our name server and broker.

Each test uses its own topic and groups. A push consumer's first rebalance
happens when the broker notifies the group of the new member (right after
its first heartbeat) provided the topic's route already exists, so topics
are created first. The same holds for ``%RETRY%<group>``: the broker creates
it at the group's first heartbeat, after the consumer read its routes, so the
client only sees it at its next route update (3 s after start, then every
30 s per process) and allocates it at the next 10 s rebalance, as against a
Java broker; a test that needs retries creates the retry topic first.
"""

import threading
import time
from collections import defaultdict

import pytest

from core.broker import retry_topic
from harness import create_topic, queue_count, wait_for
from rocketmq.client import Message, MessageModel, Producer, PushConsumer, SendStatus


def producer(cluster, group):
    p = Producer(group)
    p.set_namesrv_addr(cluster.namesrv)
    p.start()
    return p


def consumer(cluster, group, topic, callback, expression="*", *, orderly=False, model=MessageModel.CLUSTERING,
             instance=None):
    c = PushConsumer(group, orderly=orderly, message_model=model)
    c.set_namesrv_addr(cluster.namesrv)
    if instance:
        c.set_instance_name(instance)
    c.subscribe(topic, callback, expression)
    c.start()
    return c


def msg(topic, body, tags=None, keys=None):
    m = Message(topic)
    m.set_body(body)
    if tags:
        m.set_tags(tags)
    if keys:
        m.set_keys(keys)
    return m


class Inbox:
    """Thread-safe record of what a listener received."""

    def __init__(self, fail=None):
        self.lock = threading.Lock()
        self.items = []
        self.fail = fail

    def __call__(self, m):
        with self.lock:
            self.items.append((m.topic, m.tags, m.body, m.queue_id, m.reconsume_times))
        if self.fail and self.fail(m):
            raise RuntimeError("asked to reconsume later")

    def bodies(self):
        with self.lock:
            return [i[2] for i in self.items]

    def __len__(self):
        with self.lock:
            return len(self.items)


def test_sync_and_oneway_send_then_push_consume_everything(cluster, names):
    topic, pg, cg = names("TopicSync"), names("PG"), names("CG")
    p = producer(cluster, pg)
    try:
        results = [p.send_sync(msg(topic, f"sync {i}", "TagA", f"key{i}")) for i in range(20)]
        assert all(r.status == SendStatus.OK for r in results)
        for i in range(10):
            p.send_oneway(msg(topic, f"oneway {i}"))
        assert wait_for(lambda: sum(queue_count(cluster, topic, q) for q in range(4)) == 30, 10)
        inbox = Inbox()
        c = consumer(cluster, cg, topic, inbox)
        try:
            assert wait_for(lambda: len(inbox) >= 30, 20), len(inbox)
            expected = {f"sync {i}".encode() for i in range(20)} | {f"oneway {i}".encode() for i in range(10)}
            assert set(inbox.bodies()) == expected
        finally:
            c.shutdown()
    finally:
        p.shutdown()


def test_ordered_messages(cluster, names):
    """RocketMQ's ordered example: 3 orders x 10 steps, queue chosen by order id."""
    topic, pg, cg = names("TopicOrder"), names("PG"), names("CG")
    create_topic(cluster, topic, 4)
    p = producer(cluster, pg)
    inbox = Inbox()
    c = consumer(cluster, cg, topic, inbox, orderly=True)
    try:
        time.sleep(0.5)
        for step in range(10):
            for order_id in (1001, 1002, 1003):
                r = p.send_orderly(msg(topic, f"{order_id}:{step}", keys=str(order_id)), order_id)
                assert r.status == SendStatus.OK
        assert wait_for(lambda: len(inbox) >= 30, 20), len(inbox)
        per_order = defaultdict(list)
        queues = defaultdict(set)
        for _t, _tags, body, qid, _rc in inbox.items:
            oid, step = body.decode().split(":")
            per_order[oid].append(int(step))
            queues[oid].add(qid)
        assert {k: v for k, v in per_order.items()} == {str(o): list(range(10)) for o in (1001, 1002, 1003)}
        assert all(len(q) == 1 for q in queues.values())
    finally:
        c.shutdown()
        p.shutdown()


def test_tag_subscription(cluster, names):
    topic, pg, cg = names("TopicTag"), names("PG"), names("CG")
    create_topic(cluster, topic, 4)
    p = producer(cluster, pg)
    inbox = Inbox()
    c = consumer(cluster, cg, topic, inbox, "TagA || TagC")
    try:
        for i in range(30):
            p.send_sync(msg(topic, f"{'ABC'[i % 3]}{i}", "Tag" + "ABC"[i % 3]))
        assert wait_for(lambda: len(inbox) >= 20, 20)
        time.sleep(0.5)
        assert sorted(t for _to, t, *_ in inbox.items) == sorted([b"TagA"] * 10 + [b"TagC"] * 10)
        assert not any(b.startswith(b"B") for b in inbox.bodies())
    finally:
        c.shutdown()
        p.shutdown()


def test_batch_send_delivers_each_message(cluster, names):
    topic, pg, cg = names("TopicBatch"), names("PG"), names("CG")
    create_topic(cluster, topic, 4)
    p = producer(cluster, pg)
    try:
        r = p.send_batch([msg(topic, f"batch {i}", "TagB") for i in range(10)])
        assert r.status == SendStatus.OK
        assert sum(queue_count(cluster, topic, q) for q in range(4)) == 10
        inbox = Inbox()
        c = consumer(cluster, cg, topic, inbox)
        try:
            assert wait_for(lambda: len(inbox) >= 10, 20)
            assert sorted(inbox.bodies()) == sorted(f"batch {i}".encode() for i in range(10))
        finally:
            c.shutdown()
    finally:
        p.shutdown()


def test_broadcasting(cluster, names):
    topic, pg, cg = names("TopicBcast"), names("PG"), names("CG")
    create_topic(cluster, topic, 4)
    inboxes = [Inbox(), Inbox()]
    cs = [consumer(cluster, cg, topic, inboxes[i], model=MessageModel.BROADCASTING, instance=names(f"bc{i}"))
          for i in range(2)]
    p = producer(cluster, pg)
    try:
        # broadcasting consumers start at the queues' max offset: let them allocate first
        assert wait_for(lambda: len(cluster.call_sync(cluster.remoting.ctx.clients.consumer_ids, cg)) == 2, 10)
        time.sleep(1.0)
        for i in range(12):
            p.send_sync(msg(topic, f"b{i}"))
        assert wait_for(lambda: all(len(x) >= 12 for x in inboxes), 20), [len(x) for x in inboxes]
        for x in inboxes:
            assert sorted(x.bodies()) == sorted(f"b{i}".encode() for i in range(12))
    finally:
        for c in cs:
            c.shutdown()
        p.shutdown()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the binding re-raises our exception
def test_reconsume_later_goes_through_retry_then_dlq(cluster, names):
    """A listener that always fails: the message comes back via %RETRY%<group>
    with growing reconsume times, and after 16 retries it is in %DLQ%<group>.
    The cluster runs with short delay levels (harness.FAST_DELAY_LEVELS).

    The group's retry topic exists before the consumer starts, as for any group
    that has consumed before (module docstring: otherwise the first retry waits
    for the client's route and rebalance timers, over a minute once under load).

    The C++ client's try-lock on its transport table fails at once whenever
    another of its threads holds the lock, not after its 3 s: the library
    (PyPI rocketmq, built with GCC 4.8) hands pthread_mutex_timedlock a
    steady-clock deadline, which it reads as wall-clock time long past
    (CI's log: "GetTransport ... get timed_mutex timeout" 0.2 ms after the
    consume that needed it). A sendMessageBack that meets it is dropped: the
    client commits the retry queue's offset past the message (the Java client
    consumes it again), and the chain stopped at 8 of 17 deliveries once. So
    the consumer is a client instance of its own (the process's other
    clients, one "DEFAULT" instance, do not share its table), and the
    listener fails 50 ms after the delivery: the client's next pull, sent as
    the delivery came, has taken its transport by then, not at the moment
    sendMessageBack takes its own."""
    topic, pg, cg = names("TopicRetry"), names("PG"), names("CG")
    create_topic(cluster, topic, 1)
    retry = retry_topic(cg)
    cluster.call(cluster.broker.ensure_topic, retry, 1)
    inbox = Inbox(fail=lambda m: time.sleep(0.05) or True)
    c = consumer(cluster, cg, topic, inbox, instance=names("retry"))
    p = producer(cluster, pg)
    try:
        # both queues long-polled: the consumer has its route and assignment for each
        assert wait_for(lambda: all(cluster.call_sync(cluster.broker.queue_waited_on, t, 0) for t in (topic, retry)), 30)
        p.send_sync(msg(topic, "poison", "TagP"))
        dlq = f"%DLQ%{cg}"
        assert wait_for(lambda: cluster.call_sync(cluster.broker.get_topic, dlq) is not None
                        and queue_count(cluster, dlq) == 1, 60), len(inbox)
        times = [rc for t, _tags, b, _q, rc in inbox.items if b == b"poison"]
        assert times[:1] == [0] and max(times) == 16 and len(times) == 17
        assert all(t == topic for t, *_ in inbox.items)  # RETRY_TOPIC restored by the client
        raw = cluster.call(cluster.broker.read_queue, dlq, 0, 0, 1)
        (dead,) = raw.messages()
        assert dead.body == b"poison" and dead.reconsume_times == 17
        assert dead.properties["RETRY_TOPIC"] == topic
    finally:
        c.shutdown()
        p.shutdown()


def test_consumers_split_queues_and_rebalance_when_one_joins(cluster, names):
    topic, pg, cg = names("TopicSplit"), names("PG"), names("CG")
    create_topic(cluster, topic, 4)
    p = producer(cluster, pg)
    inboxes = [Inbox(), Inbox(), Inbox()]
    cs = []
    try:
        for i in range(2):
            cs.append(consumer(cluster, cg, topic, inboxes[i], instance=names(f"split{i}")))
        assert wait_for(lambda: len(cluster.call_sync(cluster.remoting.ctx.clients.consumer_ids, cg)) == 2, 10)

        def round_trip(tag, n_consumers):
            before = [len(x) for x in inboxes]
            for q in range(4):
                p.send_orderly(msg(topic, f"{tag}-q{q}"), q)
            assert wait_for(lambda: sum(len(x) for x in inboxes) - sum(before) >= 4, 20)
            time.sleep(0.3)
            owners = {}
            for i, x in enumerate(inboxes[:n_consumers]):
                for _t, _tags, body, qid, _rc in x.items[before[i]:]:
                    assert qid not in owners, f"queue {qid} delivered to two consumers"
                    owners[qid] = i
            return owners

        time.sleep(1.0)
        owners = round_trip("two", 2)
        assert sorted(owners) == [0, 1, 2, 3]
        assert sorted(list(owners.values()).count(i) for i in range(2)) == [2, 2]

        cs.append(consumer(cluster, cg, topic, inboxes[2], instance=names("split2")))
        assert wait_for(lambda: len(cluster.call_sync(cluster.remoting.ctx.clients.consumer_ids, cg)) == 3, 10)
        time.sleep(2.0)  # NOTIFY_CONSUMER_IDS_CHANGED -> every member rebalances
        owners = round_trip("three", 3)
        assert sorted(owners) == [0, 1, 2, 3]
        assert sorted(list(owners.values()).count(i) for i in range(3)) == [1, 1, 2]
    finally:
        for c in cs:
            c.shutdown()
        p.shutdown()
