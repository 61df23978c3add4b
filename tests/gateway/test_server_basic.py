"""Connect, publish and subscribe at QoS 0/1/2 through the in-process gateway."""

from __future__ import annotations

import trio

from gateway.mqtt import PubAck, PubComp, PubRec, PubRel, Publish



async def test_qos0_qos1_roundtrip(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "sub")
        ack = await sub.subscribe("a/+/c", qos=1)
        assert ack.reason_codes == (1,)
        pub, _ = await client_cls.connect(port, "pub")
        await pub.publish("a/b/c", b"zero", qos=0)
        pid = await pub.publish("a/b/c", b"one", qos=1)
        ack = await pub.expect(PubAck)
        assert ack.packet_id == pid and ack.reason_code == 0
        m0 = await sub.expect(Publish)
        assert (m0.topic, m0.payload, m0.qos) == ("a/b/c", b"zero", 0)
        m1 = await sub.expect(Publish)
        assert (m1.payload, m1.qos) == (b"one", 1)
        await sub.send(PubAck(packet_id=m1.packet_id))
        # stored once, in broker topic "a"
        total = sum(broker.max_offset("a", q) for q in range(4))
        assert total == 2


async def test_qos2_both_ways(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "sub2")
        await sub.subscribe("x/#", qos=2)
        pub, _ = await client_cls.connect(port, "pub2")
        pid = await pub.publish("x/y", b"two", qos=2)
        rec = await pub.expect(PubRec)
        await pub.send(PubRel(packet_id=pid))
        comp = await pub.expect(PubComp)
        assert comp.packet_id == pid == rec.packet_id
        m = await sub.expect(Publish)
        assert m.qos == 2
        await sub.send(PubRec(packet_id=m.packet_id))
        rel = await sub.expect(PubRel)
        await sub.send(PubComp(packet_id=rel.packet_id))
