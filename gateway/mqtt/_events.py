"""Events: one frozen, keyword-only dataclass per MQTT control packet.

Rules kept here:

* An event is valid on construction or raises ``LocalProtocolError``
  carrying the reason code of the broken rule. Events are immutable; list
  arguments are stored as tuples.
* Events are version-neutral: they carry MQTT 5.0 fields and reason codes.
  Encoding for 3.1/3.1.1 drops what that version cannot carry (properties,
  ack reason codes) and translates CONNACK codes; see ``_encode``.
* Properties are plain fields named after the property (``_properties``);
  ``None`` or ``()`` means absent.
* Topic names and filters stay ``str``. Only packet-level rules are checked
  here: UTF-8 rules, no wildcard in a topic name, no empty filter, no
  No Local on a shared subscription. Wildcard placement is the business
  of ``gateway.wildcard``.
* Decoded events come from the decoder, which validates the wire and then
  builds them through the constructor, except the hot PUBLISH path, which
  checks the same rules inline and uses ``_trusted``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, Optional

from ._properties import validate_properties
from ._reasons import ALLOWED_REASONS, LocalProtocolError, ReasonCode
from ._wire import MALFORMED, WILL, PacketType, check_binary, check_int, check_str

_PROTO = ReasonCode.PROTOCOL_ERROR
Pairs = tuple  # tuple[tuple[str, str], ...]


try:
    import cython
except ImportError:  # a pure-Python install: nothing here is compiled
    from . import _cython_shadow as cython

_new = object.__new__
_set = object.__setattr__


def _trusted(cls, kw: dict):
    """Build an event without validation; only for already-checked input.
    ``kw`` becomes the event's ``__dict__`` (the caller gives it up); fields
    not in it read as their class default. Compiled, the two calls are made
    in C (_events.pxd): the decoder builds one event per packet, and the
    two Python-level calls cost about 2k instructions."""
    if cython.compiled:
        ev = PyType_GenericAlloc(cython.cast(cython.pointer(PyTypeObject), cls), 0)
        PyObject_GenericSetDict(ev, kw, cython.NULL)
        return ev
    ev = _new(cls)
    _set(ev, "__dict__", kw)
    return ev


def _tuple(ev, name: str) -> None:
    value = getattr(ev, name)
    if not isinstance(value, tuple):
        object.__setattr__(ev, name, tuple(value))


def _packet_id(value, what: str = "packet_id") -> None:
    check_int(value, what, 1, 0xFFFF, _PROTO)


def _reason(value, kind: int) -> None:
    if value not in ALLOWED_REASONS[kind]:
        raise LocalProtocolError(f"reason code {value!r} is not allowed in packet type {kind}", MALFORMED)


def _topic_name(topic, what: str = "topic") -> None:
    check_str(topic, what)
    if "+" in topic or "#" in topic:
        raise LocalProtocolError(f"{what} {topic!r} contains a wildcard", ReasonCode.TOPIC_NAME_INVALID)


def _flag(value, what: str) -> None:
    if not isinstance(value, bool):
        raise LocalProtocolError(f"{what} must be bool", MALFORMED)


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base of all events. ``kind`` is the packet type (``PacketType``)."""

    kind: ClassVar[int] = 0

    def __post_init__(self) -> None:
        self._validate()
        validate_properties(self, self.kind)

    def _validate(self) -> None:
        pass


