"""MQTTConnection: the state tables walked entry by entry, and its other rules."""

import pytest

from gateway.mqtt import (
    NEED_DATA,
    Auth,
    ConnAck,
    Connect,
    ConnectionClosed,
    ConnectionState as S,
    Disconnect,
    LocalProtocolError,
    MQTTConnection,
    PacketTooLarge,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    Publish,
    ReasonCode,
    RemoteProtocolError,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    encode,
)
from gateway.mqtt._state import CONNACK_ACCEPTED, CONNACK_REFUSED, RECEIVE, SEND
from mqtt_helpers import connect_bytes, connected, h

SAMPLES = {
    Connect: Connect(protocol_version=5, client_id="x"),
    ConnAck: ConnAck(),
    Publish: Publish(topic="t", payload=b"p", qos=1, packet_id=1),
    PubAck: PubAck(packet_id=1),
    PubRec: PubRec(packet_id=1),
    PubRel: PubRel(packet_id=1),
    PubComp: PubComp(packet_id=1),
    Subscribe: Subscribe(packet_id=1, subscriptions=[Subscription(topic_filter="t")]),
    SubAck: SubAck(packet_id=1, reason_codes=[0]),
    Unsubscribe: Unsubscribe(packet_id=1, topic_filters=["t"]),
    UnsubAck: UnsubAck(packet_id=1, reason_codes=[0]),
    PingReq: PingReq(),
    PingResp: PingResp(),
    Disconnect: Disconnect(),
    Auth: Auth(reason_code=0x18, authentication_method="m"),
}
SEND_SAMPLES = {**SAMPLES, CONNACK_ACCEPTED: ConnAck(), CONNACK_REFUSED: ConnAck(reason_code=0x87)}
SEND_SAMPLES.pop(ConnAck)


def in_state(state: S, auth: bool = False, turn: str = "server") -> MQTTConnection:
    """A connection in ``state``; with ``auth`` its CONNECT named an Authentication
    Method and an exchange is under way in which it is ``turn``'s turn to send AUTH."""
    conn = MQTTConnection()
    if state is S.AWAIT_CONNECT:
        return conn
    conn.receive_data(connect_bytes(5, authentication_method="m" if auth else None, session_expiry_interval=9))
    assert len(conn.events()) == 1
    if state is S.CONNECTING:
        if auth and turn == "client":
            conn.send(Auth(reason_code=0x18, authentication_method="m"))
        return conn
    conn.send(ConnAck())
    if state is S.CONNECTED:
        if auth:
            conn.receive_data(encode(Auth(reason_code=0x19, authentication_method="m"), 5))
            conn.events()
            if turn == "client":
                conn.send(Auth(reason_code=0x18, authentication_method="m"))
        return conn
    conn.receive_data(b"\xe0\x00")
    conn.events()
    assert conn.state is S.CLOSED
    return conn


@pytest.mark.parametrize("state,cls", list(RECEIVE), ids=[f"{s.name}-{c.__name__}" for s, c in RECEIVE])
def test_receive_table_entry(state, cls):
    conn = in_state(state, auth=cls is Auth, turn="client")
    if cls is ConnectionClosed:
        conn.receive_data(b"")
        assert conn.events() == [ConnectionClosed(clean=state is S.CLOSED)]
    else:
        conn.receive_data(encode(SAMPLES[cls], 5))
        assert conn.events() == [SAMPLES[cls]]
    assert conn.state is RECEIVE[state, cls]


MISSING_RECEIVE = [(s, c) for s in S if s is not S.CLOSED for c in SAMPLES if (s, c) not in RECEIVE]


@pytest.mark.parametrize("state,cls", MISSING_RECEIVE, ids=[f"{s.name}-{c.__name__}" for s, c in MISSING_RECEIVE])
def test_receive_outside_table_is_a_protocol_error(state, cls):
    conn = in_state(state)
    conn.receive_data(encode(SAMPLES[cls], 5))
    with pytest.raises(RemoteProtocolError) as info:
        conn.events()
    assert info.value.reason_code == ReasonCode.PROTOCOL_ERROR


def test_data_after_close_is_ignored():
    conn = in_state(S.CLOSED)
    conn.receive_data(encode(PingReq(), 5))
    assert conn.events() == []
    conn.receive_data(b"")
    assert conn.events() == [ConnectionClosed(clean=True)]
    assert conn.next_event() is NEED_DATA


def _key_name(key):
    return key if isinstance(key, str) else key.__name__


