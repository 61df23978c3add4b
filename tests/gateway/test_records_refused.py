"""A broker that refuses the gateway's records never leaves a client believing
something was kept that was not (gateway.connecting, gateway.subscribing).

Two ways a real broker refuses them: it lost its master lease (``fenced``,
set by the HA controller the moment etcd takes the lease away; it then takes
no write at all until it is a slave), and a topic whose write permission an
admin took away (UPDATE_AND_CREATE_TOPIC on the meta topic: the broker still
takes other writes, so only the write itself tells). The second stands for
every refusal the gateway learns only from the send's result (a full disk).
"""

from __future__ import annotations

import dataclasses

import trio

from .conftest import Client, running_gateway
from core.broker import PERM_READ, PERM_WRITE
from gateway.meta import META_TOPIC
from gateway.mqtt import Disconnect, Publish, PubAck, ReasonCode, UnsubAck, Unsubscribe, Will

R = ReasonCode


async def _meta_topic_writable(broker, writable: bool) -> None:
    cfg = broker.get_topic(META_TOPIC)
    await broker.update_topic(dataclasses.replace(cfg, perm=PERM_READ | (PERM_WRITE if writable else 0)))


async def _received(client: Client, expected: list[str]) -> list[str]:
    """Topics of the PUBLISHes that arrive (each acked) until ``expected``
    have (10 s at most), and 0.2 s after: anything more shows too."""
    topics = []

    async def one() -> bool:
        ev = await client.recv(timeout=None)
        if not isinstance(ev, Publish):
            return False
        topics.append(ev.topic)
        if ev.qos == 1:
            await client.send(PubAck(packet_id=ev.packet_id))
        return True

    with trio.move_on_after(10):
        while not set(expected) <= set(topics) and await one():
            pass
    with trio.move_on_after(0.2):
        while await one():
            pass
    return topics


async def _publish(port: int, *topics: str) -> None:
    pub, _ = await Client.connect(port, "pub")
    for t in topics:
        await pub.publish(t, b"x", qos=1)
        assert (await pub.expect(PubAck)).reason_code == 0
    await pub.disconnect()


async def test_a_fenced_broker_refuses_what_it_would_have_to_record(tmp_path):
    async with running_gateway(tmp_path / "store") as (broker, gw, port):
        kept, _ = await Client.connect(port, "kept", clean_start=False, session_expiry_interval=3600)
        await kept.subscribe("k/#", qos=1)
        broker.fenced = True
        for version in (5, 4):  # 3.1.1: return code 3, read back as 0x88
            c, _ = await Client.connect(port, f"dev{version}", version=version, expect=R.SERVER_UNAVAILABLE,
                                        clean_start=False, session_expiry_interval=3600 if version == 5 else None)
            assert await c.recv() is None  # closed after the CONNACK
            assert f"dev{version}" not in gw.router.sessions
        # nothing to record: a clean session without a will connects (and may read)
        clean, _ = await Client.connect(port, "clean")
        await clean.disconnect()
        # a persistent session's SUBSCRIBE changes nothing
        assert (await kept.subscribe("n/#", "k/#", qos=0)).reason_codes == (R.UNSPECIFIED_ERROR,) * 2
        assert list(gw.router.sessions["kept"].subs) == ["k/#"]
        broker.fenced = False
        assert gw.stats.connected == 1
        c, ack = await Client.connect(port, "dev5", clean_start=False, session_expiry_interval=3600)
        assert not ack.session_present
        await _publish(port, "n/1", "k/1")
        assert await _received(kept, ["k/1"]) == ["k/1"]
        await c.disconnect()
        await kept.disconnect()


