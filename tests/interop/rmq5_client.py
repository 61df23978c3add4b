"""Drive the unmodified PyPI ``rocketmq-python-client`` (5.x) against a gRPC endpoint.

Run as ``python rmq5_client.py HOST:PORT SCENARIO``; prints one JSON object
with what the client observed (the test asserts on it). A separate process
on purpose: the client's generated ``apache.rocketmq.v2`` classes and ours
(core/proxy) cannot share one protobuf descriptor pool, and this keeps the
test process free of both.

The 4.x ``rocketmq`` package (the C++ client, also in the dev extra) ships an
empty ``rocketmq/__init__.py`` that breaks this client when installed after
it; the Makefile installs this one last (docs/CLIENTS.md).
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager

from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import (ConsumeResult, LitePushConsumer, LiteSimpleConsumer, MessageListener, PushConsumer,
                                  SimpleConsumer)
from rocketmq.v5.exception import LiteSubscriptionQuotaExceededException
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.grpc_protocol import TransactionResolution
from rocketmq.v5.producer import Producer, TransactionChecker


def config(endpoint: str) -> ClientConfiguration:
    return ClientConfiguration(endpoint, Credentials(), request_timeout=10)


def message(topic: str, body: bytes, **kw) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    for key, value in kw.items():
        if key == "properties":
            for k, v in value.items():
                m.add_property(k, v)
        else:
            setattr(m, key, value)
    return m


def seen(m, t0: float) -> dict:
    return {"body": m.body.decode(), "tag": m.tag, "keys": list(m.keys or []), "properties": dict(m.properties or {}),
            "group": m.message_group, "attempt": m.delivery_attempt, "id": m.message_id, "at": time.time() - t0}


def send_and_receive(endpoint: str, topic: str, group: str) -> dict:
    t0 = time.time()
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    sent = []
    try:
        r = producer.send(message(topic, b"normal", tag="TagA", keys="k1", properties={"color": "red"}))
        sent.append(r.message_id)
        deliver_at = int(time.time()) + 3
        r = producer.send(message(topic, b"delayed", delivery_timestamp=deliver_at))
        sent.append(r.message_id)
        for i in range(3):
            for g in ("g1", "g2"):
                sent.append(producer.send(message(topic, f"{g}-{i}".encode(), message_group=g)).message_id)
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, 5)
    consumer.startup()
    got = []
    try:
        while len(got) < len(sent) and time.time() - t0 < 40:
            for m in consumer.receive(16, 15):
                got.append(seen(m, t0))
                consumer.ack(m)
        t = time.time()
        after = [seen(m, t0) for m in consumer.receive(16, 2)]
        empty_wait = time.time() - t
    finally:
        consumer.shutdown()
    return {"sent": sent, "got": got, "after_ack": after, "empty_wait": empty_wait, "deliver_at": deliver_at - t0}


def redelivery(endpoint: str, topic: str, group: str) -> dict:
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        for body in (b"a", b"b", b"c"):
            producer.send(message(topic, body))
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, 10)
    consumer.startup()
    events = []
    t0 = time.time()
    try:
        first = {}
        while len(first) < 3 and time.time() - t0 < 20:
            for m in consumer.receive(16, 2):
                first[m.body.decode()] = m
        events.append({"step": "first", "got": sorted((k, m.delivery_attempt) for k, m in first.items())})
        consumer.ack(first["a"])
        consumer.change_invisible_duration(first["c"], 7)
        t1 = time.time()
        again = []
        while len(again) < 2 and time.time() - t0 < 40:
            for m in consumer.receive(16, 20):
                again.append(m)
                events.append({"step": "again", "body": m.body.decode(), "attempt": m.delivery_attempt,
                               "after": time.time() - t1})
        try:
            consumer.ack(first["b"])  # the handle of b's first delivery: stale now
            events.append({"step": "stale_ack", "error": None})
        except Exception as e:
            events.append({"step": "stale_ack", "error": f"{type(e).__name__}: {e}"})
        for m in again:
            consumer.ack(m)
        events.append({"step": "left", "got": [m.body.decode() for m in consumer.receive(16, 4)]})
    finally:
        consumer.shutdown()
    return {"events": events}


def send(endpoint: str, topic: str, body: str, properties: str = "{}") -> dict:
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        return {"id": producer.send(message(topic, body.encode(), properties=json.loads(properties))).message_id}
    finally:
        producer.shutdown()


def receive(endpoint: str, topic: str, group: str, count: str) -> dict:
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, 5)
    consumer.startup()
    got, t0 = [], time.time()
    try:
        while len(got) < int(count) and time.time() - t0 < 30:
            for m in consumer.receive(16, 30):
                got.append(seen(m, t0))
                consumer.ack(m)
    finally:
        consumer.shutdown()
    return {"got": got}


class CommitOnCheck(TransactionChecker):
    """Answers the broker's check of a transaction left open: commit."""

    def __init__(self) -> None:
        self.checked: list[str] = []

    def check(self, message) -> TransactionResolution:
        self.checked.append(message.body.decode())
        return TransactionResolution.COMMIT