@pytest.mark.parametrize("state,key", list(SEND), ids=[f"{s.name}-{_key_name(k)}" for s, k in SEND])
def test_send_table_entry(state, key):
    conn = in_state(state, auth=key is Auth)
    data = conn.send(SEND_SAMPLES[key])
    assert data == encode(SEND_SAMPLES[key], 5)
    assert conn.state is SEND[state, key]


MISSING_SEND = [(s, k) for s in S for k in SEND_SAMPLES if (s, k) not in SEND]


@pytest.mark.parametrize("state,key", MISSING_SEND, ids=[f"{s.name}-{_key_name(k)}" for s, k in MISSING_SEND])
def test_send_outside_table_is_a_local_error(state, key):
    conn = in_state(state)
    with pytest.raises(LocalProtocolError):
        conn.send(SEND_SAMPLES[key])
    assert conn.state is state


def test_events_returns_every_complete_packet_of_a_read():
    conn = MQTTConnection()
    pubs = [Publish(topic="a", payload=bytes([i])) for i in range(3)]
    data = connect_bytes(4) + b"".join(encode(p, 4) for p in pubs) + b"\x30"
    assert conn.events() == []
    conn.receive_data(data)
    evs = conn.events()
    assert [type(e) for e in evs] == [Connect] + [Publish] * 3 and evs[1:] == pubs
    assert conn.protocol_version == 4


def test_error_after_good_packets_is_raised_next_time():
    conn = connected(4)
    conn.receive_data(encode(PingReq(), 4) + h("00 00"))
    assert conn.events() == [PingReq()]
    with pytest.raises(RemoteProtocolError):
        conn.events()


def test_eof_without_disconnect_is_unclean():
    conn = connected(4)
    conn.receive_data(b"\x30\x05\x00")  # partial packet, then EOF
    conn.receive_data(b"")
    assert conn.events() == [ConnectionClosed(clean=False)]
    with pytest.raises(LocalProtocolError):
        conn.receive_data(b"more")


def test_client_maximum_packet_size_on_output():
    conn = connected(5, maximum_packet_size=30)
    big = Publish(topic="t", payload=b"x" * 40)
    with pytest.raises(PacketTooLarge) as info:
        conn.send(big)
    assert info.value.limit == 30 and conn.state is S.CONNECTED
    # Acks shed their reason string and user properties to fit (5.0 3.4.2.2.2).
    ack = PubAck(packet_id=1, reason_code=0x80, reason_string="r" * 40, user_properties=[("k", "v")])
    assert conn.send(ack) == h("40 03 0001 80")
    assert conn.send_encoded_publish(b"\x30\x03\x00\x01a") == b"\x30\x03\x00\x01a"
    with pytest.raises(PacketTooLarge):
        conn.send_encoded_publish(encode(big, 5))


def test_outbound_topic_aliases():
    conn = connected(5, topic_alias_maximum=1)
    first = conn.with_topic_alias(Publish(topic="a/b", payload=b"1"))
    assert first.topic == "a/b" and first.topic_alias == 1
    again = conn.with_topic_alias(Publish(topic="a/b", payload=b"2"))
    assert again.topic == "" and again.topic_alias == 1
    other = conn.with_topic_alias(Publish(topic="c", payload=b"3"))
    assert other.topic == "c" and other.topic_alias == 1  # least recently used alias rebound
    for pub in (first, again, other):
        conn.send(pub)
    with pytest.raises(LocalProtocolError):
        conn.send(Publish(topic="x", topic_alias=2))


def test_too_large_publish_forgets_its_new_alias():
    conn = connected(5, topic_alias_maximum=2, maximum_packet_size=20)
    pub = conn.with_topic_alias(Publish(topic="t", payload=b"x" * 30))
    with pytest.raises(PacketTooLarge):
        conn.send(pub)
    assert conn.with_topic_alias(Publish(topic="t")).topic == "t"


def test_no_aliases_before_5():
    conn = connected(4)
    pub = Publish(topic="t")
    assert conn.with_topic_alias(pub) is pub


def test_server_disconnect_in_3_1_1_is_just_a_close():
    conn = connected(4)
    assert conn.send(Disconnect(reason_code=ReasonCode.SESSION_TAKEN_OVER)) == b""
    assert conn.state is S.CLOSED


def test_server_disconnect_may_not_carry_session_expiry():
    conn = connected(5)
    with pytest.raises(LocalProtocolError):
        conn.send(Disconnect(session_expiry_interval=5))


