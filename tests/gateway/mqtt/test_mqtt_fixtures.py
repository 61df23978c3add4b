"""Byte fixtures for every packet type in 3.1.1 (and 3.1) and 5.0.

Each fixture is hand-assembled from the spec, decoded three ways (whole,
one byte at a time, with trailing bytes), compared to its event, and
re-encoded to the same bytes. Client-to-server packets are also decoded
through MQTTConnection, whole and bytewise.
"""

import pytest

from gateway.mqtt import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    Publish,
    ReasonCode,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
    encode,
)
from mqtt_helpers import connected, decode_three_ways, feed_events, h

V4 = [
    ("connect", "10 0d 0004 4d515454 04 02 003c 0001 63",
     Connect(protocol_version=4, client_id="c", keep_alive=60)),
    ("connect-all-flags", "10 1a 0004 4d515454 04 ee 000a 0001 63 0001 77 0002 6869 0001 75 0001 70",
     Connect(protocol_version=4, client_id="c", keep_alive=10, username="u", password=b"p",
             will=Will(topic="w", payload=b"hi", qos=1, retain=True))),
    ("connack", "20 02 01 00", ConnAck(session_present=True)),
    ("connack-refused", "20 02 00 05", ConnAck(reason_code=ReasonCode.NOT_AUTHORIZED)),
    ("publish-qos0", "30 07 0003 612f62 6869", Publish(topic="a/b", payload=b"hi")),
    ("publish-qos1-dup-retain", "3b 09 0003 612f62 000a 6869",
     Publish(topic="a/b", payload=b"hi", qos=1, dup=True, retain=True, packet_id=10)),
    ("publish-qos2-empty", "34 07 0003 612f62 000b", Publish(topic="a/b", qos=2, packet_id=11)),
    ("puback", "40 02 000a", PubAck(packet_id=10)),
    ("pubrec", "50 02 000a", PubRec(packet_id=10)),
    ("pubrel", "62 02 000a", PubRel(packet_id=10)),
    ("pubcomp", "70 02 000a", PubComp(packet_id=10)),
    ("subscribe", "82 0c 0001 0003 612f23 01 0001 62 02",
     Subscribe(packet_id=1, subscriptions=[Subscription(topic_filter="a/#", qos=1),
                                           Subscription(topic_filter="b", qos=2)])),
    ("suback", "90 05 0001 01 02 80", SubAck(packet_id=1, reason_codes=[1, 2, 0x80])),
    ("unsubscribe", "a2 0a 0002 0003 612f23 0001 62", Unsubscribe(packet_id=2, topic_filters=["a/#", "b"])),
    ("unsuback", "b0 02 0002", UnsubAck(packet_id=2)),
    ("pingreq", "c0 00", PingReq()),
    ("pingresp", "d0 00", PingResp()),
    ("disconnect", "e0 00", Disconnect()),
]

V3 = [
    ("connect-mqisdp", "10 0f 0006 4d5149736470 03 02 003c 0001 63",
     Connect(protocol_version=3, client_id="c", keep_alive=60)),
    ("connack", "20 02 00 00", ConnAck()),
]

V5 = [
    ("connect", "10 1d 0004 4d515454 05 02 003c 0f 1100000 03c 210014 2600016b000176 0001 63",
     Connect(protocol_version=5, client_id="c", keep_alive=60, session_expiry_interval=60,
             receive_maximum=20, user_properties=[("k", "v")])),
    ("connect-will", "10 21 0004 4d515454 05 c6 0000 00 0001 63 05 1800000005 0001 77 0002 6869 0001 75 0001 70",
     Connect(protocol_version=5, client_id="c", username="u", password=b"p",
             will=Will(topic="w", payload=b"hi", will_delay_interval=5))),
    ("connect-password-only", "10 11 0004 4d515454 05 42 0000 00 0001 63 0001 70",
     Connect(protocol_version=5, client_id="c", password=b"p")),
    ("connack", "20 08 00 00 05 22000a 2401", ConnAck(topic_alias_maximum=10, maximum_qos=1)),
    ("connack-refused", "20 03 00 87 00", ConnAck(reason_code=ReasonCode.NOT_AUTHORIZED)),
    ("publish-qos0", "30 08 0003 612f62 00 6869", Publish(topic="a/b", payload=b"hi")),
    ("publish-props", "32 16 0003 612f62 000a 0c 03000174 0b01 0b8201 230001 6869",
     Publish(topic="a/b", payload=b"hi", qos=1, packet_id=10, content_type="t",
             subscription_identifiers=(1, 130), topic_alias=1)),
    ("puback", "40 02 000a", PubAck(packet_id=10)),
    ("puback-reason", "40 03 000a 10", PubAck(packet_id=10, reason_code=0x10)),
    ("puback-reason-string", "40 08 000a 87 04 1f000178", PubAck(packet_id=10, reason_code=0x87, reason_string="x")),
    ("pubrec", "50 03 000a 80", PubRec(packet_id=10, reason_code=0x80)),
    ("pubrel", "62 03 000a 92", PubRel(packet_id=10, reason_code=0x92)),
    ("pubcomp", "70 02 000a", PubComp(packet_id=10)),
    ("subscribe", "82 0b 0001 02 0b05 0003 612f23 2d",
     Subscribe(packet_id=1, subscription_identifier=5,
               subscriptions=[Subscription(topic_filter="a/#", qos=1, no_local=True,
                                           retain_as_published=True, retain_handling=2)])),
    ("suback", "90 06 0001 00 01 02 a2", SubAck(packet_id=1, reason_codes=[1, 2, 0xA2])),
    ("unsubscribe", "a2 08 0002 00 0003 612f23", Unsubscribe(packet_id=2, topic_filters=["a/#"])),
    ("unsuback", "b0 05 0002 00 00 11", UnsubAck(packet_id=2, reason_codes=[0, 0x11])),
    ("pingreq", "c0 00", PingReq()),
    ("pingresp", "d0 00", PingResp()),
    ("disconnect", "e0 00", Disconnect()),
    ("disconnect-will", "e0 01 04", Disconnect(reason_code=4)),
    ("disconnect-props", "e0 07 00 05 110000000a", Disconnect(session_expiry_interval=10)),
    ("auth", "f0 00", Auth()),
    ("auth-props", "f0 0a 18 08 1500016d 16000164",
     Auth(reason_code=0x18, authentication_method="m", authentication_data=b"d")),
]

