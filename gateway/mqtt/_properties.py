"""MQTT 5.0 properties: identifiers, data types, where each may appear.

Rules kept here (5.0 section 2.2.2):

* Every property has one identifier and one data type (``PROPERTY_TYPES``)
  and may appear only in the packets listed in ``PROPERTY_PACKETS``
  (``WILL`` stands for the Will Properties of CONNECT). An identifier that
  is unknown or not allowed in the packet is a Malformed Packet.
* Only User Property may repeat, everywhere it is allowed, and Subscription
  Identifier may repeat in PUBLISH (one per matching subscription). Any
  other property appearing twice is a Protocol Error.
* Values have ranges (``_RANGES``): every byte-valued property is 0 or 1;
  Receive Maximum, Maximum Packet Size, Topic Alias and Subscription
  Identifier may not be 0; a Response Topic may not contain wildcards.
  An out-of-range value is a Protocol Error (Topic Alias Invalid for 0).
* Events carry properties as plain keyword fields named after the property
  (``message_expiry_interval``...). Repeatable ones are tuples:
  ``user_properties`` is a tuple of ``(name, value)`` string pairs and the
  PUBLISH ``subscription_identifiers`` a tuple of ints; SUBSCRIBE carries
  at most one, as ``subscription_identifier``. ``None`` (or ``()``) means
  absent, and absent properties are not encoded.
"""

from __future__ import annotations

from enum import IntEnum

from ._reasons import LocalProtocolError, ReasonCode, RemoteProtocolError
from ._wire import (
    MALFORMED,
    MAX_VARINT,
    WILL,
    PacketType as P,
    check_binary,
    check_int,
    check_str,
    encode_binary,
    encode_str,
    encode_varint,
    pack_u16,
    pack_u32,
    read_binary,
    read_str,
    read_varint,
    unpack_u16,
    unpack_u32,
)

__all__ = ["PropertyId", "PropertyType", "PROPERTY_TYPES", "PROPERTY_PACKETS"]


class PropertyId(IntEnum):
    """MQTT 5.0 property identifiers (5.0 table 2-4)."""

    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


class PropertyType(IntEnum):
    """The data type of a property's value."""

    BYTE = 1
    TWO_BYTE_INTEGER = 2
    FOUR_BYTE_INTEGER = 3
    VARIABLE_BYTE_INTEGER = 4
    UTF8_STRING = 5
    BINARY_DATA = 6
    UTF8_STRING_PAIR = 7


I, T = PropertyId, PropertyType
_ACKS = (P.PUBACK, P.PUBREC, P.PUBREL, P.PUBCOMP)
_PUB = (P.PUBLISH, WILL)

