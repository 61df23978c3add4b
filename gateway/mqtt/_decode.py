"""Decoder: bytes of one control packet -> one event.

Rules kept here (3.1.1 chapters 2-3, 5.0 chapters 2-3):

* Decoding is a pure function of ``(buf, start, end, protocol version)``:
  it reads only ``buf[start:end]``, never copies the buffer except to make
  the owned ``bytes`` of a payload or string, and never loops per byte
  except inside a Variable Byte Integer.
* The first byte's low nibble must match the type's fixed flags; PUBLISH
  flags may not say QoS 3, nor DUP with QoS 0. Packet type 0 is reserved;
  type 15 (AUTH) exists only in 5.0. Anything else is Malformed.
* A packet must be consumed exactly: fields that run past the end, or bytes
  left over after the last field, are Malformed.
* Every failure raises ``RemoteProtocolError`` with the 5.0 reason code of
  the broken rule; event-level rules are checked by the event constructors
  and re-raised as remote errors (``_build``).
* CONNECT carries its own version: 'MQIsdp' level 3, 'MQTT' level 4 or 5.
  A known name with another level is Unsupported Protocol Version.
"""

from __future__ import annotations

try:
    import cython
except ImportError:  # a pure-Python install: nothing here is compiled
    from . import _cython_shadow as cython

from ._events import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
    _trusted,
)
from ._properties import decode_properties
from ._reasons import CONNACK_FROM_RETURN, LocalProtocolError, ReasonCode, RemoteProtocolError
from ._wire import (
    FIXED_FLAGS,
    MALFORMED,
    WILL,
    PacketType as P,
    decode_utf8,
    read_binary,
    read_str,
    read_u8,
    read_u16,
    read_varint,
)

_PROTO = ReasonCode.PROTOCOL_ERROR
_PROTOCOL_NAMES = {"MQIsdp": (3,), "MQTT": (4, 5)}


def _bad(msg: str, code: int = MALFORMED) -> RemoteProtocolError:
    return RemoteProtocolError(msg, code)


def _build(cls, **kw):
    try:
        return cls(**kw)
    except LocalProtocolError as exc:
        raise RemoteProtocolError(str(exc), exc.reason_code) from None


def _done(pos: int, end: int) -> None:
    if pos != end:
        raise _bad(f"{end - pos} unexpected bytes at the end of the packet")


def read_fixed_header(buf, pos: int, end: int):
    """``(first byte, remaining length, body start)``, or None if incomplete."""
    if end - pos < 2:
        return None
    first = buf[pos]
    length = buf[pos + 1]
    if length < 128:
        return first, length, pos + 2
    # The remaining length may still be arriving: "incomplete" is not "malformed".
    length &= 0x7F
    shift = 7
    i = pos + 2
    while True:
        if i >= end:
            return None
        byte = buf[i]
        i += 1
        length |= (byte & 0x7F) << shift
        if byte < 128:
            break
        shift += 7
        if shift == 28:
            raise _bad("remaining length longer than 4 bytes")
    if byte == 0:
        raise _bad("remaining length not in its shortest form")
    body = i
    return first, length, body


def peek_connect_version(buf, pos: int, end: int):
    """The protocol level a CONNECT body claims, or None if its name is unknown."""
    try:
        name, pos = read_str(buf, pos, end)
        level, _ = read_u8(buf, pos, end)
    except RemoteProtocolError:
        return None
    return level if name in _PROTOCOL_NAMES else None


def decode_packet(first: int, buf, pos: int, end: int, version: int):
    """Decode the body ``buf[pos:end]`` of a packet whose first byte is ``first``."""
    ptype = first >> 4
    flags = first & 0x0F
    if ptype == P.PUBLISH:
        return decode_publish(flags, buf, pos, end, version)
    if ptype == 0 or (ptype == P.AUTH and version < 5):
        raise _bad(f"reserved packet type {ptype}")
    if flags != FIXED_FLAGS[ptype]:
        raise _bad(f"reserved flags 0x{flags:x} set on packet type {ptype}")
    return _DECODERS[ptype](buf, pos, end, version)