@dataclass(frozen=True, kw_only=True)
class Will:
    """The Will Message of a CONNECT (with its 5.0 Will Properties)."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    payload_format_indicator: Optional[int] = None
    message_expiry_interval: Optional[int] = None
    content_type: Optional[str] = None
    response_topic: Optional[str] = None
    correlation_data: Optional[bytes] = None
    will_delay_interval: Optional[int] = None
    user_properties: Pairs = ()

    def __post_init__(self) -> None:
        _topic_name(self.topic, "will topic")
        if not self.topic:
            raise LocalProtocolError("will topic is empty", ReasonCode.TOPIC_NAME_INVALID)
        check_binary(self.payload, "will payload")
        check_int(self.qos, "will qos", 0, 2, MALFORMED)
        _flag(self.retain, "will retain")
        _tuple(self, "user_properties")
        validate_properties(self, WILL)


@dataclass(frozen=True, kw_only=True)
class Connect(Event):
    kind: ClassVar[int] = PacketType.CONNECT
    protocol_version: int = 4
    client_id: str = ""
    clean_start: bool = True
    keep_alive: int = 0
    username: Optional[str] = None
    password: Optional[bytes] = None
    will: Optional[Will] = None
    session_expiry_interval: Optional[int] = None
    receive_maximum: Optional[int] = None
    maximum_packet_size: Optional[int] = None
    topic_alias_maximum: Optional[int] = None
    request_response_information: Optional[int] = None
    request_problem_information: Optional[int] = None
    authentication_method: Optional[str] = None
    authentication_data: Optional[bytes] = None
    user_properties: Pairs = ()

    def _validate(self) -> None:
        if self.protocol_version not in (3, 4, 5):
            raise LocalProtocolError(
                f"protocol version {self.protocol_version!r}", ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
            )
        check_str(self.client_id, "client_id")
        _flag(self.clean_start, "clean_start")
        check_int(self.keep_alive, "keep_alive", 0, 0xFFFF, MALFORMED)
        if self.username is not None:
            check_str(self.username, "username")
        if self.password is not None:
            check_binary(self.password, "password")
            if self.username is None and self.protocol_version < 5:
                raise LocalProtocolError("password without username before MQTT 5", MALFORMED)
        if self.will is not None and not isinstance(self.will, Will):
            raise LocalProtocolError("will must be a Will", MALFORMED)
        bad_id = ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
        if self.protocol_version == 3 and not self.client_id:
            raise LocalProtocolError("MQTT 3.1 requires a client identifier", bad_id)
        if self.protocol_version == 4 and not self.client_id and not self.clean_start:
            raise LocalProtocolError("empty client identifier needs clean session", bad_id)
        if self.authentication_data is not None and self.authentication_method is None:
            raise LocalProtocolError("authentication data without a method", _PROTO)
        _tuple(self, "user_properties")


@dataclass(frozen=True, kw_only=True)
class ConnAck(Event):
    kind: ClassVar[int] = PacketType.CONNACK
    session_present: bool = False
    reason_code: int = ReasonCode.SUCCESS
    session_expiry_interval: Optional[int] = None
    receive_maximum: Optional[int] = None
    maximum_qos: Optional[int] = None
    retain_available: Optional[int] = None
    maximum_packet_size: Optional[int] = None
    assigned_client_identifier: Optional[str] = None
    topic_alias_maximum: Optional[int] = None
    reason_string: Optional[str] = None
    wildcard_subscription_available: Optional[int] = None
    subscription_identifier_available: Optional[int] = None
    shared_subscription_available: Optional[int] = None
    server_keep_alive: Optional[int] = None
    response_information: Optional[str] = None
    server_reference: Optional[str] = None
    authentication_method: Optional[str] = None
    authentication_data: Optional[bytes] = None
    user_properties: Pairs = ()

    def _validate(self) -> None:
        _flag(self.session_present, "session_present")
        _reason(self.reason_code, self.kind)
        if self.session_present and self.reason_code:
            raise LocalProtocolError("session_present with a failure reason code", MALFORMED)
        _tuple(self, "user_properties")


@dataclass(frozen=True, kw_only=True)
class Publish(Event):
    """An application message. ``packet_id`` is None exactly when ``qos`` is 0.

    Inbound events from ``MQTTConnection`` always carry the full topic name
    (topic aliases already resolved) and ``topic_alias=None``.
    """

    kind: ClassVar[int] = PacketType.PUBLISH
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: Optional[int] = None
    payload_format_indicator: Optional[int] = None
    message_expiry_interval: Optional[int] = None
    content_type: Optional[str] = None
    response_topic: Optional[str] = None
    correlation_data: Optional[bytes] = None
    subscription_identifiers: tuple = ()
    topic_alias: Optional[int] = None
    user_properties: Pairs = ()

    def _validate(self) -> None:
        _topic_name(self.topic)
        if not self.topic and self.topic_alias is None:
            raise LocalProtocolError("empty topic name without a topic alias", _PROTO)
        if not isinstance(self.payload, bytes):
            raise LocalProtocolError("payload must be bytes", MALFORMED)
        check_int(self.qos, "qos", 0, 2, MALFORMED)
        _flag(self.retain, "retain")
        _flag(self.dup, "dup")
        if self.qos:
            _packet_id(self.packet_id)
        else:
            if self.packet_id is not None:
                raise LocalProtocolError("QoS 0 PUBLISH has no packet_id", MALFORMED)
            if self.dup:
                raise LocalProtocolError("QoS 0 PUBLISH cannot be DUP", MALFORMED)
        _tuple(self, "subscription_identifiers")
        _tuple(self, "user_properties")


@dataclass(frozen=True, kw_only=True)
class _PubAckBase(Event):
    packet_id: int
    reason_code: int = ReasonCode.SUCCESS
    reason_string: Optional[str] = None
    user_properties: Pairs = ()

    def _validate(self) -> None:
        _packet_id(self.packet_id)
        _reason(self.reason_code, self.kind)
        _tuple(self, "user_properties")


@dataclass(frozen=True, kw_only=True)
class PubAck(_PubAckBase):
    kind: ClassVar[int] = PacketType.PUBACK


@dataclass(frozen=True, kw_only=True)
class PubRec(_PubAckBase):
    kind: ClassVar[int] = PacketType.PUBREC


@dataclass(frozen=True, kw_only=True)
class PubRel(_PubAckBase):
    kind: ClassVar[int] = PacketType.PUBREL


@dataclass(frozen=True, kw_only=True)
class PubComp(_PubAckBase):
    kind: ClassVar[int] = PacketType.PUBCOMP


@dataclass(frozen=True, kw_only=True)
class Subscription:
    """One topic filter of a SUBSCRIBE with its options (3.1.1 uses only qos)."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0

    def __post_init__(self) -> None:
        check_str(self.topic_filter, "topic_filter")
        if not self.topic_filter:
            raise LocalProtocolError("empty topic filter", _PROTO)
        check_int(self.qos, "qos", 0, 2, MALFORMED)
        _flag(self.no_local, "no_local")
        _flag(self.retain_as_published, "retain_as_published")
        check_int(self.retain_handling, "retain_handling", 0, 2, _PROTO)
        if self.no_local and self.topic_filter.startswith("$share/"):
            raise LocalProtocolError("no_local on a shared subscription", _PROTO)


