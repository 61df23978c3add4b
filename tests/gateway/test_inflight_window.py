"""Inbound flow control: MQTT 3.1.1 has none, MQTT 5 has the Receive Maximum we announce.

A 3.1.1 publisher may have any number of QoS 1 messages unacknowledged
(the load generator keeps 100 in flight); refusing it would drop a legal
client. An MQTT 5 publisher that exceeds our Receive Maximum is told 0x93.
"""

from __future__ import annotations

import socket

from gateway.mqtt import (ConnAck, Connect, Disconnect, MQTTConnection, PubAck, Publish, ReasonCode, encode,
                          decode_all)
from serve_process import ServeProcess, free_port


def _exchange(port: int, version: int, count: int) -> list:
    """CONNECT, then `count` QoS 1 PUBLISHes in one write; returns what the server sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        out = [encode(Connect(client_id=f"w{version}", clean_start=True, keep_alive=30, protocol_version=version), version)]
        out += [encode(Publish(topic="win/t", payload=b"%d" % i, qos=1, packet_id=i + 1), version) for i in range(count)]
        s.sendall(b"".join(out))
        data = b""
        events = []
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            data += chunk
            events = decode_all(data, version)
            if sum(isinstance(e, PubAck) for e in events) >= count or any(isinstance(e, Disconnect) for e in events):
                break
        return events


def test_a_311_publisher_may_keep_100_qos1_in_flight(tmp_path):
    port = free_port()
    with ServeProcess(tmp_path / "d", "--mqtt-port", str(port), "--ws-port", "0", "--namesrv-port", "0",
                      "--broker-port", "0"):
        events = _exchange(port, 4, 100)
    assert isinstance(events[0], ConnAck)
    assert sorted(e.packet_id for e in events if isinstance(e, PubAck)) == list(range(1, 101))


def test_an_mqtt5_publisher_over_the_receive_maximum_is_disconnected_with_0x93(tmp_path):
    port = free_port()
    with ServeProcess(tmp_path / "d", "--mqtt-port", str(port), "--ws-port", "0", "--namesrv-port", "0",
                      "--broker-port", "0"):
        events = _exchange(port, 5, 100)
    ack = events[0]
    assert isinstance(ack, ConnAck) and ack.receive_maximum == 32
    assert any(isinstance(e, Disconnect) and e.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED for e in events)