@contextmanager
def committing_producer(endpoint: str, topic: str, group: str):
    """A producer of ``topic`` whose checker commits (`CommitOnCheck`), and a simple consumer of it."""
    checker = CommitOnCheck()
    producer = Producer(config(endpoint), (topic,), checker)
    producer.startup()
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, 3)
    consumer.startup()
    try:
        yield checker, producer, consumer
    finally:
        consumer.shutdown()
        producer.shutdown()


def receive_acked(consumer, count: int, t0: float, seconds: float = 40) -> list[dict]:
    """Receive (and ack) until ``count`` messages came or ``seconds`` after ``t0`` passed."""
    got = []
    while time.time() - t0 < seconds and len(got) < count:
        for m in consumer.receive(16, 30):
            got.append(seen(m, t0))
            consumer.ack(m)
    return got


def transactions(endpoint: str, topic: str, group: str) -> dict:
    with committing_producer(endpoint, topic, group) as (checker, producer, consumer):
        t0 = time.time()
        for body, end in (("committed", "commit"), ("rolled back", "rollback"), ("left open", None)):
            tx = producer.begin_transaction()
            receipt = producer.send(message(topic, body.encode()), tx)
            assert receipt.transaction_id, "no transaction id"
            if end == "commit":
                tx.commit()
            elif end == "rollback":
                tx.rollback()
        got = receive_acked(consumer, 2, t0)
        got += [seen(m, t0) for m in consumer.receive(16, 30)]  # nothing more: the rollback stays out
    return {"got": [m["body"] for m in got], "checked": checker.checked}


class Undecided(TransactionChecker):
    def check(self, message) -> TransactionResolution:
        return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED


def tx_leave_open(endpoint: str, topic: str) -> dict:
    """Send one half and go away (NotifyClientTermination) without ending it."""
    producer = Producer(config(endpoint), (topic,), Undecided())
    producer.startup()
    try:
        receipt = producer.send(message(topic, b"left open"), producer.begin_transaction())
    finally:
        producer.shutdown()
    return {"id": receipt.message_id}


def tx_commit_on_check(endpoint: str, topic: str, group: str) -> dict:
    """A producer of ``topic`` whose checker commits, and a consumer: what was checked and received."""
    with committing_producer(endpoint, topic, group) as (checker, _producer, consumer):
        got = receive_acked(consumer, 1, time.time())
    return {"got": [(m["body"], m["id"]) for m in got], "checked": checker.checked}


