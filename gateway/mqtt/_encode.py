"""Encoder: one event + protocol version -> the bytes of one control packet.

Rules kept here:

* Output is always well formed: events were validated on construction, and
  what a version cannot carry is decided here, once, by these rules:
  - for 3.1/3.1.1, properties are dropped; PUBACK/PUBREC/PUBREL/PUBCOMP
    lose their reason code; a CONNACK reason becomes the nearest 3.1.1
    return code; SUBACK failures become 0x80; UNSUBACK has no payload;
  - a PUBLISH that relies on a topic alias (empty topic) cannot be sent
    before 5.0, and AUTH does not exist there: ``LocalProtocolError``;
  - 3.1 (MQIsdp) CONNACK has no Session Present flag.
* 5.0 acks, DISCONNECT and AUTH use the short forms the spec allows: the
  reason code is omitted when it is Success with no properties, and the
  property length when there are no properties.
* Bytes are built with ``b"".join`` of parts and ``struct``; the payload is
  copied once, into the result.
"""

from __future__ import annotations

from ._properties import encode_properties
from ._reasons import LocalProtocolError, connack_return_code
from ._wire import WILL, PacketType as P, encode_binary, encode_str, encode_varint, pack_u16

_NO_PROPS = b"\x00"


def _packet(first: int, parts: list) -> bytes:
    body = b"".join(parts)
    return b"".join((bytes((first,)), encode_varint(len(body)), body))


def publish_has_properties(ev) -> bool:
    return not (
        ev.payload_format_indicator is None
        and ev.message_expiry_interval is None
        and ev.topic_alias is None
        and ev.content_type is None
        and ev.response_topic is None
        and ev.correlation_data is None
        and not ev.user_properties
        and not ev.subscription_identifiers
    )


def publish_parts(ev, version: int, qos: int, packet_id) -> list:
    """Variable header and payload of a PUBLISH, as a list of byte strings."""
    if version < 5 and not ev.topic:
        raise LocalProtocolError("a topic alias cannot be used before MQTT 5")
    topic = ev.topic.encode("utf-8")
    parts = [pack_u16(len(topic)), topic]
    if qos:
        parts.append(pack_u16(packet_id))
    if version == 5:
        parts.append(encode_properties(ev, P.PUBLISH) if publish_has_properties(ev) else _NO_PROPS)
    parts.append(ev.payload)
    return parts


def _publish(ev, version: int) -> bytes:
    first = 0x30 | (ev.qos << 1) | ev.retain | (ev.dup << 3)
    return _packet(first, publish_parts(ev, version, ev.qos, ev.packet_id))


def _connect(ev, version: int) -> bytes:
    level = ev.protocol_version
    parts = [encode_str("MQIsdp" if level == 3 else "MQTT"), bytes((level,))]
    will = ev.will
    flags = (ev.clean_start << 1) | ((ev.username is not None) << 7) | ((ev.password is not None) << 6)
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (will.retain << 5)
    parts += [bytes((flags,)), pack_u16(ev.keep_alive)]
    if level == 5:
        parts.append(encode_properties(ev, P.CONNECT))
    parts.append(encode_str(ev.client_id))
    if will is not None:
        if level == 5:
            parts.append(encode_properties(will, WILL))
        parts += [encode_str(will.topic), encode_binary(will.payload)]
    if ev.username is not None:
        parts.append(encode_str(ev.username))
    if ev.password is not None:
        parts.append(encode_binary(ev.password))
    return _packet(0x10, parts)


def _connack(ev, version: int) -> bytes:
    present = ev.session_present and version > 3
    if version < 5:
        return bytes((0x20, 2, present, connack_return_code(ev.reason_code)))
    return _packet(0x20, [bytes((present, ev.reason_code)), encode_properties(ev, P.CONNACK)])


def _ack(first: int):
    def encode(ev, version: int) -> bytes:
        if version < 5:
            return bytes((first, 2)) + pack_u16(ev.packet_id)
        props = encode_properties(ev, ev.kind)
        if props == _NO_PROPS:
            if not ev.reason_code:
                return bytes((first, 2)) + pack_u16(ev.packet_id)
            return bytes((first, 3)) + pack_u16(ev.packet_id) + bytes((ev.reason_code,))
        return _packet(first, [pack_u16(ev.packet_id), bytes((ev.reason_code,)), props])

    return encode


def _subscribe(ev, version: int) -> bytes:
    parts = [pack_u16(ev.packet_id)]
    if version == 5:
        parts.append(encode_properties(ev, P.SUBSCRIBE))
    for sub in ev.subscriptions:
        opts = sub.qos
        if version == 5:
            opts |= (sub.no_local << 2) | (sub.retain_as_published << 3) | (sub.retain_handling << 4)
        parts += [encode_str(sub.topic_filter), bytes((opts,))]
    return _packet(0x82, parts)


def _suback(ev, version: int) -> bytes:
    parts = [pack_u16(ev.packet_id)]
    if version == 5:
        parts += [encode_properties(ev, P.SUBACK), bytes(ev.reason_codes)]
    else:
        parts.append(bytes(code if code <= 2 else 0x80 for code in ev.reason_codes))
    return _packet(0x90, parts)


def _unsubscribe(ev, version: int) -> bytes:
    parts = [pack_u16(ev.packet_id)]
    if version == 5:
        parts.append(encode_properties(ev, P.UNSUBSCRIBE))
    parts += [encode_str(flt) for flt in ev.topic_filters]
    return _packet(0xA2, parts)


def _unsuback(ev, version: int) -> bytes:
    if version < 5:
        return b"\xb0\x02" + pack_u16(ev.packet_id)
    if not ev.reason_codes:
        raise LocalProtocolError("MQTT 5 UNSUBACK needs one reason code per topic filter")
    return _packet(0xB0, [pack_u16(ev.packet_id), encode_properties(ev, P.UNSUBACK), bytes(ev.reason_codes)])


def _reason_and_props(first: int):
    def encode(ev, version: int) -> bytes:
        if version < 5:
            if first == 0xF0:
                raise LocalProtocolError("AUTH exists only in MQTT 5")
            return bytes((first, 0))
        props = encode_properties(ev, ev.kind)
        if props == _NO_PROPS:
            return bytes((first, 1, ev.reason_code)) if ev.reason_code else bytes((first, 0))
        return _packet(first, [bytes((ev.reason_code,)), props])

    return encode


_ENCODERS = {
    P.CONNECT: _connect,
    P.CONNACK: _connack,
    P.PUBLISH: _publish,
    P.PUBACK: _ack(0x40),
    P.PUBREC: _ack(0x50),
    P.PUBREL: _ack(0x62),
    P.PUBCOMP: _ack(0x70),
    P.SUBSCRIBE: _subscribe,
    P.SUBACK: _suback,
    P.UNSUBSCRIBE: _unsubscribe,
    P.UNSUBACK: _unsuback,
    P.PINGREQ: lambda ev, version: b"\xc0\x00",
    P.PINGRESP: lambda ev, version: b"\xd0\x00",
    P.DISCONNECT: _reason_and_props(0xE0),
    P.AUTH: _reason_and_props(0xF0),
}


def encode(event, version: int) -> bytes:
    """The wire bytes of ``event`` for protocol ``version`` (3, 4 or 5)."""
    if version not in (3, 4, 5):
        raise LocalProtocolError(f"unknown protocol version {version!r}")
    try:
        encoder = _ENCODERS[event.kind]
    except (AttributeError, KeyError):
        raise LocalProtocolError(f"{event!r} is not a packet event") from None
    return encoder(event, version)