# (type, packets) per identifier, straight from 5.0 table 2-4.
_SPEC: dict[PropertyId, tuple[PropertyType, tuple[int, ...]]] = {
    I.PAYLOAD_FORMAT_INDICATOR: (T.BYTE, _PUB),
    I.MESSAGE_EXPIRY_INTERVAL: (T.FOUR_BYTE_INTEGER, _PUB),
    I.CONTENT_TYPE: (T.UTF8_STRING, _PUB),
    I.RESPONSE_TOPIC: (T.UTF8_STRING, _PUB),
    I.CORRELATION_DATA: (T.BINARY_DATA, _PUB),
    I.SUBSCRIPTION_IDENTIFIER: (T.VARIABLE_BYTE_INTEGER, (P.PUBLISH, P.SUBSCRIBE)),
    I.SESSION_EXPIRY_INTERVAL: (T.FOUR_BYTE_INTEGER, (P.CONNECT, P.CONNACK, P.DISCONNECT)),
    I.ASSIGNED_CLIENT_IDENTIFIER: (T.UTF8_STRING, (P.CONNACK,)),
    I.SERVER_KEEP_ALIVE: (T.TWO_BYTE_INTEGER, (P.CONNACK,)),
    I.AUTHENTICATION_METHOD: (T.UTF8_STRING, (P.CONNECT, P.CONNACK, P.AUTH)),
    I.AUTHENTICATION_DATA: (T.BINARY_DATA, (P.CONNECT, P.CONNACK, P.AUTH)),
    I.REQUEST_PROBLEM_INFORMATION: (T.BYTE, (P.CONNECT,)),
    I.WILL_DELAY_INTERVAL: (T.FOUR_BYTE_INTEGER, (WILL,)),
    I.REQUEST_RESPONSE_INFORMATION: (T.BYTE, (P.CONNECT,)),
    I.RESPONSE_INFORMATION: (T.UTF8_STRING, (P.CONNACK,)),
    I.SERVER_REFERENCE: (T.UTF8_STRING, (P.CONNACK, P.DISCONNECT)),
    I.REASON_STRING: (T.UTF8_STRING, (P.CONNACK, *_ACKS, P.SUBACK, P.UNSUBACK, P.DISCONNECT, P.AUTH)),
    I.RECEIVE_MAXIMUM: (T.TWO_BYTE_INTEGER, (P.CONNECT, P.CONNACK)),
    I.TOPIC_ALIAS_MAXIMUM: (T.TWO_BYTE_INTEGER, (P.CONNECT, P.CONNACK)),
    I.TOPIC_ALIAS: (T.TWO_BYTE_INTEGER, (P.PUBLISH,)),
    I.MAXIMUM_QOS: (T.BYTE, (P.CONNACK,)),
    I.RETAIN_AVAILABLE: (T.BYTE, (P.CONNACK,)),
    I.USER_PROPERTY: (T.UTF8_STRING_PAIR, (*range(1, 12), 14, 15, WILL)),
    I.MAXIMUM_PACKET_SIZE: (T.FOUR_BYTE_INTEGER, (P.CONNECT, P.CONNACK)),
    I.WILDCARD_SUBSCRIPTION_AVAILABLE: (T.BYTE, (P.CONNACK,)),
    I.SUBSCRIPTION_IDENTIFIER_AVAILABLE: (T.BYTE, (P.CONNACK,)),
    I.SHARED_SUBSCRIPTION_AVAILABLE: (T.BYTE, (P.CONNACK,)),
}
# USER_PROPERTY's tuple above lists 1..11: PINGREQ/PINGRESP (12, 13) have no properties.
PROPERTY_TYPES = {pid: spec[0] for pid, spec in _SPEC.items()}
PROPERTY_PACKETS = {pid: frozenset(spec[1]) for pid, spec in _SPEC.items()}

_PROTO = ReasonCode.PROTOCOL_ERROR
_FULL = {T.BYTE: 0xFF, T.TWO_BYTE_INTEGER: 0xFFFF, T.FOUR_BYTE_INTEGER: 0xFFFFFFFF, T.VARIABLE_BYTE_INTEGER: MAX_VARINT}
_RANGES = {pid: (0, _FULL[t], _PROTO) for pid, t in PROPERTY_TYPES.items() if t in _FULL}
_RANGES.update({pid: (0, 1, _PROTO) for pid, t in PROPERTY_TYPES.items() if t is T.BYTE})
_RANGES[I.RECEIVE_MAXIMUM] = (1, 0xFFFF, _PROTO)
_RANGES[I.MAXIMUM_PACKET_SIZE] = (1, 0xFFFFFFFF, _PROTO)
_RANGES[I.SUBSCRIPTION_IDENTIFIER] = (1, MAX_VARINT, _PROTO)
_RANGES[I.TOPIC_ALIAS] = (1, 0xFFFF, ReasonCode.TOPIC_ALIAS_INVALID)


def _field_name(kind: int, pid: PropertyId) -> str:
    if pid is I.USER_PROPERTY:
        return "user_properties"
    if pid is I.SUBSCRIPTION_IDENTIFIER and kind == P.PUBLISH:
        return "subscription_identifiers"
    return pid.name.lower()


def _repeats(kind: int, pid: PropertyId) -> bool:
    return pid is I.USER_PROPERTY or (pid is I.SUBSCRIPTION_IDENTIFIER and kind == P.PUBLISH)


# kind -> {identifier: (type, field name, repeatable)}
BY_KIND: dict[int, dict[int, tuple[PropertyType, str, bool]]] = {
    kind: {
        pid: (PROPERTY_TYPES[pid], _field_name(kind, pid), _repeats(kind, pid))
        for pid in sorted(_SPEC)
        if kind in PROPERTY_PACKETS[pid]
    }
    for kind in (WILL, *range(1, 16))
}
# kind -> the event field names that hold properties, for dataclass generation.
FIELDS: dict[int, tuple[str, ...]] = {k: tuple(v[1] for v in m.values()) for k, m in BY_KIND.items()}


def _bad(msg: str, code: int = MALFORMED) -> RemoteProtocolError:
    return RemoteProtocolError(msg, code)


