"""In-memory delivery goes straight into the subscriber's output at dispatch time.

A clean session's QoS 0 burst is not cut by ``maxQueuedMessages``: that limit
holds for persistent queues, and for QoS 0 only behind a write the client's
socket has no room for (test_lean_connections); here the bound is
``maxOutboundBytes`` on the connection's output, and what it drops is counted.
"""

from __future__ import annotations

from gateway.mqtt import PubAck, Publish, encode


async def _burst(pub, topic: str, n: int, qos: int = 0, size: int = 8) -> None:
    """``n`` PUBLISHes in one write, so that one read routes them all."""
    events = [Publish(topic=topic, payload=b"%0*d" % (size, i), qos=qos, packet_id=(i + 1) if qos else None)
              for i in range(n)]
    await pub.send_raw(b"".join(encode(e, pub.version) for e in events))


async def test_qos0_burst_larger_than_queue_limit_loses_nothing(gateway_factory, client_cls):
    async with gateway_factory({"sysInterval": 0, "maxQueuedMessages": 10}) as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "sub", version=4)
        await sub.subscribe("burst/#", qos=0)
        pub, _ = await client_cls.connect(port, "pub", version=4)
        await _burst(pub, "burst/a", 500)
        got = [await sub.expect(Publish) for _ in range(500)]
        assert [int(m.payload) for m in got] == list(range(500))
        assert gw.stats.dropped == 0


async def test_qos1_burst_beyond_window_waits_and_loses_nothing(gateway_factory, client_cls):
    async with gateway_factory({"sysInterval": 0, "maxQueuedMessages": 10, "maxInflightMessages": 4}) as (
            broker, gw, port):
        sub, _ = await client_cls.connect(port, "sub", version=4)
        await sub.subscribe("burst/#", qos=1)
        pub, _ = await client_cls.connect(port, "pub", version=4)
        await _burst(pub, "burst/a", 100, qos=1)
        got = []
        for _ in range(100):
            m = await sub.expect(Publish)
            got.append(int(m.payload))
            await sub.send(PubAck(packet_id=m.packet_id))
        assert got == list(range(100))
        assert gw.stats.dropped == 0


async def test_output_bound_drops_qos0_and_counts(gateway_factory, client_cls):
    async with gateway_factory({"sysInterval": 0, "maxOutboundBytes": 1024}) as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "sub", version=4)
        await sub.subscribe("burst/a", qos=0)
        await sub.subscribe("burst/end", qos=1)  # QoS 1 is never dropped by the output bound
        pub, _ = await client_cls.connect(port, "pub", version=4)
        # 200 x ~520 bytes routed in one read: far more than 1 KiB waits for the writer.
        await _burst(pub, "burst/a", 200, size=512)
        await pub.publish("burst/end", b"end", qos=1)
        await pub.expect(PubAck)
        got = []
        while True:
            m = await sub.expect(Publish)
            if m.topic == "burst/end":
                break
            got.append(int(m.payload))
        assert gw.stats.dropped > 0
        assert len(got) + gw.stats.dropped == 200
        assert got == sorted(got)