# PUBLISH topic names already decoded and checked (a device sends the same few
# topics over and over): the same bytes always give the same name, and one str
# object per topic keeps its hash cached for every dict it is looked up in later.
_TOPIC_NAMES: dict = {}
_TOPIC_NAMES_MAX = 4096
_known_topic_name = _TOPIC_NAMES.get  # (cleared, never replaced)


def _topic_name(raw) -> str:
    topic = decode_utf8(raw)
    if "+" in topic or "#" in topic:
        raise _bad("wildcard in a PUBLISH topic name", ReasonCode.TOPIC_NAME_INVALID)
    if len(_TOPIC_NAMES) >= _TOPIC_NAMES_MAX:
        _TOPIC_NAMES.clear()
    _TOPIC_NAMES[raw] = topic
    return topic


# (once per PUBLISH: compiled, its positions and flags are C ints)
@cython.locals(flags=cython.int, buf=bytes, pos=cython.Py_ssize_t, end=cython.Py_ssize_t, qos=cython.int,
               dup=cython.bint, stop=cython.Py_ssize_t, hi=cython.long, lo=cython.long, names=dict)
def decode_publish(flags: int, buf, pos: int, end: int, version: int):
    """The ``Publish`` of a PUBLISH body ``buf[pos:end]`` (``buf`` a bytes)
    whose flags (low nibble) are ``flags``."""
    qos = (flags >> 1) & 3
    if qos == 3:
        raise _bad("PUBLISH with QoS 3")
    dup = flags & 8 == 8
    if dup and not qos:
        raise _bad("PUBLISH with DUP set at QoS 0")
    stop = pos + 2
    if stop > end:
        raise _bad("truncated topic name")
    hi = buf[pos]
    lo = buf[pos + 1]
    stop += (hi << 8) | lo
    if stop > end:
        raise _bad("topic name runs past the packet")
    if cython.compiled:  # (`buf` is a bytes) a copy, without a slice object
        raw = cython.cast(cython.p_char, buf)[pos + 2 : stop]
        names = _TOPIC_NAMES
        topic = names.get(raw)
    else:
        raw = buf[pos + 2 : stop]
        if type(raw) is not bytes:
            raw = bytes(raw)
        topic = _known_topic_name(raw)
    if topic is None:
        topic = _topic_name(raw)
    pos = stop
    packet_id = None
    if qos:
        if pos + 2 > end:
            raise _bad("truncated packet identifier")
        hi = buf[pos]
        lo = buf[pos + 1]
        if not hi | lo:
            raise _bad("packet identifier 0", _PROTO)
        packet_id = (hi << 8) | lo
        pos += 2
    props = None
    if version == 5:
        props, pos = decode_properties(buf, pos, end, P.PUBLISH)
        if not topic and "topic_alias" not in props:
            raise _bad("empty topic name without a topic alias", _PROTO)
    elif not topic:
        raise _bad("empty topic name")
    if cython.compiled:
        payload = cython.cast(cython.p_char, buf)[pos:end]
    else:
        payload = buf[pos:end]
        if type(payload) is not bytes:
            payload = bytes(payload)
    # Fields at their class default (QoS 0, no retain, no DUP, no packet id, no
    # properties) are left out of the event's __dict__: the class gives them.
    # (Each dict is made whole at once: one allocation of the right size.)
    if qos:
        kw = {"topic": topic, "qos": qos, "retain": flags & 1 == 1, "dup": dup, "packet_id": packet_id,
              "payload": payload}
    elif flags & 1:
        kw = {"topic": topic, "retain": True, "payload": payload}
    else:
        kw = {"topic": topic, "payload": payload}
    if props:
        kw.update(props)
    return _trusted(Publish, kw)