def decode_properties(buf, pos: int, end: int, kind: int) -> tuple[dict, int]:
    """Read a property block; return ``({field: value}, pos after it)``."""
    length, pos = read_varint(buf, pos, end)
    stop = pos + length
    if stop > end:
        raise _bad("property length runs past the packet")
    out: dict = {}
    if not length:
        return out, stop
    allowed = BY_KIND[kind]
    while pos < stop:
        ident = buf[pos]
        pos += 1
        spec = allowed.get(ident)
        if spec is None:
            raise _bad(f"property 0x{ident:02x} is not allowed in packet type {kind}")
        ptype, name, repeat = spec
        if ptype is T.BYTE:
            if pos >= stop:
                raise _bad("truncated property")
            value = buf[pos]
            pos += 1
        elif ptype is T.TWO_BYTE_INTEGER:
            if pos + 2 > stop:
                raise _bad("truncated property")
            value = unpack_u16(buf, pos)[0]
            pos += 2
        elif ptype is T.FOUR_BYTE_INTEGER:
            if pos + 4 > stop:
                raise _bad("truncated property")
            value = unpack_u32(buf, pos)[0]
            pos += 4
        elif ptype is T.VARIABLE_BYTE_INTEGER:
            value, pos = read_varint(buf, pos, stop)
        elif ptype is T.UTF8_STRING:
            value, pos = read_str(buf, pos, stop)
        elif ptype is T.BINARY_DATA:
            value, pos = read_binary(buf, pos, stop)
        else:
            key, pos = read_str(buf, pos, stop)
            val, pos = read_str(buf, pos, stop)
            value = (key, val)
        rng = _RANGES.get(ident)
        if rng is not None and not rng[0] <= value <= rng[1]:
            raise _bad(f"{name}={value} is outside {rng[0]}..{rng[1]}", rng[2])
        if ident == I.RESPONSE_TOPIC and ("+" in value or "#" in value):
            raise _bad("response_topic contains a wildcard", _PROTO)
        if repeat:
            out.setdefault(name, []).append(value)
        elif name in out:
            raise _bad(f"{name} appears more than once", _PROTO)
        else:
            out[name] = value
    for name in ("user_properties", "subscription_identifiers"):
        if name in out:
            out[name] = tuple(out[name])
    return out, stop


def encode_properties(event, kind: int) -> bytes:
    """The property block (length prefix included) for ``event``'s fields."""
    parts = []
    for ident, (ptype, name, repeat) in BY_KIND[kind].items():
        value = getattr(event, name)
        if value is None or value == ():
            continue
        for item in value if repeat else (value,):
            parts.append(_IDENT[ident])
            if ptype is T.BYTE:
                parts.append(bytes((item,)))
            elif ptype is T.TWO_BYTE_INTEGER:
                parts.append(pack_u16(item))
            elif ptype is T.FOUR_BYTE_INTEGER:
                parts.append(pack_u32(item))
            elif ptype is T.VARIABLE_BYTE_INTEGER:
                parts.append(encode_varint(item))
            elif ptype is T.UTF8_STRING:
                parts.append(encode_str(item))
            elif ptype is T.BINARY_DATA:
                parts.append(encode_binary(item))
            else:
                parts.append(encode_str(item[0]))
                parts.append(encode_str(item[1]))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


_IDENT = {pid: bytes((pid,)) for pid in _SPEC}


def validate_properties(event, kind: int) -> None:
    """Check every property field of ``event``; ``LocalProtocolError`` if bad."""
    for ident, (ptype, name, repeat) in BY_KIND[kind].items():
        value = getattr(event, name)
        if value is None:
            continue
        if repeat:
            if not isinstance(value, tuple):
                raise LocalProtocolError(f"{name} must be a tuple", MALFORMED)
            items = value
        else:
            items = (value,)
        for item in items:
            _check_value(ident, ptype, name, item)


def _check_value(ident: int, ptype: PropertyType, name: str, value) -> None:
    if ptype is T.UTF8_STRING:
        check_str(value, name)
        if ident == I.RESPONSE_TOPIC and ("+" in value or "#" in value):
            raise LocalProtocolError("response_topic contains a wildcard", _PROTO)
    elif ptype is T.BINARY_DATA:
        check_binary(value, name)
    elif ptype is T.UTF8_STRING_PAIR:
        if not (isinstance(value, tuple) and len(value) == 2):
            raise LocalProtocolError(f"{name} items must be (name, value) pairs", MALFORMED)
        check_str(value[0], name)
        check_str(value[1], name)
    else:
        lo, hi, code = _RANGES[ident]
        check_int(value, name, lo, hi, code)