async def test_a_refused_session_record_closes_the_connection_after_its_connack(tmp_path):
    async with running_gateway(tmp_path / "store") as (broker, gw, port):
        c, _ = await Client.connect(port, "dev", clean_start=False, session_expiry_interval=3600)
        await c.subscribe("a/#", qos=1)
        await c.disconnect()
        await _meta_topic_writable(broker, False)
        for version in (5, 4):
            c, ack = await Client.connect(port, "dev", version=version, clean_start=False,
                                          session_expiry_interval=3600 if version == 5 else None)
            assert ack.session_present
            if version == 5:
                assert (await c.expect(Disconnect)).reason_code == R.SERVER_BUSY
            assert await c.recv() is None
        # a new session: never recorded, so it ends with its connection; its will goes
        watcher, _ = await Client.connect(port, "watcher")
        await watcher.subscribe("wills/#", qos=1)
        c, ack = await Client.connect(port, "new", clean_start=False, session_expiry_interval=3600,
                                      will=Will(topic="wills/new", payload=b"gone", qos=1))
        assert not ack.session_present
        assert (await c.expect(Disconnect)).reason_code == R.SERVER_BUSY
        assert await _received(watcher, ["wills/new"]) == ["wills/new"]
        with trio.fail_after(5):
            while gw.stats.connected > 1 or "new" in gw.router.sessions:
                await trio.sleep(0.01)
        await _meta_topic_writable(broker, True)
        c, ack = await Client.connect(port, "dev", clean_start=False, session_expiry_interval=3600)
        assert ack.session_present and "a/#" in gw.router.sessions["dev"].subs
        await _publish(port, "a/1")
        assert await _received(c, ["a/1"]) == ["a/1"]
        await c.disconnect()
        c, ack = await Client.connect(port, "new", clean_start=False, session_expiry_interval=3600)
        assert not ack.session_present
        await c.disconnect()


async def test_a_subscribe_whose_record_is_refused_is_not_granted(tmp_path):
    async with running_gateway(tmp_path / "store") as (broker, gw, port):
        for version in (5, 4):
            cid = f"dev{version}"
            c, _ = await Client.connect(port, cid, version=version, clean_start=False,
                                        session_expiry_interval=3600 if version == 5 else None)
            assert (await c.subscribe(f"a{version}/#", qos=1)).reason_codes == (1,)
            await _meta_topic_writable(broker, False)
            ack = await c.subscribe(f"b{version}/#", f"a{version}/#", qos=0)
            assert ack.reason_codes == (R.UNSPECIFIED_ERROR,) * 2
            await _meta_topic_writable(broker, True)
            subs = gw.router.sessions[cid].subs
            assert list(subs) == [f"a{version}/#"] and subs[f"a{version}/#"][1].qos == 1  # as before the packet
            await _publish(port, f"b{version}/1", f"a{version}/1")
            assert await _received(c, [f"a{version}/1"]) == [f"a{version}/1"]  # the trie has the old subscription only
            await c.disconnect()


async def test_an_unsubscribe_whose_record_is_refused_keeps_the_subscription(tmp_path):
    async with running_gateway(tmp_path / "store") as (broker, gw, port):
        c, _ = await Client.connect(port, "dev5", clean_start=False, session_expiry_interval=3600)
        await c.subscribe("a/#", qos=1)
        await _meta_topic_writable(broker, False)
        await c.send(Unsubscribe(packet_id=c.next_pid(), topic_filters=["a/#", "none/#"]))
        assert (await c.expect(UnsubAck)).reason_codes == (R.UNSPECIFIED_ERROR,) * 2
        await _meta_topic_writable(broker, True)
        await _publish(port, "a/1")
        assert await _received(c, ["a/1"]) == ["a/1"]
        await c.disconnect()

        # 3.1.1's UNSUBACK cannot say it failed: the connection closes without one
        c, _ = await Client.connect(port, "dev4", version=4, clean_start=False)
        await c.subscribe("a/#", qos=1)
        await _meta_topic_writable(broker, False)
        await c.send(Unsubscribe(packet_id=c.next_pid(), topic_filters=["a/#"]))
        assert await c.recv() is None
        await _meta_topic_writable(broker, True)
        c, ack = await Client.connect(port, "dev4", version=4, clean_start=False)
        assert ack.session_present and list(gw.router.sessions["dev4"].subs) == ["a/#"]
        await _publish(port, "a/2")
        assert await _received(c, ["a/2"]) == ["a/2"]
        await c.disconnect()
