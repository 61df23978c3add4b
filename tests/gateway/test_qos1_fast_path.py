"""The router's QoS 1/2 fast path (issue 13, S2): a message published at
QoS 1/2 reaches a live 3.1.1 subscriber as the bytes ``deliver`` would send
(a PUBLISH head kept per topic, the flows' packet id, the payload), with no
``Outbound``, ``Delivery`` or template built, and is tracked as ``deliver``
tracks it: the window, the packet ids, the acks, the counters, and the
in-memory entry a ``$share`` group hands to another member when its session
ends. The subscriber's plain acks come back as ack words (``ClientAcks``)."""

from __future__ import annotations

import trio

from gateway.mqtt import PingReq, PingResp, PubAck, PubComp, Publish, PubRec, PubRel, Subscription, encode
from gateway.sessions import Delivery, delivery_of


def _forwards(events: list, qos: int, first_pid: int = 1) -> list[Publish]:
    """What a 3.1.1 subscriber at ``qos`` gets for ``events``: QoS min(publish,
    subscription), RETAIN clear (a live forward), DUP clear, packet ids in
    turn from ``first_pid``."""
    out, pid = [], first_pid
    for e in events:
        q = min(e.qos, qos)
        out.append(Publish(topic=e.topic, payload=e.payload, qos=q, packet_id=pid if q else None))
        pid += 1 if q else 0
    return out


async def _read(client, n: int) -> bytes:
    return await client.read_exactly(n)


async def test_qos1_and_2_forwards_are_the_exact_packets_and_are_tracked(gateway_factory, client_cls):
    """One read of QoS 0/1/2 publishes on two topics with payloads of every
    remaining-length size: each 3.1.1 subscriber gets exactly the packets a
    full encode gives, the 5.0 one (general path) the same messages; the
    flows, refs and in-memory entries end with the acks, every delivery is
    counted once, and nothing is left in flight."""
    async with gateway_factory() as (broker, gw, port):
        one, _ = await client_cls.connect(port, "one", version=4)
        two, _ = await client_cls.connect(port, "two", version=4)
        five, _ = await client_cls.connect(port, "five")
        await one.subscribe("in/#", qos=1)
        await two.subscribe("in/#", qos=2)
        await five.subscribe(Subscription(topic_filter="in/#", qos=2, retain_as_published=True))
        pub, _ = await client_cls.connect(port, "pub", version=4)
        sizes = [0, 5, 122, 123, 124, 125, 16376, 16377, 5, 0]
        events = [Publish(topic="in/é" if i % 3 else "in/1", payload=bytes([65 + i]) * n, qos=(i % 3),
                          packet_id=i + 1 if i % 3 else None, retain=(i == 4)) for i, n in enumerate(sizes)]
        sent = gw.stats.sent
        await pub.send_raw(b"".join(encode(e, 4) for e in events))
        sessions = {c: gw.router.sessions[c] for c in ("one", "two")}
        for client, qos in ((one, 1), (two, 2)):
            want = _forwards(events, qos)
            raw = b"".join(encode(p, 4) for p in want)
            assert await _read(client, len(raw)) == raw
        got5 = [await five.expect(Publish) for _ in events]
        assert [(p.topic, p.payload, p.qos, p.retain) for p in got5] == [(e.topic, e.payload, e.qos, e.retain)
                                                                         for e in events]
        in_flight = sum(1 for e in events if e.qos)
        assert len(sessions["one"].flows) == in_flight
        assert len(sessions["two"].flows) == in_flight and len(sessions["two"].mem) == in_flight
        assert all(type(e) is tuple for e in sessions["two"].mem.values())  # the fast path's entries
        # the acks, in one write each: plain PUBACKs; PUBRECs, then PUBCOMPs for the PUBRELs. A PINGRESP
        # after them says the gateway's reader has acted on them (one connection's packets are in order).
        await one.send(*[PubAck(packet_id=p.packet_id) for p in _forwards(events, 1) if p.qos], PingReq())
        await one.expect(PingResp)
        qos2 = [p.packet_id for p in _forwards(events, 2) if p.qos == 2]
        qos1 = [p.packet_id for p in _forwards(events, 2) if p.qos == 1]
        await two.send(*[PubAck(packet_id=pid) for pid in qos1], *[PubRec(packet_id=pid) for pid in qos2])
        assert [(await two.expect(PubRel)).packet_id for _ in qos2] == qos2
        await two.send(*[PubComp(packet_id=pid) for pid in qos2], PingReq())
        await two.expect(PingResp)
        for s in sessions.values():
            assert (len(s.flows), dict(s.refs), dict(s.mem)) == (0, {}, {})
        assert gw.stats.sent - sent == 3 * len(events)