class FailFirstDelivery(MessageListener):
    """Consumes every message; the body ``retry-me`` fails on its first delivery."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def consume(self, message) -> ConsumeResult:
        body = message.body.decode()
        self.seen.append((body, message.delivery_attempt))
        return ConsumeResult.FAILURE if body == "retry-me" and message.delivery_attempt == 1 else ConsumeResult.SUCCESS


def push(endpoint: str, topic: str, group: str) -> dict:
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        for body in ("one", "two", "retry-me"):
            producer.send(message(topic, body.encode()))
    finally:
        producer.shutdown()
    listener = FailFirstDelivery()
    consumer = PushConsumer(config(endpoint), group, listener, {topic: FilterExpression("*")})
    consumer.startup()
    t0 = time.time()
    try:
        while time.time() - t0 < 30 and ("retry-me", 2) not in listener.seen:
            time.sleep(0.2)
        time.sleep(2)  # anything delivered again after its success would show up here
    finally:
        consumer.shutdown()
    return {"seen": listener.seen}


def restart_before(endpoint: str, topic: str, group: str) -> dict:
    """Two messages received with a 15 s invisible time; only ``done`` is acked."""
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        for body in (b"keep", b"done"):
            producer.send(message(topic, body))
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, 5)
    consumer.startup()
    got = []
    try:
        t0 = time.time()
        while len(got) < 2 and time.time() - t0 < 20:
            got += consumer.receive(16, 15)
        for m in got:
            if m.body == b"done":
                consumer.ack(m)
    finally:
        consumer.shutdown()
    return {"got": sorted(m.body.decode() for m in got), "at": time.time()}


def restart_after(endpoint: str, topic: str, group: str) -> dict:
    """After the restart: a first short receive, then until something comes."""
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, 3)
    consumer.startup()
    try:
        first = [(m.body.decode(), m.delivery_attempt) for m in consumer.receive(16, 30)]
        first_end = time.time()
        later, t0 = [], time.time()
        while not later and time.time() - t0 < 30:
            later = [(m.body.decode(), m.delivery_attempt, time.time()) for m in consumer.receive(16, 30)]
    finally:
        consumer.shutdown()
    return {"first": first, "first_end": first_end, "later": later}


def body_limit(endpoint: str, topic: str, size: str) -> dict:
    """Send a body of ``size`` bytes; the producer checks the broker's limit from the settings exchange."""
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        time.sleep(1)  # the settings answer arrives on the Telemetry stream, after startup returns
        try:
            return {"id": producer.send(message(topic, b"x" * int(size))).message_id, "error": None}
        except Exception as e:
            return {"id": None, "error": f"{type(e).__name__}: {e}"}
    finally:
        producer.shutdown()


