"""Malformed input and protocol violations: one row per rule.

Each row is fed to a server connection (after a CONNECT, unless the row is
about CONNECT) whole and one byte at a time; it must raise
RemoteProtocolError with the expected reason code, and error_response must
give the bytes the spec asks for.
"""

import pytest

from gateway.mqtt import (
    ConnAck,
    ConnectionState,
    MQTTConnection,
    ReasonCode as R,
    RemoteProtocolError,
)
from mqtt_helpers import connect_bytes, connected, feed_events, h

M, P = R.MALFORMED_PACKET, R.PROTOCOL_ERROR

# (name, version, hex, reason)
AFTER_CONNECT = [
    ("reserved type 0", 4, "00 00", M),
    ("AUTH before 5.0", 4, "f0 00", M),
    ("PUBREL flags 0", 4, "60 02 0001", M),
    ("SUBSCRIBE flags 0", 4, "80 06 0001 0001 61 00", M),
    ("PUBACK flags set", 4, "41 02 0001", M),
    ("PINGREQ flags set", 5, "c1 00", M),
    ("PUBLISH QoS 3", 4, "36 05 0001 61 0001", M),
    ("PUBLISH DUP at QoS 0", 4, "38 03 0001 61", M),
    ("PUBLISH wildcard #", 4, "30 05 0003 612f23", R.TOPIC_NAME_INVALID),
    ("PUBLISH wildcard +", 5, "30 06 0003 612f2b 00", R.TOPIC_NAME_INVALID),
    ("PUBLISH empty topic 3.1.1", 4, "30 02 0000", M),
    ("PUBLISH empty topic no alias", 5, "30 03 0000 00", P),
    ("PUBLISH packet id 0", 4, "32 05 0001 61 0000", P),
    ("PUBLISH truncated packet id", 4, "32 04 0001 61 00", M),
    ("topic with U+0000", 4, "30 04 0002 6100", M),
    ("topic with a surrogate", 4, "30 05 0003 eda080", M),
    ("topic not UTF-8", 4, "30 03 0001 ff", M),
    ("topic overlong UTF-8", 4, "30 04 0002 c080", M),
    ("string past the end", 4, "30 03 0005 61", M),
    ("remaining length 5 bytes", 4, "30 ff ff ff ff 7f", M),
    ("remaining length not minimal", 4, "30 80 00", M),
    ("SUBSCRIBE without filters", 4, "82 02 0001", P),
    ("SUBSCRIBE without filters 5.0", 5, "82 03 0001 00", P),
    ("SUBSCRIBE QoS 3", 4, "82 06 0001 0001 61 03", M),
    ("SUBSCRIBE reserved bits 3.1.1", 4, "82 06 0001 0001 61 04", M),
    ("SUBSCRIBE reserved bits 5.0", 5, "82 07 0001 00 0001 61 40", M),
    ("SUBSCRIBE retain handling 3", 5, "82 07 0001 00 0001 61 30", P),
    ("SUBSCRIBE empty filter", 4, "82 05 0001 0000 01", P),
    ("SUBSCRIBE filter missing options", 4, "82 05 0001 0001 61", M),
    ("SUBSCRIBE no local on shared", 5, "82 10 0001 00 000a 2473686172652f672f61 04", P),
    ("SUBSCRIBE packet id 0", 4, "82 06 0000 0001 61 00", P),
    ("SUBSCRIBE identifier 0", 5, "82 09 0001 02 0b00 0001 61 00", P),
    ("SUBSCRIBE two identifiers", 5, "82 0b 0001 04 0b01 0b02 0001 61 00", P),
    ("UNSUBSCRIBE without filters", 4, "a2 02 0001", P),
    ("UNSUBSCRIBE empty filter", 4, "a2 04 0001 0000", P),
    ("PINGREQ with a body", 4, "c0 01 00", M),
    ("DISCONNECT with a body 3.1.1", 4, "e0 01 00", M),
    ("PUBACK packet id 0", 4, "40 02 0000", P),
    ("PUBACK extra byte 3.1.1", 4, "40 03 0001 00", M),
    ("PUBACK truncated", 4, "40 01 00", M),
    ("PUBACK unknown reason", 5, "40 03 0001 05", M),
    ("PUBREL reason not for PUBREL", 5, "62 03 0001 10", M),
    ("DISCONNECT unknown reason", 5, "e0 01 03", M),
    ("property not allowed in PUBLISH", 5, "30 09 0001 61 05 1100000001", M),
    ("unknown property", 5, "30 06 0001 61 02 7f00", M),
    ("property repeated", 5, "30 0c 0001 61 08 03000174 03000174", P),
    ("property length past the end", 5, "30 04 0001 61 09", M),
    ("property value truncated", 5, "30 06 0001 61 02 0200", M),
    ("payload format indicator 2", 5, "30 06 0001 61 02 0102", P),
    ("response topic with wildcard", 5, "30 09 0001 61 05 0800022f23", P),
    ("topic alias 0", 5, "30 07 0001 61 03 230000", R.TOPIC_ALIAS_INVALID),
    ("topic alias above maximum", 5, "30 07 0001 61 03 230009", R.TOPIC_ALIAS_INVALID),
    ("topic alias unbound", 5, "30 06 0000 03 230001", P),
    ("client PUBLISH with subscription id", 5, "30 06 0001 61 02 0b01", P),
    ("user property value truncated", 5, "30 0a 0001 61 06 26 0001 6b 0005", M),
    ("second CONNECT", 4, connect_bytes(4).hex(), P),
    ("CONNACK from a client", 4, "20 02 00 00", P),
    ("SUBACK from a client", 4, "90 03 0001 00", P),
    ("PINGRESP from a client", 5, "d0 00", P),
    ("AUTH without a method in CONNECT", 5, "f0 00", P),
    ("DISCONNECT session expiry after 0", 5, "e0 07 00 05 110000000a", P),
]