async def test_a_full_window_makes_the_rest_wait_in_order(gateway_factory, client_cls):
    """With a window of 4, the first 4 QoS 1 forwards go out at once (fast
    path) and the rest wait in ``pending`` (general path); each PUBACK lets
    the next one out, in publish order, with a free packet id."""
    async with gateway_factory({"sysInterval": 0, "maxInflightMessages": 4}) as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "sub", version=4)
        await sub.subscribe("w/#", qos=1)
        pub, _ = await client_cls.connect(port, "pub", version=4)
        events = [Publish(topic="w/1", payload=b"%d" % i, qos=1, packet_id=i + 1) for i in range(10)]
        await pub.send_raw(b"".join(encode(e, 4) for e in events))
        got = [await sub.expect(Publish) for _ in range(4)]
        assert [p.payload for p in got] == [b"0", b"1", b"2", b"3"]
        assert [p.packet_id for p in got] == [1, 2, 3, 4]
        with trio.move_on_after(0.3):
            extra = await sub.recv()
            raise AssertionError(f"past the window: {extra!r}")
        while len(got) < len(events):
            await sub.send(PubAck(packet_id=got[len(got) - 4].packet_id))
            got.append(await sub.expect(Publish))
        assert [p.payload for p in got] == [e.payload for e in events]
        assert len({p.packet_id for p in got[-4:]}) == 4


async def test_a_share_member_leaving_hands_its_unacked_fast_path_messages_over(gateway_factory, client_cls):
    """The in-memory entries of the fast path (``InMemory`` tuples) are what
    the session's end hands to another member of its ``$share`` group: the
    same messages, at the subscription's QoS."""
    async with gateway_factory() as (broker, gw, port):
        a, _ = await client_cls.connect(port, "a", version=4)
        b, _ = await client_cls.connect(port, "b", version=4)
        await a.subscribe("$share/g/job/#", qos=1)
        await b.subscribe("$share/g/job/#", qos=1)
        pub, _ = await client_cls.connect(port, "p", version=4)
        for i in range(4):
            await pub.publish("job/x", b"%d" % i, qos=1)
            await pub.expect(PubAck)
        ga = [await a.expect(Publish) for _ in range(2)]
        gb = [await b.expect(Publish) for _ in range(2)]
        assert all(type(e) is tuple for e in gw.router.sessions["a"].mem.values())
        for p in gb:
            await b.send(PubAck(packet_id=p.packet_id))
        assert sorted(p.payload for p in ga + gb) == [b"0", b"1", b"2", b"3"]
        await a.close()  # leaves with two unacknowledged messages
        handed = [await b.expect(Publish) for _ in range(2)]
        assert sorted((p.payload, p.qos, p.topic) for p in handed) == sorted((p.payload, 1, "job/x") for p in ga)


def test_an_in_memory_entry_stands_for_the_delivery_the_general_path_builds():
    from gateway.mapping import broker_topic_for, outbound_from_publish, plain_publish_to_message, publish_properties

    pub = Publish(topic="a/b", payload=b"x", qos=2, packet_id=9, retain=True)
    base = publish_properties("a/b", 2, True, "client-1", 1_700_000_000_123)
    msg = plain_publish_to_message(pub, broker_topic_for("a/b"), base, 1_700_000_000_123)  # as it is stored
    entry = (pub, "a/b", msg, 1, False, (), "$share/g/a/#")
    d = delivery_of(entry)
    general = Delivery(outbound_from_publish(pub, "a/b", "client-1", 1_700_000_000_123), 1, False, (),
                       "$share/g/a/#")
    slots = ("topic", "payload", "qos", "retain", "client_id", "publish_ms", "expiry", "props", "ref")
    assert [getattr(d.out, s) for s in slots] == [getattr(general.out, s) for s in slots]
    assert d[1:] == general[1:]
    assert delivery_of(general) is general
