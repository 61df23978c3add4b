"""MQTT 5 features and protocol rules, against the in-process gateway on a real socket."""

from __future__ import annotations

import trio

from gateway.mqtt import (ConnAck, Disconnect, PubAck, Publish, ReasonCode, SubAck, Subscribe, Subscription,
                          UnsubAck, Unsubscribe)


async def test_retained_set_sent_cleared_and_retain_handling(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        pub, _ = await client_cls.connect(port, "p")
        await pub.publish("home/t", b"21", qos=1, retain=True)
        await pub.expect(PubAck)
        s, _ = await client_cls.connect(port, "s")
        await s.subscribe(Subscription(topic_filter="home/+", qos=1))
        m = await s.expect(Publish)
        assert (m.payload, m.retain) == (b"21", True)
        await s.send(PubAck(packet_id=m.packet_id))
        # retain handling 1: only for a new subscription; 2: never
        await s.subscribe(Subscription(topic_filter="home/+", qos=1, retain_handling=1))
        await s.subscribe(Subscription(topic_filter="home/#", qos=1, retain_handling=2))
        # live retained publish: retain flag cleared unless retain-as-published
        await s.subscribe(Subscription(topic_filter="home/t", qos=0, retain_as_published=True))
        m = await s.expect(Publish)  # a new subscription with retain handling 0
        assert (m.payload, m.retain) == (b"21", True)
        await pub.publish("home/t", b"22", qos=0, retain=True)
        m = await s.expect(Publish)
        assert m.payload == b"22" and m.retain  # overlapping subs: one delivery, RAP from any
        # an empty retained payload clears it
        await pub.publish("home/t", b"", qos=1, retain=True)
        await pub.expect(PubAck)
        await s.expect(Publish)
        late, _ = await client_cls.connect(port, "late")
        await late.subscribe("home/#")
        with trio.move_on_after(0.3):
            ev = await late.recv()
            raise AssertionError(f"cleared retained message still sent: {ev!r}")


async def test_no_local_and_subscription_identifiers(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        c, _ = await client_cls.connect(port, "me")
        await c.subscribe(Subscription(topic_filter="chat/#", no_local=True))
        await c.send(Subscribe(packet_id=c.next_pid(), subscriptions=[Subscription(topic_filter="news/+")],
                               subscription_identifier=7))
        await c.expect(SubAck)
        await c.send(Subscribe(packet_id=c.next_pid(), subscriptions=[Subscription(topic_filter="news/#")],
                               subscription_identifier=9))
        await c.expect(SubAck)
        await c.publish("chat/x", b"mine")
        await c.publish("news/a", b"both")
        m = await c.expect(Publish)
        assert m.topic == "news/a"
        assert sorted(m.subscription_identifiers) == [7, 9]


async def test_properties_pass_through_and_message_expiry(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        s, _ = await client_cls.connect(port, "s", clean_start=False, session_expiry_interval=60)
        await s.subscribe("rr/#", qos=1)
        await s.disconnect()
        p, _ = await client_cls.connect(port, "p")
        await p.publish("rr/req", b"{}", qos=1, content_type="application/json", response_topic="rr/resp",
                        correlation_data=b"\x00\x01", user_properties=(("k", "v"), ("k", "w")),
                        payload_format_indicator=1, message_expiry_interval=100)
        await p.expect(PubAck)
        await p.publish("rr/old", b"stale", qos=1, message_expiry_interval=1)
        await p.expect(PubAck)
        await trio.sleep(2.1)
        s, _ = await client_cls.connect(port, "s", clean_start=False, session_expiry_interval=60)
        m = await s.expect(Publish)
        assert m.content_type == "application/json" and m.response_topic == "rr/resp"
        assert m.correlation_data == b"\x00\x01" and m.user_properties == (("k", "v"), ("k", "w"))
        assert m.payload_format_indicator == 1
        assert 95 <= m.message_expiry_interval <= 98  # remaining, not the original
        await s.send(PubAck(packet_id=m.packet_id))
        with trio.move_on_after(0.3):
            ev = await s.recv()
            raise AssertionError(f"expired message delivered: {ev!r}")
        assert gw.stats.expired == 1


async def test_topic_aliases_both_ways(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        s, _ = await client_cls.connect(port, "s", topic_alias_maximum=5)
        await s.subscribe("alias/#")
        p, ack = await client_cls.connect(port, "p")
        assert ack.topic_alias_maximum == 10
        await p.publish("alias/long/topic", b"1", topic_alias=3)
        await p.send(Publish(topic="", payload=b"2", topic_alias=3))
        m1 = await s.expect(Publish)
        m2 = await s.expect(Publish)
        assert m1.topic == "alias/long/topic" and m1.topic_alias is not None
        assert m2.topic == "" and m2.topic_alias == m1.topic_alias and m2.payload == b"2"
        # an alias above the maximum is a protocol error for that client only
        await p.send(Publish(topic="alias/x", payload=b"", topic_alias=11))
        d = await p.expect(Disconnect)
        assert d.reason_code == ReasonCode.TOPIC_ALIAS_INVALID


async def test_assigned_client_id_and_311_empty_id_rules(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        c, ack = await client_cls.connect(port, "")
        assert ack.assigned_client_identifier
        c, ack = await client_cls.connect(port, "", version=4, clean_start=True)
        assert ack.reason_code == 0
        # 3.1.1 empty id with clean session off: identifier rejected (return code 2)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([4, 0, 0, 60, 0, 0]))
        data = await stream.receive_some(10)
        assert data == bytes([0x20, 2, 0, 2])


async def test_unsubscribe_reason_codes(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        c, _ = await client_cls.connect(port, "u")
        await c.subscribe("a/b")
        await c.send(Unsubscribe(packet_id=c.next_pid(), topic_filters=["a/b", "nope"]))
        ack = await c.expect(UnsubAck)
        assert ack.reason_codes == (0, ReasonCode.NO_SUBSCRIPTION_EXISTED)
        ack = await c.subscribe("bad/#/x")
        assert ack.reason_codes == (ReasonCode.TOPIC_FILTER_INVALID,)


async def test_dollar_topics_and_delayed_refusal(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        c, _ = await client_cls.connect(port, "d")
        await c.subscribe("#")
        pid = await c.publish("$delayed/10/later/t", b"x", qos=1)
        ack = await c.expect(PubAck)
        if not gw.timers_supported():
            assert ack.reason_code == ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR
            assert "not supported" in ack.reason_string
        await c.publish("$SYS/broker/fake", b"x", qos=1)
        ack = await c.expect(PubAck)
        assert ack.reason_code == ReasonCode.NOT_AUTHORIZED


async def test_malformed_packet_closes_only_that_connection(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        good, _ = await client_cls.connect(port, "good")
        await good.subscribe("ok")
        bad, _ = await client_cls.connect(port, "bad")
        await bad.send_raw(bytes([0x82, 3, 0, 1, 0]))  # SUBSCRIBE with no filter, wrong flags
        d = await bad.recv()
        assert isinstance(d, Disconnect) and d.reason_code >= 0x80
        assert await bad.recv() is None
        bad4, _ = await client_cls.connect(port, "bad4", version=4)
        await bad4.send_raw(b"\xf0\x00")  # reserved packet type
        assert await bad4.recv() is None
        await good.publish("ok", b"still here")
        m = await good.expect(Publish)
        assert m.payload == b"still here"


async def test_maximum_packet_size(gateway_factory, client_cls):
    async with gateway_factory({"sysInterval": 0, "maxPacketSize": 1024}) as (broker, gw, port):
        s, ack = await client_cls.connect(port, "s", maximum_packet_size=200)
        assert ack.maximum_packet_size == 1024
        await s.subscribe("big/#")
        p, _ = await client_cls.connect(port, "p")
        await p.publish("big/a", b"x" * 500)  # too big for s: dropped for s only
        await p.publish("big/b", b"small")
        m = await s.expect(Publish)
        assert m.payload == b"small"
        await p.publish("big/c", b"x" * 2000)
        d = await p.expect(Disconnect)
        assert d.reason_code == ReasonCode.PACKET_TOO_LARGE


async def test_password_file_and_acl(tmp_path, gateway_factory, client_cls):
    from gateway.auth import hash_password, write_password_file

    pw = tmp_path / "passwd"
    write_password_file(pw, {"alice": hash_password("secret")})
    acl = tmp_path / "acl"
    acl.write_text("user alice\ntopic readwrite alice/#\ntopic read public/#\n")
    settings = {"sysInterval": 0, "passwordFile": str(pw), "aclFile": str(acl), "allowAnonymous": False}
    async with gateway_factory(settings) as (broker, gw, port):
        c, ack = await client_cls.connect(port, "x", username="alice", password=b"wrong", expect=None)
        assert ack.reason_code == ReasonCode.BAD_USER_NAME_OR_PASSWORD
        c, ack = await client_cls.connect(port, "x", expect=None)
        assert ack.reason_code == ReasonCode.NOT_AUTHORIZED
        c, _ = await client_cls.connect(port, "x", username="alice", password=b"secret")
        ack = await c.subscribe("public/#", "secret/#", qos=1)
        assert ack.reason_codes == (1, ReasonCode.NOT_AUTHORIZED)
        await c.publish("public/x", b"no", qos=1)
        assert (await c.expect(PubAck)).reason_code == ReasonCode.NOT_AUTHORIZED
        await c.publish("alice/x", b"yes", qos=1)
        assert (await c.expect(PubAck)).reason_code == 0


async def test_inbound_receive_maximum(gateway_factory, client_cls):
    async with gateway_factory({"sysInterval": 0, "maxInflightMessages": 2}) as (broker, gw, port):
        c, ack = await client_cls.connect(port, "rm")
        assert ack.receive_maximum == 2
        from gateway.mqtt import PubRec

        for _ in range(3):
            await c.publish("rm", b"x", qos=2)
        await c.expect(PubRec)
        await c.expect(PubRec)
        d = await c.expect(Disconnect)
        assert d.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED


async def test_outbound_window_respects_client_receive_maximum(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        s, _ = await client_cls.connect(port, "s", receive_maximum=2)
        await s.subscribe("w", qos=1)
        p, _ = await client_cls.connect(port, "p")
        for i in range(5):
            await p.publish("w", b"%d" % i, qos=1)
            await p.expect(PubAck)
        first = [await s.expect(Publish) for _ in range(2)]
        with trio.move_on_after(0.2):
            ev = await s.recv()
            raise AssertionError(f"window exceeded: {ev!r}")
        await s.send(PubAck(packet_id=first[0].packet_id))
        m = await s.expect(Publish)
        assert m.payload == b"2"