def _connect(buf, pos: int, end: int, version: int):
    name, pos = read_str(buf, pos, end)
    level, pos = read_u8(buf, pos, end)
    if name not in _PROTOCOL_NAMES:
        raise _bad(f"unknown protocol name {name!r}", ReasonCode.UNSUPPORTED_PROTOCOL_VERSION)
    if level not in _PROTOCOL_NAMES[name]:
        raise _bad(f"unsupported protocol level {level}", ReasonCode.UNSUPPORTED_PROTOCOL_VERSION)
    flags, pos = read_u8(buf, pos, end)
    if flags & 0x01:
        raise _bad("reserved CONNECT flag set")
    will_flag = flags & 0x04
    will_qos = (flags >> 3) & 3
    will_retain = flags & 0x20 == 0x20
    if not will_flag and (will_qos or will_retain):
        raise _bad("will QoS or retain set without a will")
    if will_qos == 3:
        raise _bad("will QoS 3")
    if flags & 0x40 and not flags & 0x80 and level < 5:
        raise _bad("password flag without user name flag")
    keep_alive, pos = read_u16(buf, pos, end)
    kw: dict = {}
    if level == 5:
        kw, pos = decode_properties(buf, pos, end, P.CONNECT)
    client_id, pos = read_str(buf, pos, end)
    if will_flag:
        will_kw: dict = {}
        if level == 5:
            will_kw, pos = decode_properties(buf, pos, end, WILL)
        will_kw["topic"], pos = read_str(buf, pos, end)
        will_kw["payload"], pos = read_binary(buf, pos, end)
        kw["will"] = _build(Will, qos=will_qos, retain=will_retain, **will_kw)
    if flags & 0x80:
        kw["username"], pos = read_str(buf, pos, end)
    if flags & 0x40:
        kw["password"], pos = read_binary(buf, pos, end)
    _done(pos, end)
    return _build(
        Connect, protocol_version=level, client_id=client_id, clean_start=flags & 0x02 == 0x02,
        keep_alive=keep_alive, **kw,
    )


def _connack(buf, pos: int, end: int, version: int):
    ack_flags, pos = read_u8(buf, pos, end)
    if ack_flags & 0xFE:
        raise _bad("reserved CONNACK flags set")
    code, pos = read_u8(buf, pos, end)
    kw: dict = {}
    if version < 5:
        if code not in CONNACK_FROM_RETURN:
            raise _bad(f"CONNACK return code {code}")
        code = CONNACK_FROM_RETURN[code]
    elif pos < end:
        kw, pos = decode_properties(buf, pos, end, P.CONNACK)
    _done(pos, end)
    return _build(ConnAck, session_present=ack_flags == 1, reason_code=code, **kw)


def _ack(cls):
    kind = cls.kind

    def decode(buf, pos: int, end: int, version: int):
        packet_id, pos = read_u16(buf, pos, end)
        kw: dict = {}
        if version == 5 and pos < end:
            kw["reason_code"], pos = read_u8(buf, pos, end)
            if pos < end:
                props, pos = decode_properties(buf, pos, end, kind)
                kw.update(props)
        _done(pos, end)
        return _build(cls, packet_id=packet_id, **kw)

    return decode


def _options(opts: int, version: int) -> dict:
    if version < 5:
        if opts & 0xFC:
            raise _bad("reserved bits set in requested QoS")
    elif opts & 0xC0:
        raise _bad("reserved subscription option bits set")
    if opts & 3 == 3:
        raise _bad("subscription QoS 3")
    return {
        "qos": opts & 3,
        "no_local": opts & 0x04 == 0x04,
        "retain_as_published": opts & 0x08 == 0x08,
        "retain_handling": (opts >> 4) & 3,
    }


