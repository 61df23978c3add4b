"""Encode a fanned-out PUBLISH once, stamp each subscriber's packet id.

Rules kept here:

* A ``PublishTemplate`` holds the PUBLISH bytes for one key:
  (protocol version, QoS, retain flag, subscription identifiers). Those are
  everything that can differ between subscribers of one message: QoS is
  min(message, subscription); 5.0 Retain As Published decides the RETAIN
  flag; 5.0 subscription identifiers are per subscription. Keep one
  template per distinct key (a dict keyed by that tuple works) and reuse
  it for every subscriber with that key.
* The packet identifier is the only per-delivery field at QoS 1/2. It sits
  at a fixed offset (``packet_id_offset``) right after the topic name, and
  the remaining length does not depend on its value, so ``render`` splices
  two bytes (and the DUP bit of the first byte) without re-encoding.
* QoS 0 has no packet identifier: ``data`` is the finished packet. A 3.1.1
  QoS 0 PUBLISH is topic and payload only: ``encode_publish_v4_qos0``
  builds it in one join, with no template object (the gateway's QoS 0
  fast path, gateway/router.py).
* A 3.1.1 PUBLISH is ``publish_v4_head(topic, len(payload), qos, retain)``,
  then (QoS 1/2) the packet id in two bytes, then the payload: the head
  depends on the topic, the payload's length, the QoS and the retain flag
  only, so a caller may keep it per topic and stamp packet id and payload
  behind it (the gateway's QoS 1/2 fast path). The DUP bit is 0 in it.
* Topic aliases are per connection and so do not mix with templates; the
  template always carries the full topic name and no alias.
* Send rendered bytes through ``MQTTConnection.send_encoded_publish``,
  which checks the state and the client's Maximum Packet Size (``size``).
"""

from __future__ import annotations

import struct
from dataclasses import replace

from ._encode import publish_parts
from ._reasons import LocalProtocolError
from ._wire import encode_varint

_U16 = struct.Struct(">H").pack


class PublishTemplate:
    """One PUBLISH encoded once.

    ``event`` supplies topic, payload and properties; ``qos``, ``retain`` and
    ``subscription_identifiers`` override the event's (its packet id, dup
    flag and topic alias are ignored). For 3.1.1 only ``topic`` and
    ``payload`` are read, so any object with those two (already valid) will
    do: no ``Publish`` needs to be built and validated per message.
    """

    __slots__ = ("version", "qos", "retain", "data", "size", "packet_id_offset", "_first", "_head", "_tail")

    def __init__(
        self, event, version: int, *, qos: int | None = None, retain: bool | None = None,
        subscription_identifiers: tuple | None = None,
    ) -> None:
        qos = event.qos if qos is None else qos
        retain = event.retain if retain is None else retain
        if qos not in (0, 1, 2):
            raise LocalProtocolError(f"QoS {qos!r}")
        if version < 5:  # the common case, in one join: topic and payload are all 3.1.1 has
            self._v4(event.topic, event.payload, qos, bool(retain))
            return
        if subscription_identifiers is not None:
            event = replace(event, subscription_identifiers=tuple(subscription_identifiers))
        if getattr(event, "topic_alias", None) is not None:
            event = replace(event, topic_alias=None)
        self.version = version
        self.qos = qos
        self.retain = bool(retain)
        parts = publish_parts(event, version, qos, 0)
        self._first = 0x30 | (qos << 1) | self.retain
        length = encode_varint(sum(map(len, parts)))
        if qos:
            # parts = [topic length, topic, packet id, (properties,) payload]
            self._head = length + parts[0] + parts[1]
            self._tail = b"".join(parts[3:])
            self.packet_id_offset = 1 + len(self._head)
            self.data = None
        else:
            self._head = self._tail = b""
            self.packet_id_offset = None
            self.data = b"".join([bytes((self._first,)), length, *parts])
        self.size = 1 + len(length) + sum(map(len, parts))

    def _v4(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        if not topic:
            raise LocalProtocolError("a topic alias cannot be used before MQTT 5")
        name = topic.encode("utf-8")
        self.version = 4
        self.qos = qos
        self.retain = retain
        first = 0x30 | (qos << 1) | retain
        self._first = first
        n = 2 + len(name) + (2 if qos else 0) + len(payload)
        length = encode_varint(n)
        self.size = 1 + len(length) + n
        if qos:
            self._head = length + _U16(len(name)) + name
            self._tail = payload
            self.packet_id_offset = 1 + len(self._head)
            self.data = None
        else:
            self._head = self._tail = b""
            self.packet_id_offset = None
            self.data = b"".join((_FIRST[first], length, _U16(len(name)), name, payload))

    def render(self, packet_id: int, dup: bool = False) -> bytes:
        """The packet for one QoS 1/2 delivery with ``packet_id``."""
        if not self.qos:
            raise LocalProtocolError("a QoS 0 PUBLISH has no packet id; use .data")
        if not 0 < packet_id <= 0xFFFF:
            raise LocalProtocolError(f"packet id {packet_id!r}")
        first = _FIRST[self._first | (dup << 3)]
        return b"".join((first, self._head, _U16(packet_id), self._tail))


def encode_publish_v4_qos0(topic: str, payload: bytes, retain: bool) -> bytes:
    """The 3.1.1 QoS 0 PUBLISH of ``topic`` (a valid, non-empty topic name)
    and ``payload``: the bytes ``PublishTemplate(..., 4, qos=0).data`` holds."""
    name = topic.encode("utf-8")
    return b"".join((_FIRST[0x31 if retain else 0x30], encode_varint(2 + len(name) + len(payload)),
                     _U16(len(name)), name, payload))


def publish_v4_head(topic: str, size: int, qos: int, retain: bool) -> bytes:
    """The bytes of a 3.1.1 PUBLISH of ``topic`` (a valid, non-empty topic
    name) at ``qos`` with a ``size``-byte payload, up to its packet id
    (QoS 1/2, DUP 0) or its payload (QoS 0): ``head + packet id + payload``
    is ``PublishTemplate(..., 4, qos=qos, retain=retain).render(packet id)``."""
    if qos not in (0, 1, 2):
        raise LocalProtocolError(f"QoS {qos!r}")
    name = topic.encode("utf-8")
    return b"".join((_FIRST[0x30 | (qos << 1) | (1 if retain else 0)],
                     encode_varint(2 + len(name) + (2 if qos else 0) + size), _U16(len(name)), name))


_FIRST = [bytes((i,)) for i in range(256)]

