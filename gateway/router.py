"""Routing: which sessions get a message, decided once, at put time.

Rules kept here:

* ``put_hook`` runs for every message the broker stores (MQTT publishes and
  native sends alike), before it is encoded. It matches the MQTT topic in
  the trie once, then: each matching persistent session that admits it
  (queue limit) is added to ``INNER_MULTI_DISPATCH``, so the one stored
  entry also gets a unit in that session's queue; each matching connected
  non-persistent session is remembered for in-memory delivery.
* In-memory deliveries happen in ``stored_hook``, i.e. only once the entry
  is in the log: the broker calls it for every message whose put hooks ran,
  with the outcome (``send_many`` appends its messages together, so what
  ``put_hook`` found waits in ``_pending``, keyed by the message, until then).
* Subscriptions of one client that overlap give one delivery: the highest
  QoS, every subscription identifier; No Local skips the publisher's own
  subscriptions. Each ``$share`` group gets the message once: one member,
  round robin over the members, connected members first.
* A dispatch to a session queue wakes that session's delivery task.
* A session of another gateway node (a stub, ``gateway.cluster``) gets a
  unit in its session queue if it is persistent, else its node's queue
  gets one (once per node), for that node to deliver; the members picked
  for ``$share`` groups there are named in ``mqgateShare``.
* A fired timer (``$delayed``; the timer service stores it on its real
  topic with ``TIMER_OUT_MS`` kept) is routed like any message, and also:
  an MQTT 5 message whose expiry passed while it was parked goes to no
  session and counts once in ``expired``; one with ``mqttRetain`` set
  updates the retained index of its topic once it is stored (the record is
  written by the gateway, ``MQTTGateway.retain_fired``).
* ``expired`` counts messages, not deliveries: a message several sessions
  drop as expired is counted once (``count_expired``).
"""

from __future__ import annotations

import itertools
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from core.broker import LMQ_TOPIC_PREFIX
from core.store import PROPERTY_INNER_MULTI_DISPATCH, PROPERTY_TIMER_OUT_MS, Message, decode_message
from gateway.mapping import (P_CLIENT, P_EXPIRY, P_RETAIN, P_TIMER_DELAY, Outbound, is_deliverable,
                             mqtt_topic_of, now_ms, outbound_from_message, outbound_from_publish)
from gateway.mqtt import Publish, encode_publish_v4_qos0
from gateway.nodes import P_SHARE_PICKS, node_queue_name
from gateway.sessions import REF_MASK, REF_SHIFT, Delivery, Session
from gateway.wildcard import SubscriptionTrie, TopicError

if TYPE_CHECKING:
    from gateway.app import MQTTGateway

log = logging.getLogger("mqgate.gateway")
_CACHE = 4096


