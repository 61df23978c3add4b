"""Hypothesis: arbitrary bytes never break the connection; valid events round-trip."""

from hypothesis import HealthCheck, given, settings, strategies as st

from gateway.mqtt import (
    NEED_DATA,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    MQTTConnection,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    Publish,
    RemoteProtocolError,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
    decode_all,
    encode,
)
from mqtt_helpers import connect_bytes

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Interesting first bytes (valid types and flags) to reach deep into the decoders.
first_bytes = st.sampled_from([0x10, 0x20, 0x30, 0x32, 0x34, 0x3B, 0x40, 0x50, 0x62, 0x70, 0x82, 0x90,
                               0xA2, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0])


@st.composite
def packetish(draw):
    body = draw(st.binary(max_size=40))
    return bytes((draw(first_bytes), len(body))) + body


noise = st.lists(st.one_of(st.binary(max_size=60), packetish()), max_size=6).map(b"".join)


@FAST
@given(version=st.sampled_from([3, 4, 5]), data=noise, cut=st.integers(1, 7))
def test_arbitrary_bytes_after_connect(version, data, cut):
    conn = MQTTConnection(max_packet_size=1000, topic_alias_maximum=3)
    first = connect_bytes(version, client_id="fz") if version != 3 else connect_bytes(3, client_id="fz")
    conn.receive_data(first)
    conn.events()
    stream = data
    try:
        for i in range(0, len(stream), cut):
            conn.receive_data(stream[i : i + cut])
            steps = 0
            while conn.next_event() is not NEED_DATA:
                steps += 1
                assert steps <= len(stream) + 1  # every event consumes bytes: no hang
        conn.receive_data(b"")
        conn.events()
    except RemoteProtocolError as exc:
        conn.error_response(exc)


@FAST
@given(data=noise)
def test_arbitrary_bytes_as_first_packet(data):
    conn = MQTTConnection()
    try:
        conn.receive_data(data)
        conn.events()
    except RemoteProtocolError as exc:
        conn.error_response(exc)


text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
topic = text.filter(lambda t: "+" not in t and "#" not in t and t)
pairs = st.lists(st.tuples(text, text), max_size=2).map(tuple)
pid = st.integers(1, 65535)
u32 = st.integers(0, 2**32 - 1)
opt = st.none


def maybe(s):
    return st.one_of(st.none(), s)


@st.composite
def publishes(draw):
    qos = draw(st.integers(0, 2))
    return Publish(
        topic=draw(topic), payload=draw(st.binary(max_size=30)), qos=qos, retain=draw(st.booleans()),
        dup=draw(st.booleans()) if qos else False, packet_id=draw(pid) if qos else None,
        message_expiry_interval=draw(maybe(u32)), content_type=draw(maybe(text)),
        response_topic=draw(maybe(topic)), correlation_data=draw(maybe(st.binary(max_size=8))),
        subscription_identifiers=tuple(draw(st.lists(st.integers(1, 268_435_455), max_size=2))),
        payload_format_indicator=draw(maybe(st.integers(0, 1))), user_properties=draw(pairs),
    )


subscriptions = st.builds(
    Subscription, topic_filter=topic, qos=st.integers(0, 2), no_local=st.booleans(),
    retain_as_published=st.booleans(), retain_handling=st.integers(0, 2),
)
wills = st.builds(Will, topic=topic, payload=st.binary(max_size=8), qos=st.integers(0, 2), retain=st.booleans(),
                  will_delay_interval=maybe(u32), user_properties=pairs)
events5 = st.one_of(
    publishes(),
    st.builds(Connect, protocol_version=st.just(5), client_id=text, clean_start=st.booleans(),
              keep_alive=st.integers(0, 65535), username=maybe(text), password=maybe(st.binary(max_size=8)),
              will=maybe(wills), session_expiry_interval=maybe(u32), receive_maximum=maybe(st.integers(1, 65535)),
              maximum_packet_size=maybe(st.integers(1, 2**32 - 1)), user_properties=pairs),
    st.builds(ConnAck, session_present=st.booleans(), topic_alias_maximum=maybe(st.integers(0, 65535)),
              assigned_client_identifier=maybe(text), reason_string=maybe(text)),
    *[st.builds(cls, packet_id=pid, reason_code=st.sampled_from(codes), reason_string=maybe(text),
                user_properties=pairs)
      for cls, codes in ((PubAck, [0, 0x10, 0x80, 0x99]), (PubRec, [0, 0x91]), (PubRel, [0, 0x92]),
                         (PubComp, [0, 0x92]))],
    st.builds(Subscribe, packet_id=pid, subscriptions=st.lists(subscriptions, min_size=1, max_size=3),
              subscription_identifier=maybe(st.integers(1, 268_435_455)), user_properties=pairs),
    st.builds(SubAck, packet_id=pid, reason_codes=st.lists(st.sampled_from([0, 1, 2, 0x80, 0x8F]), min_size=1)),
    st.builds(Unsubscribe, packet_id=pid, topic_filters=st.lists(topic, min_size=1, max_size=3)),
    st.builds(UnsubAck, packet_id=pid, reason_codes=st.lists(st.sampled_from([0, 0x11, 0x87]), min_size=1)),
    st.builds(Disconnect, reason_code=st.sampled_from([0, 4, 0x8E]), session_expiry_interval=maybe(u32),
              reason_string=maybe(text)),
    st.builds(Auth, reason_code=st.sampled_from([0, 0x18, 0x19]), authentication_method=maybe(text)),
)


@FAST
@given(event=events5)
def test_v5_events_round_trip(event):
    assert decode_all(encode(event, 5), 5) == [event]


@FAST
@given(pub=publishes(), version=st.sampled_from([3, 4]))
def test_v311_publish_round_trip(pub, version):
    (got,) = decode_all(encode(pub, version), version)
    assert (got.topic, got.payload, got.qos, got.retain, got.dup, got.packet_id) == (
        pub.topic, pub.payload, pub.qos, pub.retain, pub.dup, pub.packet_id)
