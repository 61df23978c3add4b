"""The PUBLISH path of a connection: check, map, store (one ``send_many`` per
read, after one checkpoint unless the read woke alone: see
gateway/connection.py), then acknowledge in arrival order.

* The acks of a read go out after ``send_many`` returns, so under
  SYNC_FLUSH after the one group commit that covers the whole batch. A
  QoS 1 message stored with success gets a plain PUBACK (4 bytes, the same
  in 3.1.1 and 5.0): the flows are finished in one call and the PUBACKs
  packed in one write, with no event object per message; any other ack
  (a failure code, a PUBREC) is an event, in its place in the order.

* A PUBLISH the store does not take: a 5.0 client gets the failure reason
  code. A 3.1.1 client cannot be told: after a temporary failure (store
  not available, busy) it is closed unacknowledged so that it sends the
  message again; a permanent refusal (``MESSAGE_ILLEGAL``, e.g. a delay
  over ``timerMaxDelaySec``; ``NO_PERMISSION`` on the topic;
  ``TOPIC_NOT_EXIST``) would come back forever from a persistent session,
  so it is acknowledged and dropped (counted in ``dropped``), as Mosquitto
  does with messages it will not take. A message stored whose flush or
  replication timed out (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
  SLAVE_NOT_AVAILABLE: stored statuses, which RocketMQ's producers do not
  send again) is acknowledged like a stored one
  (tests/gateway/test_stored_degraded.py).
* Over ``maxPublishRate`` (gateway/quota.py): a 5.0 client's PUBLISH gets
  0x97 Quota exceeded and is not stored (a QoS 0 one is dropped; both are
  counted in ``quota_exceeded``); a 3.1.1 client's read waits until the
  quota pays for it, so its socket is read slower and nothing is lost.
* ``$delayed/<s>/<topic>``: the message is parked by the broker's timer
  service and stored on ``<topic>`` when it fires. Its RETAIN flag travels
  in the message (``mqttRetain``) and acts on ``<topic>`` then (the
  router's stored hook), never on ``$delayed/...`` and never before.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from core.broker import SendStatus
from core.store import PROPERTY_TIMER_OUT_MS
from gateway.mapping import (P_TIMER_DELAY, P_TOPIC, MappingError, broker_topic_for, now_ms, publish_properties,
                             plain_publish_to_message, publish_to_message, queue_for, split_delayed)
from gateway.meta import record
from gateway.mqtt import (PUBREC_WORD, ConnectionState, InboundAction, InboundStage, Publish, ReasonCode,
                          RemoteProtocolError, ack_event)

if TYPE_CHECKING:
    from gateway.app import MQTTGateway
    from gateway.connection import Connection

log = logging.getLogger("mqgate.gateway")
R = ReasonCode
# store refusals that sending the message again cannot change (see the module docstring)
_PERMANENT = frozenset({SendStatus.MESSAGE_ILLEGAL, SendStatus.NO_PERMISSION, SendStatus.TOPIC_NOT_EXIST})
_CONNECTED = ConnectionState.CONNECTED
_SEND_OK = SendStatus.SEND_OK
# (an enum member read through its class is a Python-level lookup, per message)
_ACK_PENDING, _RESEND_PUBREC = InboundAction.ACK_PENDING, InboundAction.RESEND_PUBREC


async def publish_batch(conn: Connection, batch: list[Publish]) -> None:
    # Readers woken by the same I/O poll run in random order; one checkpoint
    # lets the others act first, so a SUBSCRIBE another client sent before
    # this PUBLISH is in force when it is routed (one per read, not per packet).
    # Not needed when no other reader woke with this one and every reader acts in
    # the step of its epoll wake-up (gateway/connection.py); taken by a closing connection (a
    # takeover's kick cancels its read there, before anything is stored), and
    # when sends wait for the disk or a slave: there a step is nothing against
    # the wait, and the reads that act meanwhile join the same group commit.
    gw = conn.gw
    backend = gw.backend
    if not conn.woken_alone or conn.closing or gw.unpolled_readers or backend.sends_wait:
        await trio.lowlevel.checkpoint()
    sess = conn.session
    quota = conn.quota
    if quota is not None and conn.version < 5:
        await quota.wait(len(batch))
        quota = None
    inbound = sess.inbound
    received = now_ms()
    items = []
    plan = []  # (publish, item index or None, refusal code, reason string)
    qos2 = False
    retained = False  # a retained publish in the batch: its index is written after the store (an await)
    error = None
    configs = {}  # broker topic -> config, resolved once per batch
    # MQTT topic -> (topic, broker topic, delay, queue, base properties by QoS)
    # of an accepted publish: the checks (ACL, mapping) and publish_properties
    # run once per topic and batch. Retained ones and refusals are checked
    # each time (a refusal is logged and counted).
    checked = {}
    retained_bases = {}  # (MQTT topic, QoS) -> publish_properties of a retained publish, made once per read
    client_id = conn.client_id
    plain = conn.version < 5  # a 3.1/3.1.1 PUBLISH has no properties to look for
    counts = [0, 0, 0]  # received by QoS, added to the stats once per read
    try:
        for pub in batch:
            qos = pub.qos
            counts[qos] += 1
            if qos:  # (QoS 0 has no flow: always delivered)
                try:
                    action = inbound.on_publish(pub)
                except RemoteProtocolError as e:
                    error = e  # store and acknowledge what came before, then close
                    break
                if action is _ACK_PENDING:
                    continue
                if action is _RESEND_PUBREC:
                    plan.append((pub, None, 0, None))
                    continue
            if quota is not None and not quota.take():
                gw.stats.quota_exceeded += 1
                plan.append((pub, None, R.QUOTA_EXCEEDED, f"quota exceeded: at most {quota.rate} messages/s"))
                continue
            retain = pub.retain
            retained = retained or retain
            known = None if retain else checked.get(pub.topic)
            if known is None:
                try:
                    topic, name, delay = check_publish(conn, pub)
                    cfg = configs.get(name)
                    if cfg is None:
                        cfg = backend.get_topic(name)
                        if cfg is None:  # not there yet: auto-create (the only await, once per topic)
                            cfg = await gw.topic_config(name)
                            checked.clear()  # the ACL may have been reloaded meanwhile
                            if cfg is None:
                                raise MappingError(f"broker topic {name!r} does not exist and may not be created",
                                                   R.TOPIC_NAME_INVALID)
                        configs[name] = cfg
                except MappingError as e:
                    plan.append((pub, None, e.reason_code, str(e)))
                    continue
                known = (topic, name, delay, queue_for(topic, cfg.write_queue_nums), [None, None, None])
                if not retain:
                    checked[pub.topic] = known
            topic, name, delay, queue, bases = known
            try:
                # a topic or property the store cannot keep (a control character) is refused here too
                if retain:
                    base = retained_bases.get((topic, qos))
                    if base is None:
                        base = retained_bases[topic, qos] = publish_properties(topic, qos, True, client_id, received)
                else:
                    base = bases[qos]
                    if base is None:
                        base = bases[qos] = publish_properties(topic, qos, False, client_id, received)
                if plain:
                    msg = plain_publish_to_message(pub, name, base, received)
                else:
                    msg = publish_to_message(pub, name, client_id, received, topic=topic, base=base)
            except MappingError as e:
                plan.append((pub, None, e.reason_code, str(e)))
                continue
            if delay is not None:
                msg.properties[P_TIMER_DELAY] = str(delay)
            plan.append((pub, len(items), 0, None))
            items.append((msg, queue))
            if qos == 2 and sess.persistent:
                qos2 = True
    finally:
        stats = gw.stats
        stats.received += counts[0] + counts[1] + counts[2]
        by_qos = stats.received_qos
        for qos in (0, 1, 2):
            by_qos[qos] += counts[qos]
    if qos2:
        # The packet ids go into the durable state with the messages (one flush).
        pids = inbound.packet_ids(InboundStage.QOS2_UNACKED, InboundStage.QOS2_RECEIVED)
        items.append(record("in2", sess.client_id, pids))
    if backend.sends_wait or retained or qos2:
        # Once a message is stored, its ack, retained index and QoS 2 state must
        # follow it even if this connection is cancelled meanwhile (takeover):
        # shielded, bounded by the flush.
        with trio.CancelScope(shield=True):
            await _store(conn, plan, items)
    else:
        # Nothing here waits (the broker answers at once; no retained index and no
        # QoS 2 state to write after): no checkpoint, so no cancellation, comes
        # between the store and the acks, and no shield (a cancel scope) is needed.
        await _store(conn, plan, items)
    if error is not None:
        raise error


async def _store(conn: Connection, plan, items) -> None:
    # no checkpoint of send_many's own when it need not wait: this read's wake-up
    # was one, and the reader's next wait is another
    results = await conn.gw.backend.send_many(items, checkpoint=False) if items else []
    await _after_store(conn, plan, items, results)


async def _after_store(conn: Connection, plan, items, results) -> None:
    gw = conn.gw
    sess = conn.session
    inbound = sess.inbound
    acks = []  # in arrival order: events, or packet ids of plain PUBACKs
    plain = 0  # how many of them are packet ids
    retained = []
    fail_in2 = False
    resend = False  # 3.1.1 after a temporary failure: no ack for it or what follows, then close
    for pub, idx, code, reason in plan:
        if idx is not None:
            r = results[idx]
            if r.status is not _SEND_OK and not r.ok:  # SEND_OK first: `ok` is a property
                code, reason = R.UNSPECIFIED_ERROR, f"not stored: {r.status.name} {r.remark or ''}".strip()
                if pub.topic.startswith("$delayed/"):
                    code = R.IMPLEMENTATION_SPECIFIC_ERROR  # e.g. the timer service refused the delay
                gw.stats.store_errors += 1
                if conn.version < 5 and pub.qos and not _permanent(gw, r.status):
                    # 3.1.1 cannot say "failed": no ack, so the client sends it again.
                    log.warning("client %s: publish on %r %s; closing the connection so that it is sent again",
                                conn.client_id, pub.topic, reason)
                    resend = True
                    continue
                if conn.version < 5 or not pub.qos:
                    gw.stats.dropped += 1  # the publisher is not told
                    log.warning("client %s: publish on %r %s; dropped", conn.client_id, pub.topic, reason)
                else:
                    log.warning("client %s: publish on %r %s", conn.client_id, pub.topic, reason)
                fail_in2 = fail_in2 or pub.qos == 2
            elif pub.retain:
                msg = items[idx][0]
                if PROPERTY_TIMER_OUT_MS not in msg.properties:  # parked ones are retained when they fire
                    retained.append((msg.properties[P_TOPIC], pub.payload, r.physical_offset))
        if not pub.qos or resend:
            continue
        if not code:  # a plain PUBACK or PUBREC (an ack word, see _send_acks)
            acks.append(pub.packet_id if pub.qos == 1 else PUBREC_WORD | pub.packet_id)
            plain += 1
            continue
        props = {"reason_string": reason} if (code and reason and conn.version == 5) else {}
        if pub.qos == 1:
            acks.append(inbound.puback(pub.packet_id, code, **props))
        else:
            acks.append(inbound.pubrec(pub.packet_id, code, **props))
    if plain:
        inbound.acknowledge([a for a in acks if a.__class__ is int] if plain < len(acks) else acks)
    if retained:
        await gw.set_retained(retained)
    if fail_in2 and sess.persistent:
        await gw.write_records([conn.in2_record()])
    if acks:
        _send_acks(conn, acks, plain == len(acks))
    if resend:
        conn.closing = True


def _send_acks(conn: Connection, acks: list, all_plain: bool) -> None:
    """Write the acks of a read in arrival order. An int is an ack word (a
    PUBACK's is its packet id, a PUBREC's ``PUBREC_WORD | pid``): an ack with
    success and no properties, the same bytes in 3.1.1 and 5.0. When every
    ack is one (the common case) they are packed together, with no event per
    message; the connection's state rules still apply (nothing after the
    client's DISCONNECT; dropped for a client whose Maximum Packet Size is
    under 4 bytes, as an oversized ack is)."""
    if all_plain:
        conn.send_acks(acks, plain=True)
        return
    for ack in acks:
        conn.send_event(ack_event(ack) if ack.__class__ is int else ack)


def _permanent(gw: MQTTGateway, status: SendStatus) -> bool:
    """Whether sending the message again gets the same refusal. The broker as
    a whole not taking writes (an operator's wipeWritePerm) is temporary."""
    if status is SendStatus.NO_PERMISSION and not gw.backend.writable():
        return False
    return status in _PERMANENT


def check_publish(conn: Connection, pub: Publish) -> tuple[str, str, int | None]:
    """(MQTT topic, broker topic, delay or None) for ``pub``; MappingError if refused."""
    gw = conn.gw
    topic = pub.topic
    delay = None
    if topic.startswith("$"):
        if topic.startswith("$delayed/"):
            delay, topic = split_delayed(topic)
            if not gw.timers_supported():
                log.warning("client %s: $delayed publish on %r refused: the broker has no timer support",
                            conn.client_id, topic)
                raise MappingError("delayed delivery ($delayed/...) is not supported by this broker: "
                                   "it has no timer-message support", R.IMPLEMENTATION_SPECIFIC_ERROR)
        elif topic.startswith("$SYS"):
            raise MappingError("clients may not publish to $SYS topics", R.NOT_AUTHORIZED)
    if not conn.acl.check("publish", topic):
        log.info("client %s: publish on %r denied by the ACL", conn.client_id, topic)
        gw.stats.denied += 1
        raise MappingError(f"publish to {topic!r} not authorized", R.NOT_AUTHORIZED)
    if pub.retain and not gw.settings.session.retain_available:
        raise RemoteProtocolError("retained messages are not available", R.RETAIN_NOT_SUPPORTED)
    return topic, broker_topic_for(topic), delay