@dataclass(frozen=True, kw_only=True)
class Subscribe(Event):
    kind: ClassVar[int] = PacketType.SUBSCRIBE
    packet_id: int
    subscriptions: tuple  # tuple[Subscription, ...]
    subscription_identifier: Optional[int] = None
    user_properties: Pairs = ()

    def _validate(self) -> None:
        _packet_id(self.packet_id)
        _tuple(self, "subscriptions")
        if not self.subscriptions:
            raise LocalProtocolError("SUBSCRIBE without topic filters", _PROTO)
        for sub in self.subscriptions:
            if not isinstance(sub, Subscription):
                raise LocalProtocolError("subscriptions must be Subscription objects", MALFORMED)
        _tuple(self, "user_properties")


@dataclass(frozen=True, kw_only=True)
class SubAck(Event):
    """One reason code per filter, in order (3.1.1: 0, 1, 2 or 0x80)."""

    kind: ClassVar[int] = PacketType.SUBACK
    packet_id: int
    reason_codes: tuple
    reason_string: Optional[str] = None
    user_properties: Pairs = ()

    def _validate(self) -> None:
        _packet_id(self.packet_id)
        _tuple(self, "reason_codes")
        if not self.reason_codes:
            raise LocalProtocolError("SUBACK without reason codes", _PROTO)
        for code in self.reason_codes:
            _reason(code, self.kind)
        _tuple(self, "user_properties")


