"""What the publish path takes as given instead of computing again:

* an in-memory delivery is built from the PUBLISH it came from
  (`outbound_from_publish`), and must equal what parsing the stored
  message's properties back gives (`outbound_from_message`);
* the router keeps each topic's targets while subscriptions and sessions
  stay the same, and must see every change at once: a new subscriber, an
  unsubscribe, a session that leaves or comes back, No Local and ``$share``;
* the properties a PUBLISH starts with are made once per read and topic
  (``publish_properties``), and QoS 0 deliveries to 3.1.1 subscribers skip
  the per-message delivery chain: same messages, flags, order and counters.
"""

from __future__ import annotations

import pytest
import trio

from gateway.mapping import outbound_from_message, outbound_from_publish, publish_properties, publish_to_message
from gateway.mqtt import PubAck, Publish, Subscription, UnsubAck, Unsubscribe, encode

_SLOTS = ("topic", "payload", "qos", "retain", "client_id", "publish_ms", "expiry", "props")


@pytest.mark.parametrize("pub", [
    Publish(topic="a/b", payload=b"plain", qos=0),
    Publish(topic="a/b", payload=b"kept", qos=1, packet_id=7, retain=True),
    Publish(topic="t/\u00e9", payload=b"", qos=2, packet_id=9, message_expiry_interval=30,
            payload_format_indicator=1, content_type="text/plain", response_topic="r/1",
            correlation_data=b"\x00\x01", user_properties=(("k", "v"), ("k", "w"), ("\u00e9", ""))),
])
def test_the_outbound_of_a_publish_is_what_its_stored_properties_give(pub):
    msg = publish_to_message(pub, "a", "client-1", 1_700_000_000_123)
    direct = outbound_from_publish(pub, pub.topic, "client-1", msg.born_timestamp)
    parsed = outbound_from_message(msg, pub.topic)
    assert msg.note is pub
    assert {s: getattr(direct, s) for s in _SLOTS} == {s: getattr(parsed, s) for s in _SLOTS}


def test_a_message_built_on_shared_base_properties_is_the_same_message():
    pub = Publish(topic="a/b", payload=b"x", qos=1, packet_id=3, retain=True, user_properties=(("k", "v"),))
    base = publish_properties("a/b", 1, True, "client-1", 1_700_000_000_123)
    kept = dict(base)
    one = publish_to_message(pub, "a", "client-1", 1_700_000_000_123)
    two = publish_to_message(pub, "a", "client-1", 1_700_000_000_123, base=base)
    assert list(two.properties.items()) == list(one.properties.items())
    two.properties["extra"] = "1"
    assert base == kept


async def test_qos0_fan_in_reaches_311_and_50_subscribers_alike(gateway_factory, client_cls):
    """One read of QoS 0 publishes on two topics: the 3.1.1 subscriber (fast
    path) and the 5.0 one get every message in order, with their RETAIN flag
    (Retain As Published for 5.0; a 3.1.1 live forward has it clear), and
    each delivery is counted once."""
    async with gateway_factory() as (broker, gw, port):
        old, _ = await client_cls.connect(port, "old", version=4)
        new, _ = await client_cls.connect(port, "new")
        await old.subscribe("in/#", qos=1)
        await new.subscribe(Subscription(topic_filter="in/#", qos=0, retain_as_published=True))
        pub, _ = await client_cls.connect(port, "pub", version=4)
        sent = gw.stats.sent
        events = [Publish(topic=f"in/{i % 2}", payload=b"%d" % i, qos=0, retain=(i == 5)) for i in range(40)]
        await pub.send_raw(b"".join(encode(e, 4) for e in events))
        for client in (old, new):
            got = [await client.expect(Publish) for _ in events]
            assert [(e.topic, e.payload, e.qos) for e in got] == [(e.topic, e.payload, 0) for e in events]
            assert [e.retain for e in got] == [client is new and e.retain for e in events]
        assert gw.stats.sent - sent == 2 * len(events)


async def _got(client, n: int = 1) -> list[bytes]:
    return [(await client.expect(Publish)).payload for _ in range(n)]


async def _nothing(client) -> None:
    with trio.move_on_after(0.3):
        ev = await client.expect(Publish)
        raise AssertionError(f"unexpected delivery {ev!r}")


