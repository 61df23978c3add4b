"""CONNECT: authentication, the client id, keepalive and will checks, the
ACL, opening (or taking over) the session, the CONNACK, then redelivery of
what a present session has in flight."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from gateway.mqtt import ConnAck, Connect, ReasonCode
from gateway.wildcard import TopicError, validate_topic_name

if TYPE_CHECKING:
    from gateway.connection import Connection

log = logging.getLogger("mqgate.gateway")
R = ReasonCode



def _refuse(conn: Connection, code: int, why: str) -> None:
    log.info("connection %s: CONNECT refused (0x%02X): %s", conn.info.peer, code, why)
    conn.gw.stats.refused += 1
    conn.send_event(ConnAck(reason_code=code))
    conn.closing = True


async def accept_connect(conn: Connection, c: Connect) -> None:
    gw = conn.gw
    lim = gw.settings.limits
    v = c.protocol_version
    if c.authentication_method is not None:
        return _refuse(conn, R.BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported")
    result = await gw.settings.authenticator.authenticate(c.username, c.password, conn.info.certificate)
    if not result.ok:
        bad_pw = c.username is not None and gw.settings.authenticator.password_file is not None
        gw.stats.auth_failures += 1
        return _refuse(conn, R.BAD_USER_NAME_OR_PASSWORD if bad_pw else R.NOT_AUTHORIZED, "authentication failed")
    conn.username = result.username if result.username is not None else c.username
    cid = c.client_id
    assigned = None
    if not cid:
        cid = "auto-" + uuid.uuid4().hex
        if v == 5:
            assigned = cid
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
    sess, present = await gw.open_session(conn, cid, clean_start=c.clean_start, expiry=expiry, version=v)
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
    conn.send_event(ConnAck(**ack))
    gw.stats.connected += 1
    gw.stats.connects += 1
    if present:
        await sess.redeliver(conn)
    conn.live = True
    sess.notify()