def _subscribe(buf, pos: int, end: int, version: int):
    packet_id, pos = read_u16(buf, pos, end)
    kw: dict = {}
    if version == 5:
        kw, pos = decode_properties(buf, pos, end, P.SUBSCRIBE)
    subs = []
    while pos < end:
        topic_filter, pos = read_str(buf, pos, end)
        opts, pos = read_u8(buf, pos, end)
        subs.append(_build(Subscription, topic_filter=topic_filter, **_options(opts, version)))
    return _build(Subscribe, packet_id=packet_id, subscriptions=subs, **kw)


def _suback(buf, pos: int, end: int, version: int):
    packet_id, pos = read_u16(buf, pos, end)
    kw: dict = {}
    if version == 5:
        kw, pos = decode_properties(buf, pos, end, P.SUBACK)
    codes = tuple(buf[pos:end])
    if version < 5 and not set(codes) <= {0, 1, 2, 0x80}:
        raise _bad("SUBACK return code outside 0, 1, 2, 0x80")
    return _build(SubAck, packet_id=packet_id, reason_codes=codes, **kw)


def _unsubscribe(buf, pos: int, end: int, version: int):
    packet_id, pos = read_u16(buf, pos, end)
    kw: dict = {}
    if version == 5:
        kw, pos = decode_properties(buf, pos, end, P.UNSUBSCRIBE)
    filters = []
    while pos < end:
        topic_filter, pos = read_str(buf, pos, end)
        filters.append(topic_filter)
    return _build(Unsubscribe, packet_id=packet_id, topic_filters=filters, **kw)


def _unsuback(buf, pos: int, end: int, version: int):
    packet_id, pos = read_u16(buf, pos, end)
    kw: dict = {}
    if version == 5:
        kw, pos = decode_properties(buf, pos, end, P.UNSUBACK)
        kw["reason_codes"] = tuple(buf[pos:end])
        if not kw["reason_codes"]:
            raise _bad("UNSUBACK without reason codes", _PROTO)
        pos = end
    _done(pos, end)
    return _build(UnsubAck, packet_id=packet_id, **kw)


def _empty(cls):
    def decode(buf, pos: int, end: int, version: int):
        _done(pos, end)
        return cls()

    return decode


def _reason_and_props(cls):
    kind = cls.kind

    def decode(buf, pos: int, end: int, version: int):
        kw: dict = {}
        if version == 5 and pos < end:
            kw["reason_code"], pos = read_u8(buf, pos, end)
            if pos < end:
                props, pos = decode_properties(buf, pos, end, kind)
                kw.update(props)
        _done(pos, end)
        return _build(cls, **kw)

    return decode


_DECODERS = {
    P.CONNECT: _connect,
    P.CONNACK: _connack,
    P.PUBACK: _ack(PubAck),
    P.PUBREC: _ack(PubRec),
    P.PUBREL: _ack(PubRel),
    P.PUBCOMP: _ack(PubComp),
    P.SUBSCRIBE: _subscribe,
    P.SUBACK: _suback,
    P.UNSUBSCRIBE: _unsubscribe,
    P.UNSUBACK: _unsuback,
    P.PINGREQ: _empty(PingReq),
    P.PINGRESP: _empty(PingResp),
    P.DISCONNECT: _reason_and_props(Disconnect),
    P.AUTH: _reason_and_props(Auth),
}


def decode_all(data: bytes, version: int, max_packet_size: int = 268_435_460) -> list:
    """Decode every packet in ``data`` (which must hold whole packets only).

    A convenience for tests and tools; servers use ``MQTTConnection``.
    """
    if type(data) is not bytes:
        data = bytes(data)  # (a bytearray, a memoryview: the decoders take bytes)
    events = []
    pos, end = 0, len(data)
    while pos < end:
        header = read_fixed_header(data, pos, end)
        if header is None:
            raise _bad("truncated fixed header")
        first, length, body = header
        if body + length - pos > max_packet_size:
            raise _bad("packet too large", ReasonCode.PACKET_TOO_LARGE)
        if body + length > end:
            raise _bad("truncated packet")
        events.append(decode_packet(first, data, body, body + length, version))
        pos = body + length
    return events