def test_auth_with_another_method_is_a_protocol_error():
    conn = MQTTConnection()
    conn.receive_data(connect_bytes(5, authentication_method="m"))
    conn.events()
    conn.send(ConnAck())
    conn.receive_data(encode(Auth(reason_code=0x19, authentication_method="other"), 5))
    with pytest.raises(RemoteProtocolError):
        conn.events()


def _client_auth(conn: MQTTConnection, code: int) -> None:
    conn.receive_data(encode(Auth(reason_code=code, authentication_method="m"), 5))
    assert conn.events()[-1] == Auth(reason_code=code, authentication_method="m")


def test_enhanced_authentication_takes_turns():
    """5.0 section 4.12: CONNECT, then AUTH 0x18 each way as often as the method
    needs, then CONNACK; later AUTH 0x19, AUTH 0x18 each way, AUTH 0x00."""
    conn = MQTTConnection()
    conn.receive_data(connect_bytes(5, authentication_method="m"))
    conn.events()
    for _ in range(2):
        conn.send(Auth(reason_code=0x18, authentication_method="m"))
        with pytest.raises(LocalProtocolError):  # twice in a row: the client has the turn
            conn.send(Auth(reason_code=0x18, authentication_method="m"))
        _client_auth(conn, 0x18)
    with pytest.raises(LocalProtocolError):  # success only ends a re-authentication
        conn.send(Auth(reason_code=0x00, authentication_method="m"))
    conn.send(ConnAck())
    with pytest.raises(LocalProtocolError):  # no exchange under way
        conn.send(Auth(reason_code=0x18, authentication_method="m"))
    for _ in range(2):
        _client_auth(conn, 0x19)
        conn.send(Auth(reason_code=0x18, authentication_method="m"))
        _client_auth(conn, 0x18)
        conn.send(Auth(reason_code=0x00, authentication_method="m"))
    assert conn.state is S.CONNECTED


@pytest.mark.parametrize("steps, code", [
    ([], 0x18),  # CONNECT, then a continue the server did not ask for
    ([], 0x19),  # re-authenticate before CONNACK
    ([ConnAck()], 0x18),  # a continue after CONNACK with no exchange
    ([ConnAck(), 0x19], 0x19),  # re-authenticate during a re-authentication
    ([ConnAck(), 0x19], 0x18),  # a continue while the server has the turn
    ([ConnAck()], 0x00),  # a client may not send success
])
def test_auth_out_of_turn_is_a_protocol_error(steps, code):
    conn = MQTTConnection()
    conn.receive_data(connect_bytes(5, authentication_method="m"))
    conn.events()
    for step in steps:
        if isinstance(step, int):
            _client_auth(conn, step)
        else:
            conn.send(step)
    conn.receive_data(encode(Auth(reason_code=code, authentication_method="m"), 5))
    with pytest.raises(RemoteProtocolError) as info:
        conn.events()
    assert info.value.reason_code == ReasonCode.PROTOCOL_ERROR


def test_peer_limits_learned_from_connect():
    conn = connected(5, receive_maximum=7, topic_alias_maximum=3, maximum_packet_size=999)
    assert (conn.peer_receive_maximum, conn.peer_topic_alias_maximum, conn.peer_max_packet_size) == (7, 3, 999)
    conn = connected(4)
    assert (conn.peer_receive_maximum, conn.peer_topic_alias_maximum, conn.peer_max_packet_size) == (65535, 0, None)


def test_request_problem_information_0_strips_reason_strings_but_not_on_publish_connack_disconnect():
    """5.0 [MQTT-3.1.2-29]."""
    conn = connected(5, request_problem_information=0)
    props = dict(reason_string="why", user_properties=(("k", "v"),))
    assert conn.send(SubAck(packet_id=1, reason_codes=[0x87], **props)) == encode(
        SubAck(packet_id=1, reason_codes=[0x87]), 5)
    assert conn.send(PubAck(packet_id=2, reason_code=0x87, **props)) == encode(PubAck(packet_id=2, reason_code=0x87), 5)
    pub = Publish(topic="t", payload=b"", user_properties=(("k", "v"),))
    assert conn.send(pub) == encode(pub, 5)
    assert conn.send(Disconnect(reason_code=0x80, **props)) == encode(Disconnect(reason_code=0x80, **props), 5)
    assert connected(5).send(PubAck(packet_id=2, reason_code=0x87, **props)) == encode(
        PubAck(packet_id=2, reason_code=0x87, **props), 5)
