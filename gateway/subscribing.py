"""SUBSCRIBE and UNSUBSCRIBE of a connection: filters checked against the
ACL, the session and the router's trie updated, retained messages queued
after the SUBACK.

A change the session's record must keep (a persistent session; on a gateway
node, any session) is granted only once the broker has stored that record.
While the broker takes no writes (it lost its master lease) nothing is
changed; when it refuses the record all the same (a full disk), the packet's
changes are undone. Either way the client is told: SUBACK 0x80 for each
filter, 5.0 UNSUBACK 0x80; a 3.1.1 UNSUBACK has no way to say it, so that
connection is closed without one. A failover thus never finds a subscription the client was
granted missing from the session it resumes."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.mqtt import ReasonCode, SubAck, Subscribe, UnsubAck, Unsubscribe
from gateway.sessions import SubOptions
from gateway.wildcard import TopicError, parse_filter

if TYPE_CHECKING:
    from gateway.connection import Connection

log = logging.getLogger("mqgate.gateway")
R = ReasonCode


async def subscribe(conn: Connection, ev: Subscribe) -> None:
    gw = conn.gw
    sess = conn.session
    if _unrecordable(conn, "SUBSCRIBE"):
        conn.send_event(SubAck(packet_id=ev.packet_id, reason_codes=[R.UNSPECIFIED_ERROR] * len(ev.subscriptions)))
        return
    codes = []
    retained = []
    before: dict[str, tuple | None] = {}  # each filter's subscription before this packet
    for s in ev.subscriptions:
        text = s.topic_filter
        try:
            flt = parse_filter(text)
        except TopicError as e:
            log.info("client %s: bad filter %r: %s", conn.client_id, text, e)
            codes.append(R.TOPIC_FILTER_INVALID if conn.version == 5 else R.UNSPECIFIED_ERROR)
            continue
        if conn.acl.refuses(text):
            log.info("client %s: subscription to %r refused by the ACL", conn.client_id, text)
            codes.append(R.UNSPECIFIED_ERROR)
            continue
        if not conn.acl.check("subscribe", text):
            codes.append(R.NOT_AUTHORIZED if conn.version == 5 else R.UNSPECIFIED_ERROR)
            continue
        opts = SubOptions(s.qos, s.no_local, s.retain_as_published, s.retain_handling,
                          ev.subscription_identifier)
        if text not in before:
            before[text] = sess.subs.get(text)
        new = sess.subscribe(text, opts)
        gw.router.trie.subscribe(sess.client_id, text, opts)
        codes.append(s.qos)
        if flt.group is None and (s.retain_handling == 0 or (s.retain_handling == 1 and new)):
            retained.append((flt, opts))
    deliveries = []
    for flt, opts in retained:
        deliveries += await gw.retained_for(flt, opts)
    if before and not await gw.save_subscriptions(sess):
        _undo(conn, before, "SUBSCRIBE")
        codes = [c if c >= 0x80 else R.UNSPECIFIED_ERROR for c in codes]
        deliveries = []
    conn.send_event(SubAck(packet_id=ev.packet_id, reason_codes=codes))
    if deliveries:
        sess.pending.extend(deliveries)
        sess.notify()


async def unsubscribe(conn: Connection, ev: Unsubscribe) -> None:
    gw = conn.gw
    sess = conn.session
    if _unrecordable(conn, "UNSUBSCRIBE"):
        return _refuse_unsubscribe(conn, ev, [R.UNSPECIFIED_ERROR] * len(ev.topic_filters))
    codes = []
    before: dict[str, tuple | None] = {}
    for text in ev.topic_filters:
        try:
            parse_filter(text)
        except TopicError as e:  # no subscription can have it: answered, not raised (fault campaign, issue 17)
            log.info("client %s: bad filter %r in UNSUBSCRIBE: %s", conn.client_id, text, e)
            codes.append(R.TOPIC_FILTER_INVALID)
            continue
        if text not in before:
            before[text] = sess.subs.get(text)
        existed = sess.unsubscribe(text)
        gw.router.trie.unsubscribe(sess.client_id, text)
        codes.append(R.SUCCESS if existed else R.NO_SUBSCRIPTION_EXISTED)
    if any(before.values()) and not await gw.save_subscriptions(sess):
        _undo(conn, before, "UNSUBSCRIBE")
        return _refuse_unsubscribe(conn, ev, [c if c >= 0x80 else R.UNSPECIFIED_ERROR for c in codes])
    conn.send_event(UnsubAck(packet_id=ev.packet_id, reason_codes=codes if conn.version == 5 else ()))


def _refuse_unsubscribe(conn: Connection, ev: Unsubscribe, codes: list) -> None:
    if conn.version != 5:
        conn.closing = True  # no UNSUBACK can say it: the reader ends, and the connection with it
    else:
        conn.send_event(UnsubAck(packet_id=ev.packet_id, reason_codes=codes))


def _unrecordable(conn: Connection, what: str) -> bool:
    """The session's subscriptions have a record, and the broker takes no writes now."""
    gw = conn.gw
    if gw.records_subscriptions(conn.session) and not gw.backend.writable():
        log.warning("client %s: %s not applied: the broker takes no writes now", conn.client_id, what)
        return True
    return False


def _undo(conn: Connection, before: dict[str, tuple | None], what: str) -> None:
    """Put back the subscriptions of ``before`` (filter: (parsed, options), or
    None for none) in the session and the trie: the broker refused their record."""
    sess, trie = conn.session, conn.gw.router.trie
    for text, was in before.items():
        if was is None:
            sess.unsubscribe(text)
            trie.unsubscribe(sess.client_id, text)
        else:
            sess.subscribe(text, was[1])
            trie.subscribe(sess.client_id, text, was[1])
    log.warning("client %s: %s not applied: the broker did not store the session's record", conn.client_id, what)