class FailOnce(MessageListener):
    """Records (body, group); fails the body ``g1-0`` the first time only."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def consume(self, message) -> ConsumeResult:
        body = message.body.decode()
        self.seen.append((body, message.message_group))
        return ConsumeResult.FAILURE if self.seen.count((body, "g1")) == 1 and body == "g1-0" else ConsumeResult.SUCCESS


def push_fifo(endpoint: str, topic: str, group: str) -> dict:
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        for i in range(3):
            for g in ("g1", "g2"):
                producer.send(message(topic, f"{g}-{i}".encode(), message_group=g))
    finally:
        producer.shutdown()
    listener = FailOnce()
    consumer = PushConsumer(config(endpoint), group, listener, {topic: FilterExpression("*")})
    consumer.startup()
    t0 = time.time()
    try:
        while time.time() - t0 < 30 and len({b for b, _ in listener.seen}) < 6:
            time.sleep(0.2)
        time.sleep(1)
    finally:
        consumer.shutdown()
    return {"seen": listener.seen}


def _send_logged(producer, topic: str, body: str, **kw) -> str | None:
    """The broker group the send landed in (None: it failed; a dead master's queue)."""
    try:
        return str(producer.send(message(topic, body.encode(), **kw)).message_queue).split(".")[0]
    except Exception:
        return None


def _receive_until(consumer, want: set[str], seconds: float, keep: str | None = None,
                   invisible_s: int = 10) -> list[list]:
    """[body, attempt] of what comes until ``want`` has all come; every message is acked
    but the first delivery of ``keep`` (invisible ``invisible_s`` from its receipt)."""
    got, t0 = [], time.time()
    while not want <= {b for b, _ in got} and time.time() - t0 < seconds:
        try:
            msgs = consumer.receive(16, invisible_s)
        except Exception:  # a queue of a dead master, until the route is refreshed
            time.sleep(0.2)
            continue
        for m in msgs:
            got.append([m.body.decode(), m.delivery_attempt])
            if not (m.body.decode() == keep and m.delivery_attempt == 1):
                consumer.ack(m)
    return got


def cluster_failover(endpoint: str, topic: str, group: str, wanted_group: str) -> dict:
    """Phase 1: sends spread over every broker group, all received and acked but one
    message of ``wanted_group`` (``keep``: left in flight, 25 s invisible: receiving the
    others from four queues took over 10 s beside other tests, and ``keep`` came back
    before phase 1 ended). Then a line
    on stdout, and a line on stdin once the test has failed ``wanted_group``'s master
    over. Phase 2, the same clients: sends until one lands in ``wanted_group`` again
    (its new master, from the refreshed route), and what was sent, and ``keep``
    again, is received; then lite messages sent to both groups reach a
    LiteSimpleConsumer of this endpoint."""
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, 2)
    consumer.startup()
    try:
        sent1 = {f"one-{i}": _send_logged(producer, topic, f"one-{i}") for i in range(8)}
        keep = next(b for b, g in sent1.items() if g == wanted_group)
        got1 = _receive_until(consumer, set(sent1), 30, keep, invisible_s=25)
        print(json.dumps({"sent": sent1, "got": got1, "keep": keep}), flush=True)
        sys.stdin.readline()
        sent2, t0 = {}, time.time()
        while wanted_group not in sent2.values() and time.time() - t0 < 60:
            body = f"two-{len(sent2)}"
            sent2[body] = _send_logged(producer, topic, body)
            time.sleep(0.1)
        got2 = _receive_until(consumer, {b for b, g in sent2.items() if g} | {keep}, 45)
        # lite messages land in every group too; a lite consumer of this endpoint gets them all
        lite_consumer = LiteSimpleConsumer(topic, config(endpoint), group + "_lite", 1)
        lite_consumer.startup()
        try:
            subscribe_lite(lite_consumer, "x")
            lite_sent = {f"lite-{i}": _send_logged(producer, topic, f"lite-{i}", lite_topic="x") for i in range(6)}
            lite_got = _receive_until(lite_consumer, {b for b, g in lite_sent.items() if g}, 20)
        finally:
            lite_consumer.shutdown()
    finally:
        consumer.shutdown()
        producer.shutdown()
    return {"sent": sent2, "got": got2, "lite_sent": lite_sent, "lite_got": lite_got}


def subscribe_lite(consumer, name: str) -> None:
    """``subscribe_lite`` once the client has the broker's settings: until their answer
    arrives (on the Telemetry stream, just after startup returns) the client's quota is 0
    and it refuses every subscription itself (LiteSubscriptionQuotaExceededException)."""
    deadline = time.time() + 10
    while True:
        try:
            return consumer.subscribe_lite(name)
        except LiteSubscriptionQuotaExceededException:
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def _lite_receive(consumer, want: int, seconds: float) -> list[list]:
    got, t0 = [], time.time()
    while len(got) < want and time.time() - t0 < seconds:
        for m in consumer.receive(16, 10):
            got.append([m.body.decode(), m.lite_topic, m.topic])
            consumer.ack(m)
    return got


def lite(endpoint: str, topic: str, group: str, plain_group: str) -> dict:
    """Lite topics ``a`` and ``b`` under ``topic``: a LiteSimpleConsumer gets the ones it
    subscribed to, as it subscribes and unsubscribes; a plain consumer of the topic gets all."""
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    consumer = LiteSimpleConsumer(topic, config(endpoint), group, 2)
    consumer.startup()
    out = {}
    try:
        for body, lt in (("a1", "a"), ("b1", "b")):
            producer.send(message(topic, body.encode(), lite_topic=lt))
        producer.send(message(topic, b"plain"))
        subscribe_lite(consumer, "a")
        out["a_only"] = _lite_receive(consumer, 1, 20)
        out["a_only_more"] = _lite_receive(consumer, 1, 2)  # b1 and plain must not come
        subscribe_lite(consumer, "b")
        out["then_b"] = _lite_receive(consumer, 1, 20)
        consumer.unsubscribe_lite("a")
        for body, lt in (("a2", "a"), ("b2", "b")):
            producer.send(message(topic, body.encode(), lite_topic=lt))
        out["b_only"] = _lite_receive(consumer, 2, 2)  # wants 2 to wait the whole time: only b2 may come
        try:
            consumer.subscribe_lite("no,comma")
            out["bad_name"] = None
        except Exception as e:
            out["bad_name"] = f"{type(e).__name__}: {e}"
    finally:
        consumer.shutdown()
        producer.shutdown()
    plain = SimpleConsumer(config(endpoint), plain_group, {topic: FilterExpression("*")}, 2)
    plain.startup()
    try:
        out["plain"] = _lite_receive(plain, 5, 20)
    finally:
        plain.shutdown()
    return out


