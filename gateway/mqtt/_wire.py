"""Wire primitives shared by the decoder and the encoder.

Rules kept here (MQTT 3.1.1 section 1.5, 5.0 section 1.5):

* A Variable Byte Integer is 1 to 4 bytes, least significant group first;
  a fifth continuation byte, or a value not written in the fewest bytes,
  is a Malformed Packet. The largest value is 268,435,455.
* A UTF-8 string is a two-byte length then that many bytes of well-formed
  UTF-8: no surrogates (U+D800..U+DFFF), no U+0000, at most 65,535 bytes.
  Python's strict ``utf-8`` codec rejects surrogates and overlong forms,
  so decoding with it is the well-formedness check.
* Binary data is a two-byte length then bytes.
* Readers take ``(buf, pos, end)`` and return ``(value, new_pos)``; they
  never read past ``end`` and raise ``RemoteProtocolError`` (Malformed
  Packet) when the field does not fit. They never copy the buffer.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from ._reasons import LocalProtocolError, ReasonCode, RemoteProtocolError

MAX_VARINT = 268_435_455
MAX_STRING = 65_535
MALFORMED = ReasonCode.MALFORMED_PACKET

U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
unpack_u16 = U16.unpack_from
unpack_u32 = U32.unpack_from
pack_u16 = U16.pack
pack_u32 = U32.pack


class PacketType(IntEnum):
    """Control packet types (the high nibble of the first byte)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


# Not a packet type: the Will Properties of CONNECT, for the property tables.
WILL = 0

# Required low-nibble flags for every type except PUBLISH (3.1.1 table 2.2).
FIXED_FLAGS = {t: (2 if t in (6, 8, 10) else 0) for t in range(1, 16)}

_VARINT_SMALL = [bytes((i,)) for i in range(128)]


def encode_varint(n: int) -> bytes:
    if n < 128:
        return _VARINT_SMALL[n]
    if n > MAX_VARINT:
        raise LocalProtocolError(f"{n} does not fit a variable byte integer", ReasonCode.PACKET_TOO_LARGE)
    out = bytearray()
    while True:
        n, digit = n >> 7, n & 0x7F
        if n:
            out.append(digit | 0x80)
        else:
            out.append(digit)
            return bytes(out)


def read_varint(buf, pos: int, end: int) -> tuple[int, int]:
    """Read a Variable Byte Integer that must lie wholly before ``end``."""
    value = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise RemoteProtocolError("truncated variable byte integer", MALFORMED)
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift == 28:
            raise RemoteProtocolError("variable byte integer longer than 4 bytes", MALFORMED)
    if pos - start > 1 and byte == 0:
        raise RemoteProtocolError("variable byte integer not in its shortest form", MALFORMED)
    return value, pos


def read_u8(buf, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise RemoteProtocolError("truncated byte field", MALFORMED)
    return buf[pos], pos + 1


def read_u16(buf, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise RemoteProtocolError("truncated two byte integer", MALFORMED)
    return unpack_u16(buf, pos)[0], pos + 2


def read_u32(buf, pos: int, end: int) -> tuple[int, int]:
    if pos + 4 > end:
        raise RemoteProtocolError("truncated four byte integer", MALFORMED)
    return unpack_u32(buf, pos)[0], pos + 4


def read_binary(buf, pos: int, end: int) -> tuple[bytes, int]:
    if pos + 2 > end:
        raise RemoteProtocolError("truncated length prefix", MALFORMED)
    stop = pos + 2 + unpack_u16(buf, pos)[0]
    if stop > end:
        raise RemoteProtocolError("length prefix runs past the packet", MALFORMED)
    return bytes(buf[pos + 2 : stop]), stop


def read_str(buf, pos: int, end: int) -> tuple[str, int]:
    if pos + 2 > end:
        raise RemoteProtocolError("truncated length prefix", MALFORMED)
    stop = pos + 2 + unpack_u16(buf, pos)[0]
    if stop > end:
        raise RemoteProtocolError("string length runs past the packet", MALFORMED)
    return decode_utf8(buf[pos + 2 : stop]), stop


def decode_utf8(raw) -> str:
    try:
        text = str(raw, "utf-8")
    except UnicodeDecodeError:
        raise RemoteProtocolError("ill-formed UTF-8 string", MALFORMED) from None
    if "\x00" in text:
        raise RemoteProtocolError("UTF-8 string contains U+0000", MALFORMED)
    return text


def encode_str(text: str) -> bytes:
    raw = text.encode("utf-8")
    return pack_u16(len(raw)) + raw


def encode_binary(data: bytes) -> bytes:
    return pack_u16(len(data)) + data


def check_str(value: object, what: str) -> bytes:
    """Validate a string for the wire (``LocalProtocolError`` if not); returns its UTF-8."""
    if not isinstance(value, str):
        raise LocalProtocolError(f"{what} must be str, not {type(value).__name__}", MALFORMED)
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise LocalProtocolError(f"{what} contains a surrogate", MALFORMED) from None
    if len(raw) > MAX_STRING:
        raise LocalProtocolError(f"{what} is longer than 65535 bytes", MALFORMED)
    if "\x00" in value:
        raise LocalProtocolError(f"{what} contains U+0000", MALFORMED)
    return raw


def check_binary(value: object, what: str) -> None:
    if not isinstance(value, bytes):
        raise LocalProtocolError(f"{what} must be bytes, not {type(value).__name__}", MALFORMED)
    if len(value) > MAX_STRING:
        raise LocalProtocolError(f"{what} is longer than 65535 bytes", MALFORMED)


def check_int(value: object, what: str, lo: int, hi: int, code: int = MALFORMED) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise LocalProtocolError(f"{what} must be int, not {type(value).__name__}", code)
    if not lo <= value <= hi:
        raise LocalProtocolError(f"{what}={value} is outside {lo}..{hi}", code)