class Router:
    def __init__(self, gw: MQTTGateway) -> None:
        self.gw = gw
        self.trie = SubscriptionTrie(cache_size=10_000)
        self.sessions: dict[str, Session] = {}
        self.by_queue: dict[str, Session] = {}
        self._rr: dict[tuple[str, str], itertools.count] = {}
        self._pending: dict[int, tuple] = {}  # id(message) -> (MQTT topic, in-memory targets, message), until stored
        self._decoded: OrderedDict[bytes, Outbound | None] = OrderedDict()
        self._fired_retained: dict[int, tuple] = {}  # id(message) -> (MQTT topic, message), until stored
        self._expired: OrderedDict[int, Outbound] = OrderedDict()  # counted already (kept: ids stay unique)
        # topic -> (trie generation, sessions generation, targets): see `targets`
        self._targets: dict[str, tuple] = {}
        self._sessions_gen = 0

    # ---- sessions ---------------------------------------------------------------

    def add_session(self, sess: Session) -> None:
        self._sessions_gen += 1
        self.sessions[sess.client_id] = sess
        if sess.queue is not None:
            self.by_queue[sess.queue] = sess

    def remove_session(self, sess: Session) -> None:
        self._sessions_gen += 1
        if self.sessions.get(sess.client_id) is sess:
            del self.sessions[sess.client_id]
        if sess.queue is not None and self.by_queue.get(sess.queue) is sess:
            del self.by_queue[sess.queue]
        self.trie.unsubscribe_all(sess.client_id)

    # ---- matching -----------------------------------------------------------------

    def targets(self, topic: str, publisher: str | None) -> list[Delivery | tuple]:
        """[(session, qos, retain_as_published, sub ids, group)] for a topic.

        Kept per topic while the trie's generation and the sessions are the
        same (equal generations mean equal subscriptions: the trie is not
        asked again), unless the match holds ``$share`` groups (round robin)
        or No Local subscriptions (they depend on the publisher)."""
        trie = self.trie
        generation = trie.generation
        known = self._targets.get(topic)
        if known is not None and known[0] == generation and known[1] == self._sessions_gen:
            return known[2]
        try:
            match = trie.match(topic)
        except TopicError:
            return []
        if not match:
            return []
        sessions = self.sessions
        agg: dict[str, list] = {}
        keep = not match.shared
        for sub in match.subscriptions:
            opts = sub.options
            if opts.no_local:
                keep = False
                if sub.client_id == publisher:
                    continue
            a = agg.get(sub.client_id)
            if a is None:
                agg[sub.client_id] = [opts.qos, opts.retain_as_published, [] if opts.sub_id is None else [opts.sub_id], None]
            else:
                a[0] = max(a[0], opts.qos)
                a[1] = a[1] or opts.retain_as_published
                if opts.sub_id is not None:
                    a[2].append(opts.sub_id)
        for group in match.shared:
            member = self._pick(group)
            if member is None:
                continue
            cid, opts = member
            a = agg.get(cid)
            if a is None:
                agg[cid] = [opts.qos, opts.retain_as_published, [] if opts.sub_id is None else [opts.sub_id],
                            f"$share/{group.group}/{group.filter}"]
            else:
                a[0] = max(a[0], opts.qos)
                if opts.sub_id is not None:
                    a[2].append(opts.sub_id)
        out = []
        for cid, (qos, rap, ids, group) in agg.items():
            sess = sessions.get(cid)
            if sess is not None:
                out.append((sess, qos, rap, tuple(ids), group))
        if keep:
            if len(self._targets) >= _CACHE:
                self._targets.clear()
            self._targets[topic] = (generation, self._sessions_gen, out)
        return out

    def _pick(self, group) -> tuple | None:
        members = group.members
        sessions = self.sessions
        live = [m for m in members if (s := sessions.get(m[0])) is not None and s.connected_somewhere]
        pool = live or [m for m in members if (s := sessions.get(m[0])) is not None and s.persistent]
        if not pool:
            return None
        counter = self._rr.get((group.group, group.filter))
        if counter is None:
            counter = self._rr[(group.group, group.filter)] = itertools.count()
        return pool[next(counter) % len(pool)]

    # ---- the broker hooks -------------------------------------------------------------

    def put_hook(self, msg: Message) -> None:
        props = msg.properties
        if P_TIMER_DELAY in props and PROPERTY_TIMER_OUT_MS not in props:
            return  # parked in the timer wheel; routed when it fires
        if not is_deliverable(msg):
            return
        topic = mqtt_topic_of(msg)
        if topic is None:
            return
        if PROPERTY_TIMER_OUT_MS in props and self._fired(msg, topic):
            return
        targets = self.targets(topic, props.get(P_CLIENT))
        if not targets:
            return
        queues = []
        memory = []
        for t in targets:
            sess = t[0]
            if sess.queue is not None:
                if sess.admit():
                    queues.append(sess.queue)
                elif self.gw.tracer is not None:
                    self.gw.tracer.dropped_at_put(sess.client_id, props, t[1])
            elif sess.conn is not None:
                memory.append(t)
            elif sess.node is not None:  # a non-persistent session on another gateway node
                nq = node_queue_name(sess.node)
                if nq not in queues:
                    queues.append(nq)
                if t[4] is not None:  # picked for its $share group: that node delivers to it alone
                    picks = props.get(P_SHARE_PICKS)
                    props[P_SHARE_PICKS] = sess.client_id if not picks else picks + "," + sess.client_id
        if queues:
            old = props.get(PROPERTY_INNER_MULTI_DISPATCH)
            props[PROPERTY_INNER_MULTI_DISPATCH] = ",".join(queues) if not old else old + "," + ",".join(queues)
        if memory:
            self._pending[id(msg)] = (topic, memory, msg)  # the message itself too: its id cannot be reused meanwhile

    def _fired(self, msg: Message, topic: str) -> bool:
        """A timer just fired (stored on its real topic): True if it expired while
        parked (it goes nowhere); if it is retained, its index update waits for
        the stored hook."""
        props = msg.properties
        if P_EXPIRY in props:
            out = outbound_from_message(msg, topic)  # None: not our property after all, delivery decides
            if out is not None and out.remaining_expiry(now_ms()) <= 0:
                self.gw.stats.expired += 1
                return True
        if props.get(P_RETAIN) == "true":
            self._fired_retained[id(msg)] = (topic, msg)
        return False

    def stored_hook(self, msg: Message, result) -> None:
        """In-memory deliveries of a message, once the broker has stored it."""
        if self._fired_retained:
            f = self._fired_retained.pop(id(msg), None)
            if f is not None and result.ok:
                self.gw.retain_fired(f[0], msg.body, result.physical_offset)
        if not self._pending:
            return
        p = self._pending.pop(id(msg), None)
        if p is None or not result.ok:
            return
        pub = msg.note
        targets = p[1]
        if pub.__class__ is Publish:  # from our own PUBLISH path: no need to parse the properties back
            if pub.message_expiry_interval is None and self.gw.tracer is None:
                targets = _deliver_v4_qos0(pub, p[0], targets)
                if not targets:
                    return
            out = outbound_from_publish(pub, p[0], msg.properties.get(P_CLIENT), msg.born_timestamp)
        else:
            out = outbound_from_message(msg, p[0])
        if out is None:
            return
        if self.gw.tracer is not None:
            self.gw.tracer.remember(out, msg.properties)
        for sess, qos, rap, ids, group in targets:
            if sess.conn is not None:
                sess.enqueue(Delivery(out, min(qos, out.qos), rap and out.retain, ids, group))

    def count_expired(self, out: Outbound) -> None:
        """``out`` was dropped as expired by a session: count the message once,
        whichever sessions drop it (they share the decoded Outbound)."""
        seen = self._expired
        if id(out) in seen:
            return
        seen[id(out)] = out
        if len(seen) > _CACHE:
            seen.popitem(last=False)
        self.gw.stats.expired += 1

    def on_dispatch(self, topic: str, queue_id: int, next_offset: int) -> None:
        if topic.startswith(LMQ_TOPIC_PREFIX):
            sess = self.by_queue.get(topic)
            if sess is not None:
                sess.notify()

    def publish_local(self, out: Outbound) -> None:
        """Deliver a message that is not stored ($SYS) to connected sessions."""
        for sess, qos, rap, ids, group in self.targets(out.topic, None):
            if sess.conn is not None:
                sess.enqueue(Delivery(out, min(qos, out.qos), rap and out.retain, ids, group))

    # ---- reading stored messages ---------------------------------------------------------

    def decoded(self, raw: bytes) -> Outbound | None:
        """The Outbound of a stored entry, decoded once for every session that reads it."""
        # the physical offset and what follows it (timestamps, hosts): entries
        # of different broker groups may share a physical offset
        phys = bytes(raw[28:96])
        cache = self._decoded
        out = cache.get(phys, False)
        if out is not False:
            return out
        try:
            msg = decode_message(raw)
            out = outbound_from_message(msg)
            if out is not None and self.gw.tracer is not None:
                self.gw.tracer.remember(out, msg.properties)
        except ValueError:
            out = None
        cache[phys] = out
        if len(cache) > _CACHE:
            cache.popitem(last=False)
        return out

    async def load(self, ref, queue: str | None) -> Outbound | None:
        """The message a flow ref points at (for redelivery), or None if gone."""
        broker = self.gw.backend
        if type(ref) is int and queue is not None:
            qid, off = ref >> REF_SHIFT, ref & REF_MASK
            result = await broker.read_queue(queue, qid, off, 1)
            if result.entries and result.queue_offsets and result.queue_offsets[0] == off:
                return self.decoded(result.entries[0])
            return None
        if isinstance(ref, (list, tuple)) and len(ref) == 3 and ref[0] == "r":
            raw = await broker.read_at(ref[1])
            if raw is None:
                return None
            out = self.decoded(raw)
            if out is not None:
                out = Outbound(out.topic, out.payload, out.qos, True, out.client_id, out.publish_ms,
                               out.expiry, out.props, ref=list(ref))
            return out
        return None


def _deliver_v4_qos0(pub: Publish, topic: str, targets: list) -> list:
    """The QoS 0 fast path of ``stored_hook`` (no expiry, no tracer): each
    target that would take the message at QoS 0 straight into a live 3.1.1
    connection's output (``Session.enqueue``'s direct case) gets the PUBLISH
    bytes, encoded once per message and retain flag, with no ``Outbound`` or
    ``Delivery`` built. Returns the targets left for the general path."""
    rest = None
    data = None
    for t in targets:
        sess = t[0]
        conn = sess.conn
        if conn is None:
            continue
        if ((t[1] and pub.qos) or sess.pending.items or not conn.live or conn.mq.protocol_version == 5
                or conn.mq.peer_max_packet_size is not None):
            if rest is None:
                rest = []
            rest.append(t)
            continue
        retain = t[2] and pub.retain
        if data is None or retain != data[0]:
            data = (retain, encode_publish_v4_qos0(topic, pub.payload, retain))
        conn.deliver_qos0_v4(sess, data[1])
    return rest
