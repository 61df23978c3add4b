"""Connection states and the legal transitions between them (server role).

Rules kept here:

* A connection is in exactly one ``ConnectionState``. Every packet received
  or sent moves it along ``RECEIVE`` or ``SEND``; a (state, event) pair that
  is not in the table is illegal: ``RemoteProtocolError`` (Protocol Error)
  when the client did it, ``LocalProtocolError`` when we tried to.
* The first packet must be CONNECT. Until CONNACK is sent the client may
  already pipeline other packets (3.1.1 section 3.1.4, 5.0 section 3.1.4),
  so the connection keeps decoding in CONNECTING; the server acts on them
  only once it has accepted the CONNECT.
* The server's first packet must be CONNACK (or AUTH during 5.0 enhanced
  authentication). A CONNACK with a reason code >= 0x80 ends the
  connection, as does a DISCONNECT either way or the peer's EOF.
* Conditions that depend on more than the state (AUTH only in 5.0 and only
  with an Authentication Method; only AUTH or DISCONNECT before CONNACK
  during enhanced authentication; DISCONNECT from the server only in 5.0)
  are checked by the connection, not encoded in the tables.
* Enhanced authentication (5.0 section 4.12) takes turns: ``auth_received``
  and ``auth_sent`` give the turn after an AUTH, or raise when it is out
  of turn (the rules are in gateway/mqtt/_connection.py's docstring).
"""

from __future__ import annotations

from enum import Enum

from ._reasons import LocalProtocolError, ReasonCode, RemoteProtocolError

from ._events import (
    Auth,
    ConnAck,
    ConnectionClosed,
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
    UnsubAck,
    Unsubscribe,
)


class ConnectionState(Enum):
    """Where a server connection is; see ``RECEIVE`` and ``SEND``."""

    # Members are singletons: identity hashing keeps table lookups in C
    # (Enum's own __hash__ is Python code, on the per-packet path).
    __hash__ = object.__hash__

    AWAIT_CONNECT = "AWAIT_CONNECT"
    CONNECTING = "CONNECTING"
    CONNECTED = "CONNECTED"
    CLOSED = "CLOSED"


S = ConnectionState

# SEND keys for CONNACK: accepted (reason < 0x80) or refused.
CONNACK_ACCEPTED = "ConnAck(accepted)"
CONNACK_REFUSED = "ConnAck(refused)"

_CLIENT_FLOW = (Publish, PubAck, PubRec, PubRel, PubComp, Subscribe, Unsubscribe, PingReq, Auth)
_SERVER_FLOW = (Publish, PubAck, PubRec, PubRel, PubComp, SubAck, UnsubAck, PingResp, Auth)

RECEIVE: dict[tuple[ConnectionState, object], ConnectionState] = {
    (S.AWAIT_CONNECT, Connect): S.CONNECTING,
    **{(S.CONNECTING, cls): S.CONNECTING for cls in _CLIENT_FLOW},
    (S.CONNECTING, Disconnect): S.CLOSED,
    **{(S.CONNECTED, cls): S.CONNECTED for cls in _CLIENT_FLOW},
    (S.CONNECTED, Disconnect): S.CLOSED,
    **{(state, ConnectionClosed): S.CLOSED for state in S},
}

SEND: dict[tuple[ConnectionState, object], ConnectionState] = {
    (S.CONNECTING, CONNACK_ACCEPTED): S.CONNECTED,
    (S.CONNECTING, CONNACK_REFUSED): S.CLOSED,
    (S.CONNECTING, Auth): S.CONNECTING,
    **{(S.CONNECTED, cls): S.CONNECTED for cls in _SERVER_FLOW},
    (S.CONNECTED, Disconnect): S.CLOSED,
}


def send_key(event) -> object:
    """The ``SEND`` table key for an outgoing event."""
    if type(event) is ConnAck:
        return CONNACK_REFUSED if event.reason_code >= 0x80 else CONNACK_ACCEPTED
    return type(event)


# Whose turn it is in an enhanced authentication exchange.
NO_EXCHANGE, SERVER_TURN, CLIENT_TURN = 0, 1, 2


def auth_received(turn: int, code: int, connected: bool) -> int:
    """The turn after a client AUTH with reason ``code`` (``connected``:
    CONNACK was sent): the server's; RemoteProtocolError if out of turn."""
    if code == ReasonCode.CONTINUE_AUTHENTICATION:
        if turn != CLIENT_TURN:
            raise RemoteProtocolError("AUTH 0x18 (continue) when the server asked for nothing",
                                      ReasonCode.PROTOCOL_ERROR)
    elif code == ReasonCode.RE_AUTHENTICATE:
        if not connected or turn != NO_EXCHANGE:
            raise RemoteProtocolError("AUTH 0x19 (re-authenticate) before CONNACK or during an exchange",
                                      ReasonCode.PROTOCOL_ERROR)
    else:
        raise RemoteProtocolError(f"a client may not send AUTH 0x{code:02X}", ReasonCode.PROTOCOL_ERROR)
    return SERVER_TURN


def auth_sent(turn: int, code: int, connected: bool) -> int:
    """The turn after a server AUTH with reason ``code``; LocalProtocolError if out of turn."""
    if turn != SERVER_TURN:
        raise LocalProtocolError("AUTH while the client has the turn or no exchange is under way")
    if code == ReasonCode.CONTINUE_AUTHENTICATION:
        return CLIENT_TURN
    if code == ReasonCode.SUCCESS and connected:
        return NO_EXCHANGE
    raise LocalProtocolError(f"the server may not send AUTH 0x{code:02X} now")