def secure(endpoint: str, topic: str, group: str) -> dict:
    """Over TLS (the CA in GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), with access keys: a good
    account sends and receives; a wrong secret and a read-only account are refused."""
    def cfg(ak: str, sk: str) -> ClientConfiguration:
        return ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=10)

    out = {}
    producer = Producer(cfg("rocketmq2", "12345678"), (topic,), tls_enable=True)
    producer.startup()
    try:
        out["sent"] = producer.send(message(topic, b"over tls")).message_id
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(cfg("rocketmq2", "12345678"), group, {topic: FilterExpression("*")}, 2,
                              tls_enable=True)
    consumer.startup()
    try:
        out["got"] = [m.body.decode() for m in consumer.receive(16, 10)]
    finally:
        consumer.shutdown()
    for name, ak, sk in (("bad_secret", "rocketmq2", "wrong-secret"), ("read_only", "readonly1", "87654321")):
        p = Producer(cfg(ak, sk), (topic,), tls_enable=True)
        try:
            p.startup()
            p.send(message(topic, b"refused"))
            out[name] = None
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"
        finally:
            try:
                p.shutdown()
            except Exception:
                pass
    return out


def secure_send(endpoint: str, topic: str, ak: str, sk: str) -> dict:
    producer = Producer(ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=10), (topic,),
                        tls_enable=True)
    producer.startup()
    try:
        return {"id": producer.send(message(topic, b"after SIGHUP")).message_id}
    finally:
        producer.shutdown()


class Record(MessageListener):
    def __init__(self) -> None:
        self.seen: list[list] = []

    def consume(self, message) -> ConsumeResult:
        self.seen.append([message.body.decode(), message.lite_topic, message.delivery_attempt])
        return ConsumeResult.SUCCESS


def lite_push(endpoint: str, topic: str, group: str) -> dict:
    """A LitePushConsumer subscribed to lite topic ``a`` consumes a1 (not b1), once."""
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    listener = Record()
    consumer = LitePushConsumer(config(endpoint), group, topic, listener)
    consumer.startup()
    try:
        subscribe_lite(consumer, "a")
        for body, lt in (("a1", "a"), ("b1", "b")):
            producer.send(message(topic, body.encode(), lite_topic=lt))
        t0 = time.time()
        while not listener.seen and time.time() - t0 < 20:
            time.sleep(0.1)
        time.sleep(1)  # b1, or a1 again, would show up here
    finally:
        consumer.shutdown()
        producer.shutdown()
    return {"seen": listener.seen}


SCENARIOS = {
    "lite_push": lite_push,
    "secure_send": secure_send,
    "secure": secure,
    "lite": lite,
    "cluster_failover": cluster_failover,
    "push_fifo": push_fifo,
    "body_limit": body_limit,
    "restart_before": restart_before,
    "restart_after": restart_after,
    "push": push,
    "transactions": transactions,
    "tx_leave_open": tx_leave_open,
    "tx_commit_on_check": tx_commit_on_check,
    "send_and_receive": send_and_receive,
    "redelivery": redelivery,
    "send": send,
    "receive": receive,
}

if __name__ == "__main__":
    endpoint, scenario, *args = sys.argv[1:]
    print(json.dumps(SCENARIOS[scenario](endpoint, *args)))