@pytest.mark.parametrize("name,version,hexdata,reason", AFTER_CONNECT, ids=[r[0] for r in AFTER_CONNECT])
@pytest.mark.parametrize("whole", [True, False])
def test_after_connect(name, version, hexdata, reason, whole):
    conn = connected(version, ConnAck(topic_alias_maximum=4) if version == 5 else None)
    with pytest.raises(RemoteProtocolError) as info:
        feed_events(conn, h(hexdata), whole)
    assert info.value.reason_code == reason
    # The error is sticky.
    with pytest.raises(RemoteProtocolError):
        conn.next_event()
    out = conn.error_response(info.value)
    if version == 5:
        assert out == bytes((0xE0, 1, reason))
    else:
        assert out == b""
    assert conn.state is ConnectionState.CLOSED


def _connect(level, flags, body_after_flags=b"\x00\x00\x00\x01c", name=b"MQTT"):
    var = len(name).to_bytes(2, "big") + name + bytes((level, flags))
    if level == 5:
        body_after_flags = body_after_flags[:2] + b"\x00" + body_after_flags[2:]
    body = var + body_after_flags
    return bytes((0x10, len(body))) + body


# (name, bytes, reason, error_response)
CONNECT_ROWS = [
    ("reserved flag", _connect(4, 0x03), M, b""),
    ("reserved flag 5.0", _connect(5, 0x03), M, h("20 03 00 81 00")),
    ("will QoS 3", _connect(4, 0x1E), M, b""),
    ("will QoS without will", _connect(4, 0x0A), M, b""),
    ("will retain without will", _connect(5, 0x22), M, h("20 03 00 81 00")),
    ("password without username 3.1.1", _connect(4, 0x42, b"\x00\x00\x00\x01c\x00\x01p"), M, b""),
    ("protocol level 6", _connect(6, 0x02), R.UNSUPPORTED_PROTOCOL_VERSION, h("20 02 00 01")),
    ("protocol level 3 with MQTT", _connect(3, 0x02), R.UNSUPPORTED_PROTOCOL_VERSION, h("20 02 00 01")),
    ("protocol level 4 with MQIsdp", _connect(4, 0x02, name=b"MQIsdp"), R.UNSUPPORTED_PROTOCOL_VERSION,
     h("20 02 00 01")),
    ("unknown protocol name", _connect(4, 0x02, name=b"MQTX"), R.UNSUPPORTED_PROTOCOL_VERSION, b""),
    ("empty client id without clean session", _connect(4, 0x00, b"\x00\x00\x00\x00"),
     R.CLIENT_IDENTIFIER_NOT_VALID, h("20 02 00 02")),
    ("empty client id in 3.1", _connect(3, 0x02, b"\x00\x00\x00\x00", name=b"MQIsdp"),
     R.CLIENT_IDENTIFIER_NOT_VALID, h("20 02 00 02")),
    ("trailing bytes", _connect(4, 0x02, b"\x00\x00\x00\x01cX"), M, b""),
    ("truncated client id", _connect(4, 0x02, b"\x00\x00\x00\x05c"), M, b""),
    ("receive maximum 0", h("10 10 0004 4d515454 05 02 0000 03 210000 0001 63"), P, h("20 03 00 82 00")),
    ("maximum packet size 0", h("10 12 0004 4d515454 05 02 0000 05 2700000000 0001 63"), P, h("20 03 00 82 00")),
    ("request problem information 2", h("10 0f 0004 4d515454 05 02 0000 02 1702 0001 63"), P,
     h("20 03 00 82 00")),
    ("auth data without method", h("10 12 0004 4d515454 05 02 0000 04 16000178 0001 63"), P,
     h("20 03 00 82 00")),
    ("property not allowed in CONNECT", h("10 0f 0004 4d515454 05 02 0000 02 2401 0001 63"), M,
     h("20 03 00 81 00")),
    ("will topic with wildcard", h("10 16 0004 4d515454 05 06 0000 00 0001 63 00 0001 23 0002 6869"),
     R.TOPIC_NAME_INVALID, h("20 03 00 90 00")),
    ("first packet not CONNECT", h("c0 00"), P, b""),
    ("first packet PUBLISH", h("30 03 0001 61"), P, b""),
]


