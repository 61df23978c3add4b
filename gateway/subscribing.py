"""SUBSCRIBE and UNSUBSCRIBE of a connection: filters checked against the
ACL, the session and the router's trie updated, retained messages queued
after the SUBACK."""

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
    codes = []
    retained = []
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
        new = sess.subscribe(text, opts)
        gw.router.trie.subscribe(sess.client_id, text, opts)
        codes.append(s.qos)
        if flt.group is None and (s.retain_handling == 0 or (s.retain_handling == 1 and new)):
            retained.append((flt, opts))
    deliveries = []
    for flt, opts in retained:
        deliveries += await gw.retained_for(flt, opts)
    await gw.save_subscriptions(sess)
    conn.send_event(SubAck(packet_id=ev.packet_id, reason_codes=codes))
    if deliveries:
        sess.pending.extend(deliveries)
        sess.notify()


async def unsubscribe(conn: Connection, ev: Unsubscribe) -> None:
    gw = conn.gw
    sess = conn.session
    codes = []
    for text in ev.topic_filters:
        try:
            parse_filter(text)
        except TopicError as e:  # no subscription can have it: answered, not raised (fault campaign, issue 17)
            log.info("client %s: bad filter %r in UNSUBSCRIBE: %s", conn.client_id, text, e)
            codes.append(R.TOPIC_FILTER_INVALID)
            continue
        existed = sess.unsubscribe(text)
        gw.router.trie.unsubscribe(sess.client_id, text)
        codes.append(R.SUCCESS if existed else R.NO_SUBSCRIPTION_EXISTED)
    await gw.save_subscriptions(sess)
    conn.send_event(UnsubAck(packet_id=ev.packet_id, reason_codes=codes if conn.version == 5 else ()))
