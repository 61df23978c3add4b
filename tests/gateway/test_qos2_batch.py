"""QoS 2 batch-through (issue 13): a read's PUBRECs, PUBCOMPs and outbound
PUBRELs go out together, in arrival order, byte for byte what one event per
ack would give; a PUBREL after PUBLISHes of the same read is answered after
their PUBRECs; an ack that breaks the protocol ends the connection after the
acks before it are answered; every message is delivered exactly once."""

from __future__ import annotations

import pytest

from gateway.mqtt import Disconnect, PubComp, PubRec, PubRel, Publish, encode

from .conftest import Client, running_gateway


def _acks(cls, pids, version: int) -> bytes:
    return b"".join(encode(cls(packet_id=p), version) for p in pids)


async def _publishes(client: Client, n: int) -> list[Publish]:
    out = [await client.expect(Publish) for _ in range(n)]
    assert all(p.qos == 2 for p in out)
    return out


@pytest.mark.parametrize("persistent", [False, True], ids=["clean", "persistent"])
@pytest.mark.parametrize("version", [4, 5])
async def test_qos2_acks_of_a_read_are_batched_ordered_and_exact(tmp_path, version, persistent):
    kw = ({"clean_start": False, "session_expiry_interval": 600} if version == 5 else {"clean_start": False}) \
        if persistent else {}
    async with running_gateway(tmp_path / "store") as (_broker, _gw, port):
        sub, _ = await Client.connect(port, "q2-sub", version=version, **kw)
        await sub.subscribe("q2/#", qos=2)
        pub, _ = await Client.connect(port, "q2-pub", version=version, **kw)

        pids = list(range(1, 21))  # within our Receive Maximum for 5.0
        await pub.send(*[Publish(topic=f"q2/{p % 3}", payload=b"m%d" % p, qos=2, packet_id=p) for p in pids])
        assert await pub.read_exactly(4 * len(pids)) == _acks(PubRec, pids, version)

        got = await _publishes(sub, len(pids))
        assert [p.payload for p in got] == [b"m%d" % p for p in pids]
        out_pids = [p.packet_id for p in got]
        await sub.send(*[PubRec(packet_id=p) for p in out_pids])  # one write
        assert await sub.read_exactly(4 * len(out_pids)) == _acks(PubRel, out_pids, version)
        await sub.send(*[PubComp(packet_id=p) for p in out_pids])

        # One read: PUBRELs, a PUBLISH re-sent with DUP before its PUBREL (answered,
        # not delivered again), an unknown PUBREL, then new PUBLISHes with a PUBREL
        # between them: the PUBREL after a PUBLISH is answered after its PUBREC.
        await pub.send(*[PubRel(packet_id=p) for p in pids[:10]],
                       Publish(topic="q2/1", payload=b"m11", qos=2, packet_id=11, dup=True),
                       PubRel(packet_id=999),
                       Publish(topic="q2/x", payload=b"n1", qos=2, packet_id=1),
                       PubRel(packet_id=11),
                       Publish(topic="q2/x", payload=b"n2", qos=2, packet_id=2))
        rec11, unknown = encode(PubRec(packet_id=11), version), encode(PubComp(packet_id=999, reason_code=0x92), version)
        if persistent:  # the PUBCOMPs wait for the read's one "in2" record, the 0x92 one does not
            expected = rec11 + unknown + _acks(PubRec, [1, 2], version) + _acks(PubComp, [*pids[:10], 11], version)
        else:
            expected = (_acks(PubComp, pids[:10], version) + rec11 + unknown + _acks(PubRec, [1], version)
                        + _acks(PubComp, [11], version) + _acks(PubRec, [2], version))
        assert await pub.read_exactly(len(expected)) == expected
        await pub.send(*[PubRel(packet_id=p) for p in [1, 2, *pids[11:]]])
        assert await pub.read_exactly(4 * (len(pids) - 9)) == _acks(PubComp, [1, 2, *pids[11:]], version)

        new = await _publishes(sub, 2)  # n1 and n2 only: nothing of the first 20 again
        assert [p.payload for p in new] == [b"n1", b"n2"] and not any(p.dup for p in new)
        await sub.send(*[PubRec(packet_id=p.packet_id) for p in new])
        assert await sub.read_exactly(8) == _acks(PubRel, [p.packet_id for p in new], version)
        await sub.send(*[PubComp(packet_id=p.packet_id) for p in new])
        await sub.ping()
        assert await sub.read_exactly(2) == b"\xd0\x00"  # PINGRESP: nothing else came
        await pub.disconnect()
        await sub.disconnect()


async def test_a_bad_ack_ends_the_connection_after_the_acks_before_it(tmp_path):
    async with running_gateway(tmp_path / "store") as (_broker, _gw, port):
        sub, _ = await Client.connect(port, "q2-bad", version=5)
        await sub.subscribe("bad/#", qos=2)
        pub, _ = await Client.connect(port, "q2-bad-pub", version=5)
        await pub.send(*[Publish(topic="bad/t", payload=b"%d" % i, qos=2, packet_id=i) for i in (1, 2, 3)])
        got = await _publishes(sub, 3)
        a, b, c = (p.packet_id for p in got)
        # PUBCOMP for a message still awaiting its PUBREC breaks the protocol
        await sub.send(PubRec(packet_id=a), PubRec(packet_id=b), PubComp(packet_id=c), PubRec(packet_id=c))
        assert await sub.read_exactly(8) == _acks(PubRel, [a, b], 5)
        ev = await sub.recv()
        assert isinstance(ev, Disconnect) and ev.reason_code == 0x82, ev
        assert await sub.recv() is None
        await pub.disconnect()
