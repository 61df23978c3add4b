"""One publish to more persistent sessions than fit in one entry's property block.

1,600 offline persistent sessions subscribed to one topic need ~41 KB of
session-queue names in the message's multi-dispatch list, more than the
32,767-byte property block of a RocketMQ entry; the store carries the rest in
reference records. The publish is acknowledged and every session, first to
last, gets the message when it comes back.
"""

import socket

from gateway.mqtt import (ConnAck, Connect, Disconnect, PubAck, Publish, SubAck, Subscribe, Subscription,
                          decode_all, encode)
from serve_process import ServeProcess, free_port

SESSIONS = 1600
V = 4  # MQTT 3.1.1: clean session off = persistent


def _session(i: int) -> str:
    return f"fanout-device-{i:06d}"


def _read_until(sock, pred, timeout=20.0):
    sock.settimeout(timeout)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return decode_all(data, V)
        data += chunk
        events = decode_all(data, V)
        if pred(events):
            return events


def _subscribe_offline(port: int, ids: range) -> None:
    socks = []
    for i in ids:
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(encode(Connect(client_id=_session(i), clean_start=False, keep_alive=60, protocol_version=V), V)
                  + encode(Subscribe(packet_id=1, subscriptions=(Subscription(topic_filter="fan/all", qos=1),)), V))
        socks.append(s)
    for s in socks:
        events = _read_until(s, lambda ev: any(isinstance(e, SubAck) for e in ev))
        assert isinstance(events[0], ConnAck) and events[0].reason_code == 0
        s.sendall(encode(Disconnect(), V))
        s.close()


def test_a_publish_reaches_1600_offline_persistent_sessions(tmp_path):
    port = free_port()
    with ServeProcess(tmp_path / "d", "--mqtt-port", str(port), "--ws-port", "0", "--namesrv-port", "0",
                      "--broker-port", "0", "--flush", "sync"):
        for start in range(0, SESSIONS, 200):
            _subscribe_offline(port, range(start, min(SESSIONS, start + 200)))

        with socket.create_connection(("127.0.0.1", port)) as pub:
            pub.sendall(encode(Connect(client_id="fanout-pub", clean_start=True, protocol_version=V), V)
                        + encode(Publish(topic="fan/all", payload=b"hello all", qos=1, packet_id=7), V))
            events = _read_until(pub, lambda ev: any(isinstance(e, PubAck) for e in ev))
            assert [e.packet_id for e in events if isinstance(e, PubAck)] == [7]

        for i in list(range(0, SESSIONS, 97)) + [SESSIONS - 1]:
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(encode(Connect(client_id=_session(i), clean_start=False, keep_alive=60,
                                         protocol_version=V), V))
                events = _read_until(s, lambda ev: any(isinstance(e, Publish) for e in ev))
                assert isinstance(events[0], ConnAck) and events[0].session_present
                got = [e for e in events if isinstance(e, Publish)]
                assert [(p.topic, p.payload, p.qos) for p in got] == [("fan/all", b"hello all", 1)], i
