"""A tiny MQTT 3.1.1 / 5.0 codec for the lean raw-socket clients.

Only what a load generator needs: it encodes CONNECT, SUBSCRIBE, PUBLISH,
PUBACK, PUBREC, PUBREL, PUBCOMP, PINGREQ and DISCONNECT, and reads any packet
a broker may send back.

Rules it keeps:

- Sans-I/O: bytes in, packets out; no socket, no clock.
- Encoders return complete packets; a PUBLISH is split into a constant prefix
  (fixed header, topic, packet id, properties) and the payload, so a
  publisher encodes the prefix once and only stamps the payload per message.
- The reader is tolerant: it accepts any packet type and any flags, yields
  whole packets only, keeps partial input for the next feed, and never raises
  on a well-framed packet it does not understand (the caller ignores it).
  A malformed remaining-length is the only error (``ProtocolError``).
"""

from __future__ import annotations

import struct

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = (
    8, 9, 10, 11, 12, 13, 14,
)

MQTT311, MQTT5 = 4, 5

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")


class ProtocolError(Exception):
    """The peer sent bytes that are not MQTT framing."""


def varint(n: int) -> bytes:
    """MQTT variable byte integer."""
    if n < 0 or n > 268_435_455:
        raise ValueError(f"varint out of range: {n}")
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def read_varint(buf, pos: int) -> tuple[int, int] | None:
    """(value, next position), or None when buf ends inside the integer."""
    value = shift = 0
    for i in range(4):
        if pos + i >= len(buf):
            return None
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise ProtocolError("variable byte integer longer than 4 bytes")


def _string(s: str | bytes) -> bytes:
    data = s.encode() if isinstance(s, str) else s
    return _U16.pack(len(data)) + data


def _packet(kind: int, flags: int, body: bytes) -> bytes:
    return bytes([kind << 4 | flags]) + varint(len(body)) + body


def _props(props: bytes, version: int) -> bytes:
    return varint(len(props)) + props if version == MQTT5 else b""


def connect(client_id: str, *, version: int = MQTT311, clean: bool = True,
            keepalive: int = 60, session_expiry: int = 0,
            receive_maximum: int = 0) -> bytes:
    flags = 0x02 if clean else 0x00
    props = b""
    if version == MQTT5:
        if session_expiry:
            props += b"\x11" + _U32.pack(session_expiry)
        if receive_maximum:
            props += b"\x21" + _U16.pack(receive_maximum)
    body = (_string("MQTT") + bytes([version, flags]) + _U16.pack(keepalive)
            + _props(props, version) + _string(client_id))
    return _packet(CONNECT, 0, body)


def subscribe(packet_id: int, filters: list[tuple[str, int]], *,
              version: int = MQTT311) -> bytes:
    body = _U16.pack(packet_id) + _props(b"", version)
    for topic_filter, qos in filters:
        body += _string(topic_filter) + bytes([qos])
    return _packet(SUBSCRIBE, 0x02, body)


def publish_prefix(topic: str, payload_len: int, *, qos: int = 0,
                   packet_id: int = 0, version: int = MQTT311,
                   dup: bool = False) -> bytes:
    """Everything of a PUBLISH before its payload."""
    variable = _string(topic)
    if qos:
        variable += _U16.pack(packet_id)
    variable += _props(b"", version)
    flags = (0x08 if dup else 0) | qos << 1
    return (bytes([PUBLISH << 4 | flags]) + varint(len(variable) + payload_len)
            + variable)


def publish(topic: str, payload: bytes, **kw) -> bytes:
    return publish_prefix(topic, len(payload), **kw) + payload


def _ack(kind: int, flags: int, packet_id: int) -> bytes:
    return bytes([kind << 4 | flags, 2]) + _U16.pack(packet_id)


def puback(packet_id: int) -> bytes:
    return _ack(PUBACK, 0, packet_id)


def pubrec(packet_id: int) -> bytes:
    return _ack(PUBREC, 0, packet_id)


def pubrel(packet_id: int) -> bytes:
    return _ack(PUBREL, 0x02, packet_id)


def pubcomp(packet_id: int) -> bytes:
    return _ack(PUBCOMP, 0, packet_id)


PINGREQ_PACKET = bytes([PINGREQ << 4, 0])
DISCONNECT_PACKET = bytes([DISCONNECT << 4, 0])


class PacketReader:
    """Splits a byte stream into (type, flags, body) packets."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, memoryview]]:
        """All complete packets so far; bodies stay valid until the next feed."""
        buf = self._buf
        buf += data
        packets = []
        pos, end = 0, len(buf)
        view = memoryview(bytes(buf))
        while pos + 2 <= end:
            got = read_varint(buf, pos + 1)
            if got is None:
                break
            length, start = got
            if start + length > end:
                break
            first = buf[pos]
            packets.append((first >> 4, first & 0x0F, view[start:start + length]))
            pos = start + length
        del buf[:pos]
        return packets


def parse_publish(flags: int, body, version: int = MQTT311):
    """(topic bytes, qos, packet id, payload) of a PUBLISH body."""
    qos = (flags >> 1) & 0x03
    (tlen,) = _U16.unpack_from(body, 0)
    pos = 2 + tlen
    topic = bytes(body[2:pos])
    packet_id = 0
    if qos:
        (packet_id,) = _U16.unpack_from(body, pos)
        pos += 2
    if version == MQTT5:
        got = read_varint(body, pos)
        if got is None:
            raise ProtocolError("PUBLISH ends inside its property length")
        plen, pos = got
        pos += plen
    return topic, qos, packet_id, body[pos:]


def packet_id_of(body) -> int:
    """Packet id of PUBACK / PUBREC / PUBREL / PUBCOMP / SUBACK."""
    return _U16.unpack_from(body, 0)[0] if len(body) >= 2 else 0


def connack_code(body, version: int = MQTT311) -> int:
    """Return code (3.1.1) or reason code (5.0) of a CONNACK; 0 is success."""
    return body[1] if len(body) >= 2 else 0x80


# CONNACK property ids and their value sizes (None = length-prefixed), MQTT 5 section 3.2.2.3
_CONNACK_PROPS = {0x11: 4, 0x21: 2, 0x24: 1, 0x25: 1, 0x27: 4, 0x12: None, 0x22: 2, 0x1F: None,
                  0x26: "pair", 0x28: 1, 0x29: 1, 0x2A: 1, 0x13: 2, 0x1A: None, 0x1C: None,
                  0x15: None, 0x16: None}


def connack_receive_maximum(body, version: int = MQTT311) -> int:
    """The server's Receive Maximum from a 5.0 CONNACK (65535 when absent or 3.1.1).

    A 5.0 client must not have more unacknowledged QoS 1/2 publishes than this.
    """
    if version != MQTT5 or len(body) < 3:
        return 65535
    got = read_varint(body, 2)
    if got is None:
        raise ProtocolError("CONNACK ends inside its property length")
    plen, pos = got
    end = pos + plen
    while pos < end:
        pid = body[pos]
        pos += 1
        size = _CONNACK_PROPS.get(pid)
        if pid == 0x21:
            return _U16.unpack_from(body, pos)[0]
        if size == "pair":
            for _ in range(2):
                pos += 2 + _U16.unpack_from(body, pos)[0]
        elif size is None:
            if pid not in _CONNACK_PROPS:
                raise ProtocolError(f"unknown CONNACK property 0x{pid:02X}")
            pos += 2 + _U16.unpack_from(body, pos)[0]
        else:
            pos += size
    return 65535
