"""The connection's PUBLISH loop (``MQTTConnection._publishes``) against the
general per-packet path it shortcuts.

A connected client's PUBLISHes are decoded in one loop per read; anything
the loop does not take (another packet type, a remaining length of 3 or
more bytes, a malformed length, an incomplete or too large packet) goes
through ``_next_event`` as before. Both must give the same events, in the
same order, with the same errors at the same point, however the bytes are
cut into reads; topic names are decoded once per topic and never cached
when refused.
"""

from __future__ import annotations

import random

import pytest
from mqtt_helpers import connected

from gateway.mqtt import (
    NEED_DATA, ConnAck, PingReq, Publish, PubRel, RemoteProtocolError, ReasonCode, Subscribe, Subscription, encode,
)
from gateway.mqtt._decode import decode_all


def _mixed(version: int) -> tuple[bytes, list]:
    """Publishes of every remaining-length size class between other packets."""
    events = [
        Publish(topic="a/b", payload=b"x"),
        Publish(topic="a/b", payload=b"y" * 200),  # 2-byte remaining length
        Publish(topic="a/b", payload=b"z" * 20000, retain=True),  # 3-byte remaining length
        Publish(topic="\u00e9/1", payload=b"", qos=1, packet_id=7),
        PingReq(),
        Publish(topic="a/c", payload=b"q2", qos=2, packet_id=8, dup=True, retain=True),
        PubRel(packet_id=8),
        Publish(topic="a/b", payload=b"last"),
        Subscribe(packet_id=9, subscriptions=[Subscription(topic_filter="a/#")]),
        Publish(topic="a/b", payload=b"after"),
    ]
    if version == 5:
        events.insert(2, Publish(topic="v5", payload=b"p", message_expiry_interval=9, content_type="t",
                                 user_properties=(("k", "v"),)))
    return b"".join(encode(e, version) for e in events), events


@pytest.mark.parametrize("version", [4, 5])
def test_every_cut_of_a_mixed_stream_gives_the_events_of_the_general_decoder(version):
    data, sent = _mixed(version)
    assert decode_all(data, version) == sent
    rng = random.Random(13)
    cuts = [1, 2, 3, 7, len(data)] + [rng.randrange(1, 300) for _ in range(20)]
    for size in cuts:
        conn = connected(version)
        got = []
        for i in range(0, len(data), size):
            conn.receive_data(data[i : i + size])
            got += conn.events()
        assert got == sent, size
        assert conn.next_event() is NEED_DATA
        assert conn._buf == b""  # all consumed: nothing kept


def test_decoded_publishes_equal_constructed_ones_and_read_every_field():
    conn = connected(4)
    conn.receive_data(encode(Publish(topic="t", payload=b"1"), 4) + encode(Publish(topic="t", payload=b"2",
                                                                                   retain=True), 4))
    first, second = conn.events()
    assert first == Publish(topic="t", payload=b"1") and second == Publish(topic="t", payload=b"2", retain=True)
    assert (first.qos, first.retain, first.dup, first.packet_id, first.user_properties) == (0, False, False, None, ())
    assert first.topic is second.topic  # one str per topic name


def test_an_error_after_good_publishes_comes_after_them_and_stays():
    conn = connected(4)
    good = encode(Publish(topic="ok", payload=b"1"), 4)
    bad = bytes((0x30, 5, 0, 3)) + b"a/+"  # a wildcard in a topic name
    conn.receive_data(good + good + bad + good)
    assert conn.events() == [Publish(topic="ok", payload=b"1")] * 2
    for _ in range(2):
        with pytest.raises(RemoteProtocolError) as err:
            conn.events()
        assert err.value.reason_code == ReasonCode.TOPIC_NAME_INVALID
    # a refused name is not remembered as a good one
    other = connected(4)
    other.receive_data(bad)
    with pytest.raises(RemoteProtocolError):
        other.events()


@pytest.mark.parametrize("data, code", [
    (bytes((0x30, 0x80, 0x00)) + b"\x00" * 10, ReasonCode.MALFORMED_PACKET),  # length not in its shortest form
    (bytes((0x36, 5, 0, 3)) + b"a/b", ReasonCode.MALFORMED_PACKET),  # QoS 3
    (bytes((0x38, 5, 0, 3)) + b"a/b", ReasonCode.MALFORMED_PACKET),  # DUP at QoS 0
    (bytes((0x32, 5, 0, 3)) + b"a/b", ReasonCode.MALFORMED_PACKET),  # no packet identifier
    (bytes((0x30, 2, 0, 0)), ReasonCode.MALFORMED_PACKET),  # empty topic name (3.1.1)
])
def test_malformed_publishes_are_refused_after_the_good_ones(data, code):
    conn = connected(4)
    good = encode(Publish(topic="ok", payload=b"1"), 4)
    conn.receive_data(good + data)
    assert conn.events() == [Publish(topic="ok", payload=b"1")]
    with pytest.raises(RemoteProtocolError) as err:
        conn.events()
    assert err.value.reason_code == code


def test_a_publish_over_the_maximum_packet_size_is_refused_before_its_body_arrives():
    conn = connected(5, ConnAck(maximum_packet_size=100, topic_alias_maximum=2))
    conn.receive_data(encode(Publish(topic="a", payload=b"1"), 5) + bytes((0x30, 0xC8, 0x01)))
    assert conn.events() == [Publish(topic="a", payload=b"1")]
    with pytest.raises(RemoteProtocolError) as err:
        conn.events()
    assert err.value.reason_code == ReasonCode.PACKET_TOO_LARGE


def test_topic_aliases_resolve_inside_the_loop():
    conn = connected(5, ConnAck(topic_alias_maximum=2))
    conn.receive_data(encode(Publish(topic="long/topic", payload=b"1", topic_alias=1), 5)
                      + encode(Publish(topic="", payload=b"2", topic_alias=1), 5)
                      + encode(Publish(topic="", payload=b"3", topic_alias=2), 5))
    assert conn.events() == [Publish(topic="long/topic", payload=b"1"), Publish(topic="long/topic", payload=b"2")]
    with pytest.raises(RemoteProtocolError) as err:  # alias 2 was never set
        conn.events()
    assert err.value.reason_code == ReasonCode.PROTOCOL_ERROR
