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
"""

from __future__ import annotations

from enum import Enum

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