async def test_the_router_sees_each_subscription_and_session_change_at_once(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        pub, _ = await client_cls.connect(port, "pub")
        a, _ = await client_cls.connect(port, "a")
        await a.subscribe("s/#", qos=0)
        await pub.publish("s/1", b"one", qos=0)
        assert await _got(a) == [b"one"]
        b, _ = await client_cls.connect(port, "b")  # a new subscriber of a topic already routed
        await b.subscribe("s/+", qos=0)
        await pub.publish("s/1", b"two", qos=0)
        assert await _got(a) == [b"two"] and await _got(b) == [b"two"]
        await a.send(Unsubscribe(packet_id=a.next_pid(), topic_filters=("s/#",)))
        await a.expect(UnsubAck)
        await pub.publish("s/1", b"three", qos=0)
        assert await _got(b) == [b"three"]
        await _nothing(a)
        await b.disconnect()
        await pub.publish("s/1", b"four", qos=0)  # b's session is gone (clean start): nobody
        b2, _ = await client_cls.connect(port, "b")
        await b2.subscribe("s/1", qos=0)
        await pub.publish("s/1", b"five", qos=0)
        assert await _got(b2) == [b"five"]


async def test_no_local_and_shared_groups_are_decided_per_message(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        me, _ = await client_cls.connect(port, "me")
        await me.subscribe(Subscription(topic_filter="n/1", qos=0, no_local=True))
        other, _ = await client_cls.connect(port, "other")
        await other.publish("n/1", b"theirs", qos=0)
        assert await _got(me) == [b"theirs"]
        await me.publish("n/1", b"mine", qos=0)  # same topic, now from the subscriber itself
        await _nothing(me)
        await other.publish("n/1", b"theirs again", qos=0)
        assert await _got(me) == [b"theirs again"]
        m1, _ = await client_cls.connect(port, "m1")
        m2, _ = await client_cls.connect(port, "m2")
        await m1.subscribe("$share/g/sh/1", qos=0)
        await m2.subscribe("$share/g/sh/1", qos=0)
        for i in range(4):
            await other.publish("sh/1", b"%d" % i, qos=0)
        got1, got2 = await _got(m1, 2), await _got(m2, 2)  # round robin, not one cached member
        assert sorted(got1 + got2) == [b"0", b"1", b"2", b"3"]
        await _nothing(m1)


async def test_a_topic_routed_to_nobody_reaches_its_first_subscriber(gateway_factory, client_cls):
    """A topic nobody subscribes to is remembered as routed to nobody; the
    first subscription, and every change after it, is seen at once."""
    async with gateway_factory() as (broker, gw, port):
        pub, _ = await client_cls.connect(port, "pub", version=4)
        for i in range(3):  # QoS 1: routed (to nobody) once the PUBACK comes
            await pub.publish("e/1", b"lost %d" % i, qos=1)
            await pub.expect(PubAck)
        sub, _ = await client_cls.connect(port, "sub", version=4)
        await pub.publish("e/1", b"still nobody", qos=1)  # a new session, no subscription yet
        await pub.expect(PubAck)
        await sub.subscribe("e/+", qos=0)
        await pub.publish("e/1", b"first", qos=0)
        assert await _got(sub) == [b"first"]
        await sub.send(Unsubscribe(packet_id=sub.next_pid(), topic_filters=("e/+",)))
        await sub.expect(UnsubAck)
        await pub.publish("e/1", b"after", qos=0)
        await _nothing(sub)


async def test_qos0_forwards_keep_exact_headers_across_payload_lengths(gateway_factory, client_cls):
    """The fast path keeps a PUBLISH header per topic and payload length: the
    remaining length's encoding changes at 128 and 16,384 bytes, and lengths
    seen before come back in any order; each forward is the exact packet."""
    async with gateway_factory() as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "sub", version=4)
        await sub.subscribe("h/#", qos=0)
        pub, _ = await client_cls.connect(port, "pub", version=4)
        sizes = [0, 1, 122, 123, 124, 125, 200, 16375, 16376, 16377, 1, 0, 124, 123, 16377]
        events = [Publish(topic="h/é" if i % 2 else "h/1", payload=bytes([65 + i]) * n, qos=0)
                  for i, n in enumerate(sizes)]
        await pub.send_raw(b"".join(encode(e, 4) for e in events))
        raw = b"".join(encode(e, 4) for e in events)
        got = b""
        with trio.fail_after(10):
            while len(got) < len(raw):
                data = await sub.stream.receive_some(65536)
                assert data
                got += data
        assert got == raw