CASES = [(4, *c) for c in V4] + [(3, *c) for c in V3] + [(5, *c) for c in V5]
CLIENT_TO_SERVER = (Connect, Publish, PubAck, PubRec, PubRel, PubComp, Subscribe, Unsubscribe, PingReq, Disconnect)
# Server-to-client packets, and a PUBLISH with subscription identifiers, which a client may not send.
CLIENT_CASES = [c for c in CASES if type(c[3]) in CLIENT_TO_SERVER and c[1] != "publish-props"]


@pytest.mark.parametrize("version,name,hexdata,event", CASES, ids=[f"v{c[0]}-{c[1]}" for c in CASES])
def test_fixture(version, name, hexdata, event):
    data = h(hexdata)
    assert decode_three_ways(data, version) == [event]
    assert encode(event, version) == data


@pytest.mark.parametrize("version,name,hexdata,event", CLIENT_CASES, ids=[f"v{c[0]}-{c[1]}" for c in CLIENT_CASES])
@pytest.mark.parametrize("whole", [True, False])
def test_fixture_through_connection(version, name, hexdata, event, whole):
    if type(event) is Connect:
        from gateway.mqtt import MQTTConnection

        conn = MQTTConnection()
        assert feed_events(conn, h(hexdata) + b"\xc0", whole) == [event]
        return
    extra = {"session_expiry_interval": 60} if name == "disconnect-props" else {}
    conn = connected(version, ConnAck(topic_alias_maximum=5) if version == 5 else None, **extra)
    got = feed_events(conn, h(hexdata) + b"\xc0", whole)
    assert got == [event]


def test_client_publish_with_alias_through_connection():
    conn = connected(5, ConnAck(topic_alias_maximum=5))
    first = encode(Publish(topic="a/b", qos=1, packet_id=10, topic_alias=1, payload=b"x"), 5)
    second = encode(Publish(topic="", qos=0, topic_alias=1, payload=b"y"), 5)
    got = feed_events(conn, first + second, whole=False)
    assert got == [Publish(topic="a/b", qos=1, packet_id=10, payload=b"x"), Publish(topic="a/b", payload=b"y")]
    assert all(ev.topic_alias is None for ev in got)


def test_v4_encoding_drops_what_it_cannot_carry():
    assert encode(PubAck(packet_id=1, reason_code=0x87, reason_string="no"), 4) == h("40 02 0001")
    assert encode(SubAck(packet_id=1, reason_codes=[0, 0x87]), 4) == h("90 04 0001 00 80")
    assert encode(ConnAck(reason_code=ReasonCode.BAD_USER_NAME_OR_PASSWORD), 4) == h("20 02 00 04")
    assert encode(ConnAck(reason_code=ReasonCode.CLIENT_IDENTIFIER_NOT_VALID), 4) == h("20 02 00 02")
    assert encode(ConnAck(reason_code=ReasonCode.QUOTA_EXCEEDED), 4) == h("20 02 00 03")
    assert encode(ConnAck(session_present=True), 3) == h("20 02 00 00")
    assert encode(Publish(topic="a", user_properties=[("k", "v")]), 4) == h("30 03 0001 61")
