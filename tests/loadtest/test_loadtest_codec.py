"""The raw codec: whole input, one byte at a time, trailing bytes."""

import pytest

from loadtest import codec


def _stream():
    return (codec.connect("c1", version=5, clean=False, session_expiry=60,
                          receive_maximum=10)
            + codec.subscribe(7, [("a/#", 1), ("$share/g/b/+", 2)], version=5)
            + codec.publish("a/b", b"x" * 300, qos=1, packet_id=9, version=5)
            + codec.puback(9) + codec.pubrec(10) + codec.pubrel(10) + codec.pubcomp(10)
            + codec.PINGREQ_PACKET + codec.DISCONNECT_PACKET)


KINDS = [codec.CONNECT, codec.SUBSCRIBE, codec.PUBLISH, codec.PUBACK, codec.PUBREC,
         codec.PUBREL, codec.PUBCOMP, codec.PINGREQ, codec.DISCONNECT]


def test_whole_input():
    packets = codec.PacketReader().feed(_stream())
    assert [k for k, _f, _b in packets] == KINDS
    _k, flags, body = packets[2]
    topic, qos, pid, payload = codec.parse_publish(flags, body, codec.MQTT5)
    assert (topic, qos, pid, bytes(payload)) == (b"a/b", 1, 9, b"x" * 300)
    assert codec.packet_id_of(packets[5][2]) == 10
    assert packets[5][1] == 0x02  # PUBREL flags


def test_one_byte_at_a_time():
    reader = codec.PacketReader()
    got = []
    for i, byte in enumerate(_stream()):
        got += [(k, bytes(b)) for k, _f, b in reader.feed(bytes([byte]))]
    assert [k for k, _b in got] == KINDS
    assert got == [(k, bytes(b)) for k, _f, b in codec.PacketReader().feed(_stream())]


def test_trailing_bytes_wait_for_the_rest():
    whole = codec.publish("t", b"payload", qos=0)
    reader = codec.PacketReader()
    assert len(reader.feed(whole + whole[:3])) == 1
    rest = reader.feed(whole[3:])
    assert len(rest) == 1
    assert bytes(codec.parse_publish(rest[0][1], rest[0][2])[3]) == b"payload"


def test_varint_round_trip_and_bounds():
    for n in (0, 127, 128, 16383, 16384, 2_097_151, 2_097_152, 268_435_455):
        enc = codec.varint(n)
        assert codec.read_varint(enc, 0) == (n, len(enc))
        assert codec.read_varint(enc[:-1], 0) is None
    with pytest.raises(ValueError):
        codec.varint(268_435_456)
    with pytest.raises(codec.ProtocolError):
        codec.PacketReader().feed(b"\x30\xff\xff\xff\xff\x01")


def test_publish_prefix_matches_publish():
    payload = b"abc" * 10
    for version in (codec.MQTT311, codec.MQTT5):
        for qos in (0, 1, 2):
            kw = dict(qos=qos, packet_id=5 if qos else 0, version=version)
            assert (codec.publish_prefix("x/y", len(payload), **kw) + payload
                    == codec.publish("x/y", payload, **kw))


def test_connect_311_layout():
    pkt = codec.connect("id", clean=True, keepalive=30)
    assert pkt == b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x1e\x00\x02id"


def test_connack_receive_maximum_is_read_among_other_properties():
    from gateway.mqtt import ConnAck, encode
    from loadtest.codec import MQTT5, MQTT311, PacketReader, connack_receive_maximum

    pkt = encode(ConnAck(receive_maximum=20, topic_alias_maximum=10, assigned_client_identifier="abc",
                         user_properties=(("k", "v"),), maximum_packet_size=1 << 20), MQTT5)
    [(_kind, _flags, body)] = PacketReader().feed(pkt)
    assert connack_receive_maximum(body, MQTT5) == 20
    [(_kind, _flags, body)] = PacketReader().feed(encode(ConnAck(), MQTT5))
    assert connack_receive_maximum(body, MQTT5) == 65535  # absent: no limit
    [(_kind, _flags, body)] = PacketReader().feed(encode(ConnAck(), MQTT311))
    assert connack_receive_maximum(body, MQTT311) == 65535
