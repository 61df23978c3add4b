"""Shared helpers for the gateway.mqtt tests (not a test module)."""

from __future__ import annotations

from gateway.mqtt import NEED_DATA, ConnAck, Connect, MQTTConnection, encode
from gateway.mqtt._decode import decode_packet, read_fixed_header


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


class StreamDecoder:
    """Incremental decoding of any packet type (either direction), for tests."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.buf = b""

    def feed(self, data: bytes) -> list:
        self.buf += data
        out = []
        while True:
            header = read_fixed_header(self.buf, 0, len(self.buf))
            if header is None:
                return out
            first, length, body = header
            if body + length > len(self.buf):
                return out
            out.append(decode_packet(first, self.buf, body, body + length, self.version))
            self.buf = self.buf[body + length :]


def decode_three_ways(data: bytes, version: int) -> list:
    """Decode whole, one byte at a time, and with trailing bytes; all must agree."""
    whole = StreamDecoder(version).feed(data)
    dec = StreamDecoder(version)
    bytewise = []
    for i in range(len(data)):
        bytewise += dec.feed(data[i : i + 1])
    trailing_dec = StreamDecoder(version)
    trailing = trailing_dec.feed(data + b"\x30\x0a\x00")  # the start of another PUBLISH
    assert whole == bytewise == trailing
    assert trailing_dec.buf == b"\x30\x0a\x00"
    return whole


def connect_bytes(version: int, **kw) -> bytes:
    kw.setdefault("client_id", "c")
    return encode(Connect(protocol_version=version, **kw), version)


def connected(version: int, connack: ConnAck | None = None, **connect_kw) -> MQTTConnection:
    """A server connection that has accepted a CONNECT and sent CONNACK."""
    conn = MQTTConnection()
    conn.receive_data(connect_bytes(version, **connect_kw))
    (ev,) = conn.events()
    assert isinstance(ev, Connect)
    conn.send(connack or ConnAck())
    return conn


def feed_events(conn: MQTTConnection, data: bytes, whole: bool = True) -> list:
    out = []
    chunks = [data] if whole else [data[i : i + 1] for i in range(len(data))]
    for chunk in chunks:
        conn.receive_data(chunk)
        while (ev := conn.next_event()) is not NEED_DATA:
            out.append(ev)
    return out
