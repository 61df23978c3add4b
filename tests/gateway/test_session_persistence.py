"""Persistent sessions are queues: offline messages, reconnects, restarts, takeover,
queue limits, shared subscriptions, and the native side of the same topics."""

from __future__ import annotations

import trio

from core.store.message import Message, decode_message
from gateway.mqtt import ConnAck, Disconnect, PubAck, PubComp, PubRec, PubRel, Publish, ReasonCode


async def _drain(client, n, ack=True):
    got = []
    for _ in range(n):
        m = await client.expect(Publish)
        got.append(m)
        if ack and m.qos == 1:
            await client.send(PubAck(packet_id=m.packet_id))
    return got


async def test_offline_messages_and_redelivery_with_dup(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        sub, ack = await client_cls.connect(port, "dev1", clean_start=False, session_expiry_interval=3600)
        assert not ack.session_present
        await sub.subscribe("t/#", qos=1)
        await sub.disconnect()
        pub, _ = await client_cls.connect(port, "p")
        for i in range(5):
            await pub.publish("t/x", b"m%d" % i, qos=1)
            await pub.expect(PubAck)
        sub, ack = await client_cls.connect(port, "dev1", clean_start=False, session_expiry_interval=3600)
        assert ack.session_present
        got = await _drain(sub, 5, ack=False)
        assert [m.payload for m in got] == [b"m%d" % i for i in range(5)]
        assert not any(m.dup for m in got)
        # acknowledge two, drop the connection: the other three come back with DUP
        for m in got[:2]:
            await sub.send(PubAck(packet_id=m.packet_id))
        await trio.sleep(0.05)
        await sub.close()
        sub, ack = await client_cls.connect(port, "dev1", clean_start=False, session_expiry_interval=3600)
        again = await _drain(sub, 3)
        assert [m.payload for m in again] == [b"m2", b"m3", b"m4"]
        assert all(m.dup for m in again)
        assert [m.packet_id for m in again] == [m.packet_id for m in got[2:]]


async def test_restart_keeps_sessions_offline_messages_and_retained(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "keep", clean_start=False, session_expiry_interval=3600)
        await sub.subscribe("r/+", qos=1)
        await sub.disconnect()
        pub, _ = await client_cls.connect(port, "p")
        await pub.publish("r/1", b"offline", qos=1)
        await pub.expect(PubAck)
        await pub.publish("r/2", b"kept", qos=1, retain=True)
        await pub.expect(PubAck)
        await pub.disconnect()
    async with gateway_factory() as (broker, gw, port):
        sub, ack = await client_cls.connect(port, "keep", clean_start=False, session_expiry_interval=3600)
        assert ack.session_present
        got = await _drain(sub, 2)
        assert sorted(m.payload for m in got) == [b"kept", b"offline"]
        other, _ = await client_cls.connect(port, "late")
        await other.subscribe("r/#", qos=1)
        m = await other.expect(Publish)
        assert (m.topic, m.payload, m.retain) == ("r/2", b"kept", True)


async def test_qos2_exactly_once_across_reconnect_and_restart(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        watch, _ = await client_cls.connect(port, "watch", clean_start=False, session_expiry_interval=3600)
        await watch.subscribe("q2", qos=0)
        c, _ = await client_cls.connect(port, "q2c", clean_start=False, session_expiry_interval=3600)
        pid = await c.publish("q2", b"once", qos=2)
        await c.expect(PubRec)
        await c.close()  # PUBREL never sent
        m = await watch.expect(Publish)
        assert m.payload == b"once"
        c, ack = await client_cls.connect(port, "q2c", clean_start=False, session_expiry_interval=3600)
        assert ack.session_present
        await c.send(Publish(topic="q2", payload=b"once", qos=2, packet_id=pid, dup=True))
        await c.expect(PubRec)  # answered, not delivered again
        await c.close()
    async with gateway_factory() as (broker, gw, port):
        watch, _ = await client_cls.connect(port, "watch", clean_start=False, session_expiry_interval=3600)
        c, ack = await client_cls.connect(port, "q2c", clean_start=False, session_expiry_interval=3600)
        await c.send(Publish(topic="q2", payload=b"once", qos=2, packet_id=pid, dup=True))
        await c.expect(PubRec)
        await c.send(PubRel(packet_id=pid))
        comp = await c.expect(PubComp)
        assert comp.reason_code == 0
        with trio.move_on_after(0.3):
            extra = await watch.recv(timeout=1)
            raise AssertionError(f"delivered twice: {extra!r}")


async def test_takeover_closes_old_connection_with_0x8e(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        old, _ = await client_cls.connect(port, "same", clean_start=False, session_expiry_interval=60)
        await old.subscribe("tk", qos=1)
        new, ack = await client_cls.connect(port, "same", clean_start=False, session_expiry_interval=60)
        assert ack.session_present
        d = await old.expect(Disconnect)
        assert d.reason_code == ReasonCode.SESSION_TAKEN_OVER
        assert await old.recv() is None
        pub, _ = await client_cls.connect(port, "p")
        await pub.publish("tk", b"to-new", qos=1)
        m = await new.expect(Publish)
        assert m.payload == b"to-new"


async def test_takeover_publishes_will_without_delay(gateway_factory, client_cls):
    from gateway.mqtt import Will

    async with gateway_factory() as (broker, gw, port):
        w, _ = await client_cls.connect(port, "w")
        await w.subscribe("wills/#")
        a, _ = await client_cls.connect(port, "dev", version=4, clean_start=True,
                                        will=Will(topic="wills/dev", payload=b"gone"))
        b, _ = await client_cls.connect(port, "dev", version=4, clean_start=True)
        assert await a.recv() is None  # 3.1.1: just closed
        m = await w.expect(Publish)
        assert m.payload == b"gone"


async def test_queue_overflow_drops_oldest_and_counts(gateway_factory, client_cls):
    async with gateway_factory({"sysInterval": 0, "maxQueuedMessages": 3}) as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "slow", clean_start=False, session_expiry_interval=60)
        await sub.subscribe("ov", qos=1)
        await sub.disconnect()
        pub, _ = await client_cls.connect(port, "p")
        for i in range(6):
            await pub.publish("ov", b"%d" % i, qos=1)
            await pub.expect(PubAck)
        assert gw.stats.dropped == 3
        sub, _ = await client_cls.connect(port, "slow", clean_start=False, session_expiry_interval=60)
        got = await _drain(sub, 3)
        assert [m.payload for m in got] == [b"3", b"4", b"5"]


async def test_queue_overflow_drop_new(gateway_factory, client_cls):
    async with gateway_factory({"sysInterval": 0, "maxQueuedMessages": 2, "queueOverflow": "dropNew"}) as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "slow", clean_start=False, session_expiry_interval=60)
        await sub.subscribe("ov", qos=1)
        await sub.disconnect()
        pub, _ = await client_cls.connect(port, "p")
        for i in range(4):
            await pub.publish("ov", b"%d" % i, qos=1)
            await pub.expect(PubAck)
        assert gw.stats.dropped == 2
        sub, _ = await client_cls.connect(port, "slow", clean_start=False, session_expiry_interval=60)
        got = await _drain(sub, 2)
        assert [m.payload for m in got] == [b"0", b"1"]


async def test_shared_subscription_round_robin_and_handover(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        a, _ = await client_cls.connect(port, "a")
        b, _ = await client_cls.connect(port, "b")
        await a.subscribe("$share/g/job/#", qos=1)
        await b.subscribe("$share/g/job/#", qos=1)
        pub, _ = await client_cls.connect(port, "p")
        for i in range(4):
            await pub.publish("job/x", b"%d" % i, qos=1)
            await pub.expect(PubAck)
        ga = await _drain(a, 2, ack=False)
        gb = await _drain(b, 2)
        assert sorted(m.payload for m in ga + gb) == [b"0", b"1", b"2", b"3"]
        await a.close()  # leaves with two un-acked messages
        handed = await _drain(b, 2)
        assert sorted(m.payload for m in handed) == sorted(m.payload for m in ga)


async def test_native_send_reaches_mqtt_and_mqtt_publish_is_pullable(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "n")
        await sub.subscribe("a/#", qos=1)
        await sub.subscribe("plain", qos=0)
        r = await broker.send(Message(topic="a", body=b"native", properties={"mqttTopic": "a/from/native"}), 0)
        assert r.ok
        m = await sub.expect(Publish)
        assert (m.topic, m.payload) == ("a/from/native", b"native")
        await sub.send(PubAck(packet_id=m.packet_id))
        await broker.send(Message(topic="plain", body=b"bare"))
        m = await sub.expect(Publish)
        assert (m.topic, m.payload) == ("plain", b"bare")
        pub, _ = await client_cls.connect(port, "p")
        await pub.publish("a/b/c", b"from-mqtt", qos=1, content_type="text/plain")
        await pub.expect(PubAck)
        found = []
        for q in range(4):
            res = await broker.pull("native-group", "a", q, 0, 32)
            found += [decode_message(e) for e in res.entries]
        mine = [m for m in found if m.body == b"from-mqtt"]
        assert len(mine) == 1
        assert mine[0].properties["mqttTopic"] == "a/b/c"
        assert mine[0].properties["contentType"] == "text/plain"
        assert mine[0].properties["mqttQos"] == "1"


async def test_native_batch_reaches_mqtt_like_single_sends(gateway_factory, client_cls):
    """Each item of a batch (request 320's path) is routed on its own: live and
    offline persistent sessions get every item, a ``$share`` group one copy of
    each, round robin. tests/interop/test_cpp_batch_mqtt.py sends it with the C++ client."""
    async with gateway_factory() as (broker, gw, port):
        off, _ = await client_cls.connect(port, "off", clean_start=False, session_expiry_interval=3600)
        await off.subscribe("a/#", qos=1)
        await off.disconnect()
        live, _ = await client_cls.connect(port, "live")
        await live.subscribe("a/#", qos=1)
        shared = [(await client_cls.connect(port, f"s{i}"))[0] for i in range(2)]
        for c in shared:
            await c.subscribe("$share/g/a/#", qos=1)
        batch = [Message(topic="a", body=b"b%d" % i, properties={"mqttTopic": f"a/dev/{i}"}) for i in range(4)]
        r = await broker.send_batch(batch, 0)
        assert r.ok and r.msg_count == 4
        expected = [(f"a/dev/{i}", b"b%d" % i) for i in range(4)]
        assert [(m.topic, m.payload) for m in await _drain(live, 4)] == expected
        each = [await _drain(c, 2) for c in shared]
        assert sorted((m.topic, m.payload) for got in each for m in got) == expected
        off, ack = await client_cls.connect(port, "off", clean_start=False, session_expiry_interval=3600)
        assert ack.session_present
        assert [(m.topic, m.payload) for m in await _drain(off, 4)] == expected
