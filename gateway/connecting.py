"""CONNECT: authentication, the client id, keepalive and will checks, the
ACL, opening (or taking over) the session, the CONNACK, then redelivery of
what a present session has in flight.

MQTT 5 enhanced authentication (SCRAM, gateway/scram.py) is here too: a
CONNECT with an Authentication Method is held (``conn.auth``) while AUTH
packets go back and forth, and is accepted as above once the exchange
succeeds, with the server-final message in the CONNACK's Authentication
Data. The same exchange re-authenticates a live connection (client AUTH
0x19), for the same username only. Refusals: a method the server does not
offer, CONNACK 0x8C; a failed exchange, CONNACK 0x87 (re-authentication:
DISCONNECT 0x87). What is logged of a failure is the username and the RFC
5802 error name, never the exchange's messages.

On a gateway node, a CONNECT the node cannot decide is refused with Server
unavailable (0x88; 3.1.1: return code 3) and one log line, and the client
tries again: its client id owned elsewhere in etcd (``OwnerUnavailable``), or
the cluster's meta records not readable to their end (``MetaUnavailable``:
a session that just left another node would be resumed stale here). So is
every CONNECT that would write a record (a persistent session, a will, a
gateway node, a session this server has) while the broker takes no writes
(``RecordsRefused``: it lost its master lease, or its write permission is
off). When the broker refuses the session's records all the same (a full
disk), the CONNACK is followed by a close (5.0: DISCONNECT 0x89, Server busy)."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from gateway.cluster import MetaUnavailable
from gateway.meta import RecordsRefused
from gateway.owners import OwnerUnavailable
from gateway.mqtt import Auth, ConnAck, Connect, Disconnect, ReasonCode, RemoteProtocolError
from gateway.scram import ScramExchange, ScramFailed
from gateway.wildcard import TopicError, validate_topic_name

if TYPE_CHECKING:
    from gateway.connection import Connection

log = logging.getLogger("mqgate.gateway")
R = ReasonCode


class PendingAuth:
    """An enhanced authentication exchange under way (``Connection.auth``)."""

    __slots__ = ("exchange", "connect")

    def __init__(self, exchange: ScramExchange, connect: Connect | None) -> None:
        self.exchange = exchange
        self.connect = connect  # the CONNECT waiting for the end (None: re-authentication)


def _refuse(conn: Connection, code: int, why: str, *, tell: str | None = None) -> None:
    """CONNACK ``code``; ``why`` goes to the log, ``tell`` (5.0) to the client as its Reason String."""
    log.info("connection %s: CONNECT refused (0x%02X): %s", conn.info.peer, code, why)
    conn.gw.stats.refused += 1
    conn.auth = None
    conn.send_event(ConnAck(reason_code=code, reason_string=tell))
    conn.closing = True


async def accept_connect(conn: Connection, c: Connect) -> None:
    gw = conn.gw
    if c.authentication_method is not None:
        return _begin_exchange(conn, c, c.authentication_method)
    result = await gw.settings.authenticator.authenticate(c.username, c.password, conn.info.certificate)
    if not result.ok:
        bad_pw = c.username is not None and gw.settings.authenticator.password_file is not None
        gw.stats.auth_failures += 1
        return _refuse(conn, R.BAD_USER_NAME_OR_PASSWORD if bad_pw else R.NOT_AUTHORIZED, "authentication failed")
    await _admit(conn, c, result.username if result.username is not None else c.username)


def _begin_exchange(conn: Connection, c: Connect, method: str) -> None:
    exchange = conn.gw.settings.authenticator.scram_exchange(method)
    if exchange is None:
        why = f"authentication method {method!r} is not offered ({_offered(conn)})"
        return _refuse(conn, R.BAD_AUTHENTICATION_METHOD, why, tell=why)
    try:
        server_first = exchange.first(c.authentication_data)
    except ScramFailed as e:
        return _auth_failed(conn, exchange, str(e), reauth=False)
    if c.username is not None and c.username != exchange.username:
        return _auth_failed(conn, exchange, "the CONNECT username is not the SCRAM one", reauth=False)
    conn.auth = PendingAuth(exchange, c)
    conn.send_event(Auth(reason_code=R.CONTINUE_AUTHENTICATION, authentication_method=method,
                         authentication_data=server_first))


async def on_auth(conn: Connection, ev: Auth) -> None:
    """A client AUTH (the codec has checked it is the client's turn)."""
    if ev.reason_code == R.RE_AUTHENTICATE:
        method = conn.mq.authentication_method
        exchange = conn.gw.settings.authenticator.scram_exchange(method)
        if exchange is None:  # the password file is gone since CONNECT
            return _auth_failed(conn, None, f"method {method} no longer offered", reauth=True)
        try:
            server_first = exchange.first(ev.authentication_data)
        except ScramFailed as e:
            return _auth_failed(conn, exchange, str(e), reauth=True)
        if exchange.username != conn.username:
            return _auth_failed(conn, exchange, f"re-authentication as another user ({exchange.username!r})",
                                reauth=True)
        conn.auth = PendingAuth(exchange, None)
        conn.send_event(Auth(reason_code=R.CONTINUE_AUTHENTICATION, authentication_method=method,
                             authentication_data=server_first))
        return
    pending = conn.auth
    if pending is None:  # the codec gave the client the turn, so an exchange is ours: a bug
        raise RemoteProtocolError("AUTH 0x18 with no exchange under way", R.PROTOCOL_ERROR)
    conn.auth = None
    exchange, c = pending.exchange, pending.connect
    try:
        server_final = exchange.final(ev.authentication_data)
    except ScramFailed as e:
        return _auth_failed(conn, exchange, str(e), reauth=c is None)
    if c is None:
        log.info("client %s: re-authenticated as %r (%s)", conn.client_id, conn.username, exchange.method)
        conn.send_event(Auth(reason_code=R.SUCCESS, authentication_method=exchange.method,
                             authentication_data=server_final))
        return
    await _admit(conn, c, exchange.username, server_final)


def _auth_failed(conn: Connection, exchange: ScramExchange | None, why: str, *, reauth: bool) -> None:
    conn.gw.stats.auth_failures += 1
    conn.auth = None
    who = exchange.username if exchange is not None else None
    method = exchange.method if exchange is not None else conn.mq.authentication_method
    # The client is told as little as RFC 5802 would (no "unknown user").
    tell = f"{method} authentication failed"
    if not reauth:
        return _refuse(conn, R.NOT_AUTHORIZED, f"{method} exchange failed for user {who!r}: {why}", tell=tell)
    log.info("client %s: re-authentication (%s, user %r) failed: %s; disconnecting (0x87)",
             conn.client_id, method, who, why)
    conn.send_event(Disconnect(reason_code=R.NOT_AUTHORIZED, reason_string=tell))
    conn.closing = True


def _offered(conn: Connection) -> str:
    if conn.gw.settings.authenticator.password_file is None:
        return "enhanced authentication needs [mqtt] passwordFile"
    return "offered: SCRAM-SHA-256, SCRAM-SHA-512"


async def _admit(conn: Connection, c: Connect, username: str | None, auth_data: bytes | None = None) -> None:
    """The CONNECT is authenticated: check the rest, open the session, CONNACK."""
    gw = conn.gw
    lim = gw.settings.limits
    v = c.protocol_version
    conn.username = username
    cid = c.client_id
    assigned = None
    if not cid:
        cid = "auto-" + uuid.uuid4().hex
        if v == 5:
            assigned = cid
    if conn.gw.draining:
        return _refuse(conn, R.USE_ANOTHER_SERVER if v == 5 else R.SERVER_UNAVAILABLE, "this gateway node is draining",
                       tell="this gateway node is stopping: use another server")
    keepalive = lim.effective_keepalive(c.keep_alive)
    if v < 5 and keepalive != c.keep_alive:
        return _refuse(conn, R.SERVER_UNAVAILABLE,
                            f"keepalive {c.keep_alive} outside {lim.min_keepalive}..{lim.max_keepalive}")
    if c.will is not None:
        try:
            validate_topic_name(c.will.topic)
        except TopicError as e:
            return _refuse(conn, R.TOPIC_NAME_INVALID, f"will topic: {e}")
        if c.will.retain and not gw.settings.session.retain_available:
            return _refuse(conn, R.RETAIN_NOT_SUPPORTED, "retained will, retain is off")
    conn.acl = gw.settings.acl.for_client(cid, conn.username)
    if c.will is not None and not conn.acl.check("publish", c.will.topic):
        return _refuse(conn, R.NOT_AUTHORIZED, f"will topic {c.will.topic!r} denied by the ACL")
    if v == 5:
        requested = c.session_expiry_interval or 0
    else:
        requested = 0 if c.clean_start else 0xFFFFFFFF
    expiry = lim.effective_session_expiry(requested)
    conn.client_id = cid
    conn.keepalive = keepalive
    conn.will = c.will
    try:
        sess, present, stored = await gw.open_session(conn, cid, clean_start=c.clean_start, expiry=expiry, version=v)
    except (OwnerUnavailable, MetaUnavailable, RecordsRefused) as e:
        # never two owners, a stale session, nor one its broker cannot keep: the client tries again
        return _refuse(conn, R.SERVER_UNAVAILABLE, f"client {cid}: {e}", tell="server unavailable: try again")
    ack = dict(session_present=present)
    if v == 5:
        ack.update(receive_maximum=lim.max_inflight_messages, maximum_packet_size=lim.max_packet_size,
                   topic_alias_maximum=lim.max_topic_alias,
                   retain_available=1 if gw.settings.session.retain_available else 0,
                   wildcard_subscription_available=1, subscription_identifier_available=1,
                   shared_subscription_available=1)
        if assigned:
            ack["assigned_client_identifier"] = assigned
        if keepalive != c.keep_alive:
            ack["server_keep_alive"] = keepalive
        if expiry != requested:
            ack["session_expiry_interval"] = expiry
        if auth_data is not None:
            ack["authentication_method"] = c.authentication_method
            ack["authentication_data"] = auth_data
    conn.send_event(ConnAck(**ack))
    gw.stats.connected += 1
    gw.stats.connects += 1
    if not stored:
        # The session is open, but the broker refused its records (logged): the
        # server closes the connection (its will goes as for any such close)
        # and the client reconnects. A new session was never recorded, so it
        # ends with this connection: the next CONNACK does not say it is present.
        log.warning("client %s: closed (0x89, server busy): its session records were not stored", cid)
        if not present:
            sess.expiry = 0
        if v == 5:
            conn.send_event(Disconnect(reason_code=R.SERVER_BUSY))
        conn.closing = True  # the reader's end writes what is queued, CONNACK first
        return
    if present:
        await sess.redeliver(conn)
    conn.live = True
    if present or sess.queue is not None or sess.pending.items:
        sess.notify()
    else:
        # A new session without a queue has nothing to pump: the CONNACK goes
        # out with the read's one non-blocking write, not through the pump and
        # a send_all (an enqueue notifies it as usual).
        sess.due = False