@pytest.mark.parametrize("name,data,reason,response", CONNECT_ROWS, ids=[r[0] for r in CONNECT_ROWS])
@pytest.mark.parametrize("whole", [True, False])
def test_connect_rules(name, data, reason, response, whole):
    conn = MQTTConnection()
    with pytest.raises(RemoteProtocolError) as info:
        feed_events(conn, data, whole)
    assert info.value.reason_code == reason
    assert conn.error_response(info.value) == response
    assert conn.state is ConnectionState.CLOSED


@pytest.mark.parametrize("version", [4, 5])
def test_packet_too_large_is_refused_from_its_header(version):
    conn = MQTTConnection(max_packet_size=64)
    conn.receive_data(connect_bytes(version))
    conn.events()
    conn.send(ConnAck())
    conn.receive_data(b"\x30\xc8\x01")  # header of a 203-byte PUBLISH; no body yet
    with pytest.raises(RemoteProtocolError) as info:
        conn.events()
    assert info.value.reason_code == R.PACKET_TOO_LARGE
    assert conn.error_response(info.value) == (h("e0 01 95") if version == 5 else b"")


def test_packet_too_large_before_connect():
    conn = MQTTConnection(max_packet_size=10)
    conn.receive_data(connect_bytes(4))
    with pytest.raises(RemoteProtocolError) as info:
        conn.events()
    assert info.value.reason_code == R.PACKET_TOO_LARGE


def test_connack_maximum_packet_size_becomes_the_limit():
    conn = connected(5, ConnAck(maximum_packet_size=20))
    assert conn.max_packet_size == 20
    conn.receive_data(b"\x30\x13" + b"\x00\x01a\x00" + b"x" * 15)  # 21 bytes
    with pytest.raises(RemoteProtocolError) as info:
        conn.events()
    assert info.value.reason_code == R.PACKET_TOO_LARGE


def test_enhanced_auth_allows_only_auth_before_connack():
    conn = MQTTConnection()
    conn.receive_data(connect_bytes(5, authentication_method="SCRAM") + h("c0 00"))
    with pytest.raises(RemoteProtocolError) as info:
        conn.events()
        conn.events()
    assert info.value.reason_code == P
    assert conn.error_response(info.value) == h("20 03 00 82 00")
