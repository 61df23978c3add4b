"""An MQTT client on a blocking socket that sends only what the test tells it.

For tests that need the order of packets in their hands: no automatic
acknowledgement, no keepalive ping, one ``sendall`` per ``send`` (the bytes
are in the server's socket when it returns). Packets are encoded and decoded
with ``gateway.mqtt`` (the codec's own tests hold it to the specification).
Every read has a deadline; ``closed`` is set when the server closes.
"""

from __future__ import annotations

import socket
import time

from gateway.mqtt import ConnAck, Connect, Disconnect, PubAck, Publish, SubAck, Subscribe, Subscription, decode_all, \
    encode
from mqtt_packets import split_packets

WAIT = 15.0


class RawMqtt:
    def __init__(self, port: int, version: int = 5) -> None:
        self.version = version
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.buf = b""
        self.kept: list = []  # packets read but not yet asked for
        self.closed = False
        self._pid = 0

    def send(self, *events) -> None:
        self.sock.sendall(b"".join(encode(e, self.version) for e in events))

    def next(self, kind, timeout: float = WAIT):
        """The next packet of type ``kind`` (others are kept in order), or None
        at the deadline or when the server has closed the connection."""
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self.kept):
                if isinstance(ev, kind):
                    return self.kept.pop(i)
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return None
            except OSError:  # reset by the server
                chunk = b""
            if not chunk:
                self.closed = True
                continue
            whole, self.buf = split_packets(self.buf + chunk)
            self.kept += decode_all(whole, self.version)

    def connect(self, client_id: str, *, clean_start: bool = False, **fields) -> ConnAck:
        """CONNECT (keepalive 0: no pings); the CONNACK, whatever its code."""
        if self.version == 5 and not clean_start:
            fields.setdefault("session_expiry_interval", 3600)
        self.send(Connect(client_id=client_id, clean_start=clean_start, keep_alive=0, protocol_version=self.version,
                          **fields))
        ack = self.next(ConnAck)
        assert ack is not None, f"no CONNACK for {client_id}"
        return ack

    def subscribe(self, *filters: str, qos: int = 1) -> None:
        pid = self.packet_id()
        self.send(Subscribe(packet_id=pid, subscriptions=tuple(Subscription(topic_filter=f, qos=qos) for f in filters)))
        ack = self.next(SubAck)
        assert ack is not None and ack.packet_id == pid and list(ack.reason_codes) == [qos] * len(filters), ack

    def publish(self, topic: str, payload: bytes) -> None:
        """A QoS 1 PUBLISH, once the server has acknowledged it (stored)."""
        pid = self.packet_id()
        self.send(Publish(topic=topic, payload=payload, qos=1, packet_id=pid))
        ack = self.next(PubAck)
        assert ack is not None and ack.packet_id == pid and ack.reason_code < 0x80, ack

    def packet_id(self) -> int:
        self._pid = self._pid % 0xFFFF + 1
        return self._pid

    def close(self) -> None:
        if not self.closed:
            try:
                self.send(Disconnect())
            except OSError:
                pass
        self.sock.close()
