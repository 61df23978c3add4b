"""Reason codes and the two kinds of protocol error.

Rules kept here:

* ``ReasonCode`` holds every MQTT 5.0 reason code (spec 2.4). Codes that
  share a value (0x00 is Success, Normal disconnection and Granted QoS 0)
  are enum aliases, so ``ReasonCode(0)`` is ``ReasonCode.SUCCESS``.
* ``ALLOWED_REASONS`` says which codes each packet type may carry. A code
  outside its packet's set is a Malformed Packet on input and a
  ``LocalProtocolError`` on output.
* Events always carry 5.0 codes. MQTT 3.1/3.1.1 CONNACK return codes are
  translated at the wire by ``connack_return_code`` / ``CONNACK_FROM_RETURN``.
* ``RemoteProtocolError`` means the peer broke the rules; it carries the
  5.0 reason code to answer with. ``LocalProtocolError`` means we tried to
  build or send something the spec forbids: a bug on our side. It also
  carries the reason code of the rule it broke, so that the decoder can turn
  an event-validation failure into a ``RemoteProtocolError`` with the right
  code. ``PacketTooLarge`` is neither: the packet is legal but the client
  said it will not accept one that big, and the spec says to drop it.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "ReasonCode",
    "ConnectReturnCode",
    "ProtocolError",
    "RemoteProtocolError",
    "LocalProtocolError",
    "PacketTooLarge",
]


class ReasonCode(IntEnum):
    """MQTT 5.0 reason codes (spec 2.4, table 2-6)."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2

    @property
    def is_error(self) -> bool:
        return self >= 0x80


class ConnectReturnCode(IntEnum):
    """MQTT 3.1/3.1.1 CONNACK return codes (3.1.1 table 3.1)."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL_VERSION = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_USERNAME_OR_PASSWORD = 4
    NOT_AUTHORIZED = 5


R = ReasonCode
_ACK = frozenset({0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99})
_REL = frozenset({0x00, 0x92})

# Keys are packet type numbers (see _wire.PacketType).
ALLOWED_REASONS: dict[int, frozenset[int]] = {
    2: frozenset({0x00, *range(0x80, 0x8B), 0x8C, 0x90, 0x95, 0x97, *range(0x99, 0x9E), 0x9F}),
    4: _ACK,
    5: _ACK,
    6: _REL,
    7: _REL,
    9: frozenset({0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2}),
    11: frozenset({0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91}),
    14: frozenset({0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90,
                 *range(0x93, 0xA3)}),
    15: frozenset({0x00, 0x18, 0x19}),
}

# 5.0 CONNACK reason -> 3.1.1 return code. Failures with no 3.1.1 twin map
# to the nearest meaning; anything else >= 0x80 becomes "server unavailable".
_TO_RETURN = {
    R.SUCCESS: ConnectReturnCode.ACCEPTED,
    R.UNSUPPORTED_PROTOCOL_VERSION: ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION,
    R.CLIENT_IDENTIFIER_NOT_VALID: ConnectReturnCode.IDENTIFIER_REJECTED,
    R.SERVER_UNAVAILABLE: ConnectReturnCode.SERVER_UNAVAILABLE,
    R.SERVER_BUSY: ConnectReturnCode.SERVER_UNAVAILABLE,
    R.BAD_USER_NAME_OR_PASSWORD: ConnectReturnCode.BAD_USERNAME_OR_PASSWORD,
    R.BAD_AUTHENTICATION_METHOD: ConnectReturnCode.BAD_USERNAME_OR_PASSWORD,
    R.NOT_AUTHORIZED: ConnectReturnCode.NOT_AUTHORIZED,
    R.BANNED: ConnectReturnCode.NOT_AUTHORIZED,
}
CONNACK_FROM_RETURN: dict[int, ReasonCode] = {
    ConnectReturnCode.ACCEPTED: R.SUCCESS,
    ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION: R.UNSUPPORTED_PROTOCOL_VERSION,
    ConnectReturnCode.IDENTIFIER_REJECTED: R.CLIENT_IDENTIFIER_NOT_VALID,
    ConnectReturnCode.SERVER_UNAVAILABLE: R.SERVER_UNAVAILABLE,
    ConnectReturnCode.BAD_USERNAME_OR_PASSWORD: R.BAD_USER_NAME_OR_PASSWORD,
    ConnectReturnCode.NOT_AUTHORIZED: R.NOT_AUTHORIZED,
}


def connack_return_code(reason: int) -> ConnectReturnCode:
    """The 3.1.1 CONNACK return code that best carries a 5.0 ``reason``."""
    code = _TO_RETURN.get(reason)
    if code is None:
        code = ConnectReturnCode.SERVER_UNAVAILABLE
    return code


class ProtocolError(Exception):
    """Base of both protocol errors; ``reason_code`` is a ``ReasonCode``."""

    def __init__(self, msg: str, reason_code: int = ReasonCode.PROTOCOL_ERROR) -> None:
        super().__init__(msg)
        self.reason_code = ReasonCode(reason_code)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r}, {self.reason_code.name})"


class RemoteProtocolError(ProtocolError):
    """The peer broke the rules. Answer with ``reason_code`` (or close)."""


class LocalProtocolError(ProtocolError):
    """We tried to build or send something the spec forbids (our bug)."""


class PacketTooLarge(Exception):
    """An outgoing packet exceeds the client's Maximum Packet Size.

    The spec (5.0, 3.1.2.25) says to discard it and behave as if it had
    been sent. The connection state is unchanged when this is raised.
    """

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"packet of {size} bytes exceeds the peer's maximum of {limit}")
        self.size = size
        self.limit = limit