@dataclass(frozen=True, kw_only=True)
class Unsubscribe(Event):
    kind: ClassVar[int] = PacketType.UNSUBSCRIBE
    packet_id: int
    topic_filters: tuple  # tuple[str, ...]
    user_properties: Pairs = ()

    def _validate(self) -> None:
        _packet_id(self.packet_id)
        _tuple(self, "topic_filters")
        if not self.topic_filters:
            raise LocalProtocolError("UNSUBSCRIBE without topic filters", _PROTO)
        for flt in self.topic_filters:
            check_str(flt, "topic_filter")
            if not flt:
                raise LocalProtocolError("empty topic filter", _PROTO)
        _tuple(self, "user_properties")


@dataclass(frozen=True, kw_only=True)
class UnsubAck(Event):
    """5.0: one reason code per filter. 3.1.1 carries none (``()``)."""

    kind: ClassVar[int] = PacketType.UNSUBACK
    packet_id: int
    reason_codes: tuple = ()
    reason_string: Optional[str] = None
    user_properties: Pairs = ()

    def _validate(self) -> None:
        _packet_id(self.packet_id)
        _tuple(self, "reason_codes")
        for code in self.reason_codes:
            _reason(code, self.kind)
        _tuple(self, "user_properties")


@dataclass(frozen=True, kw_only=True)
class PingReq(Event):
    kind: ClassVar[int] = PacketType.PINGREQ


@dataclass(frozen=True, kw_only=True)
class PingResp(Event):
    kind: ClassVar[int] = PacketType.PINGRESP


@dataclass(frozen=True, kw_only=True)
class Disconnect(Event):
    kind: ClassVar[int] = PacketType.DISCONNECT
    reason_code: int = ReasonCode.NORMAL_DISCONNECTION
    session_expiry_interval: Optional[int] = None
    reason_string: Optional[str] = None
    server_reference: Optional[str] = None
    user_properties: Pairs = ()

    def _validate(self) -> None:
        _reason(self.reason_code, self.kind)
        _tuple(self, "user_properties")


@dataclass(frozen=True, kw_only=True)
class Auth(Event):
    """MQTT 5.0 only."""

    kind: ClassVar[int] = PacketType.AUTH
    reason_code: int = ReasonCode.SUCCESS
    authentication_method: Optional[str] = None
    authentication_data: Optional[bytes] = None
    reason_string: Optional[str] = None
    user_properties: Pairs = ()

    def _validate(self) -> None:
        _reason(self.reason_code, self.kind)
        if self.authentication_data is not None and self.authentication_method is None:
            raise LocalProtocolError("authentication data without a method", _PROTO)
        _tuple(self, "user_properties")


@dataclass(frozen=True)
class ConnectionClosed:
    """Not a packet: the peer closed its side (``receive_data(b"")``).

    ``clean`` is True when a DISCONNECT was received first.
    """

    clean: bool = False


@dataclass(frozen=True)
class ClientAcks:
    """Not one packet: a run of the client's plain PUBACK, PUBREC and PUBCOMP
    packets (4 bytes each: success, no properties, a packet id above 0), in
    arrival order, as ack words (``PUBACK_WORD | packet id``, ``PUBREC_WORD
    | ...``, ``PUBCOMP_WORD | ...``: gateway.mqtt.qos), which
    ``OutboundFlows.on_acks`` takes as it takes their events. Given by
    ``MQTTConnection(ack_words=True)`` instead of an event per ack: a
    subscriber acknowledges every QoS 1/2 message it gets."""

    words: list


EVENT_TYPES: dict[int, type] = {
    cls.kind: cls
    for cls in (Connect, ConnAck, Publish, PubAck, PubRec, PubRel, PubComp, Subscribe, SubAck,
                Unsubscribe, UnsubAck, PingReq, PingResp, Disconnect, Auth)
}
EVENT_FIELDS = {cls: tuple(f.name for f in fields(cls)) for cls in EVENT_TYPES.values()}
