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
* A topic's targets are kept (``_routes``, an empty list too) while the
  trie's generation and the session table stay the same: every subscribe,
  unsubscribe, new or ended session is seen by the next message. Matches
  with ``$share`` groups or No Local subscriptions are made per message.
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

from core.broker import LMQ_TOPIC_PREFIX, PullStatus, SendStatus
from core.store import (PROPERTY_INNER_MULTI_DISPATCH, PROPERTY_REAL_TOPIC, PROPERTY_TIMER_OUT_MS, Message,
                        decode_message)
from gateway.mapping import (P_CLIENT, P_EXPIRY, P_RETAIN, P_TIMER_DELAY, P_TOPIC, Outbound, is_deliverable,
                             mqtt_topic_of, now_ms, outbound_from_message, outbound_from_publish)
from gateway.mqtt import Publish, publish_v4_head
from gateway.nodes import P_SHARE_PICKS, node_queue_name
from gateway.publish_output import forward_v4
from gateway.sessions import REF_MASK, REF_SHIFT, Delivery, MessageUnavailable, Session
from gateway.wildcard import SubscriptionTrie, TopicError

if TYPE_CHECKING:
    from gateway.app import MQTTGateway

log = logging.getLogger("mqgate.gateway")
_CACHE = 4096
_HEADS = 64  # PUBLISH heads kept per topic (one per payload length, QoS and retain flag)
_NO_ROUTE: tuple = ((), True)  # the route of a topic nobody subscribes to
_SEND_OK = SendStatus.SEND_OK
_TRANSACTION_PREPARED = 0x4  # in ``sysflag & 0xC``: a prepared (half) transactional message
_UNAVAILABLE = frozenset({PullStatus.SERVICE_NOT_AVAILABLE, PullStatus.SYSTEM_ERROR})  # a read that says nothing about the entry


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
        # topic -> (targets, plain): see `_route`; cleared whenever the trie's
        # generation or the session table changes
        self._routes: dict[str, tuple] = {}
        self._routes_gen = 0  # the trie's generation the routes were made at
        # topic -> {payload length << 3 | QoS << 1 | retain: 3.1.1 PUBLISH head}: see `_head`
        self._heads: dict[str, dict[int, bytes]] = {}

    # ---- sessions ---------------------------------------------------------------

    def add_session(self, sess: Session) -> None:
        self._routes.clear()
        self.sessions[sess.client_id] = sess
        if sess.queue is not None:
            self.by_queue[sess.queue] = sess

    def remove_session(self, sess: Session) -> None:
        self._routes.clear()
        if self.sessions.get(sess.client_id) is sess:
            del self.sessions[sess.client_id]
        if sess.queue is not None and self.by_queue.get(sess.queue) is sess:
            del self.by_queue[sess.queue]
        self.trie.unsubscribe_all(sess.client_id)

    # ---- matching -----------------------------------------------------------------

    def targets(self, topic: str, publisher: str | None) -> list[Delivery | tuple]:
        """[(session, qos, retain_as_published, sub ids, group)] for a topic."""
        trie_gen = self.trie.generation
        if trie_gen != self._routes_gen:
            self._routes.clear()
            self._routes_gen = trie_gen
        route = self._routes.get(topic)
        if route is None:
            route = self._route(topic, publisher)
        return route[0]

    def _route(self, topic: str, publisher: str | None) -> tuple:
        """(targets, plain) of a topic: the targets as `targets` gives them;
        ``plain`` when no target has a session queue or another node (each
        is delivered in memory, if connected). Kept in ``_routes`` (an empty
        one too: a topic nobody subscribes to costs one lookup), unless the
        match holds ``$share`` groups (round robin) or No Local subscriptions
        (they depend on the publisher); the caller has checked that
        ``_routes`` is of the trie's generation."""
        try:
            match = self.trie.match(topic)
        except TopicError:
            match = None
        if not match:
            route = _NO_ROUTE
            keep = True
        else:
            targets, keep = self._aggregate(match, publisher)
            route = (targets, all(t[0].queue is None and t[0].node is None for t in targets))
        if keep:
            routes = self._routes
            if len(routes) >= _CACHE:
                routes.clear()
            routes[topic] = route
        return route

    def _aggregate(self, match, publisher: str | None) -> tuple[list, bool]:
        """(targets of a trie match, whether they can be kept for the topic):
        one target per client, highest QoS, every subscription identifier."""
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
        return out, keep

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
        topic = props.get(P_TOPIC)
        if (not topic or msg.sysflag & 0xC == _TRANSACTION_PREPARED or PROPERTY_REAL_TOPIC in props
                or P_TIMER_DELAY in props or PROPERTY_TIMER_OUT_MS in props):
            topic = self._unusual_topic(msg)
            if topic is None:
                return
        # `targets`, inline: this runs for every message the broker stores
        trie_gen = self.trie.generation
        if trie_gen != self._routes_gen:
            self._routes.clear()
            self._routes_gen = trie_gen
        route = self._routes.get(topic)
        if route is None:
            route = self._route(topic, props.get(P_CLIENT))
        targets = route[0]
        if route[1]:  # in memory only: the kept targets themselves, if every one is connected
            for t in targets:
                if t[0].conn is None:
                    break
            else:
                if targets:
                    self._pending[id(msg)] = (topic, targets, msg)  # the message too: its id stays unique meanwhile
                return
        self._dispatch(msg, topic, targets)

    def _unusual_topic(self, msg: Message) -> str | None:
        """``put_hook``'s MQTT topic for a message that is not a plain stored
        publish (native, transactional, delayed, a fired timer): None if it
        is not routed now (parked, not deliverable, expired while parked)."""
        props = msg.properties
        if P_TIMER_DELAY in props and PROPERTY_TIMER_OUT_MS not in props:
            return None  # parked in the timer wheel; routed when it fires
        if not is_deliverable(msg):
            return None
        topic = mqtt_topic_of(msg)
        if topic is None:
            return None
        if PROPERTY_TIMER_OUT_MS in props and self._fired(msg, topic):
            return None
        return topic

    def _dispatch(self, msg: Message, topic: str, targets: list) -> None:
        """``put_hook`` for targets with a session queue or another node, or
        one not connected: queue units (``INNER_MULTI_DISPATCH``), ``$share``
        picks of other nodes, and what waits for the stored hook."""
        props = msg.properties
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
            self._pending[id(msg)] = (topic, memory, msg)

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
        """In-memory deliveries of a message, once the broker has stored it.

        The fast path (a message from our own PUBLISH path, no expiry, no
        tracer): each target that would take it straight into a live 3.1.1
        connection's output (``Session.enqueue``'s direct case: nothing
        pending, and at QoS 1/2 room in the window) gets the PUBLISH bytes,
        with no ``Outbound``, ``Delivery`` or template built. The bytes are
        ``publish_v4_head`` (all but the packet id and the payload, which
        depends only on the topic, the payload's length, the QoS and the
        retain flag, so it is kept per topic: `_head`), the packet id the
        flows give (QoS 1/2) and the payload: what ``deliver`` would
        send. A QoS 1/2 delivery is tracked as ``deliver`` tracks it, its
        ``mem`` entry an ``InMemory`` tuple (gateway.sessions). The loop is
        ``gateway.publish_output.forward_v4`` (compiled, over the
        connections' output state as C fields). The other targets take the
        general path, for the same message."""
        if self._fired_retained:
            f = self._fired_retained.pop(id(msg), None)
            if f is not None and result.ok:
                self.gw.retain_fired(f[0], msg.body, result.physical_offset)
        pending = self._pending
        if not pending:
            return
        p = pending.pop(id(msg), None)
        if p is None or (result.status is not _SEND_OK and not result.ok):  # SEND_OK first: `ok` is a property
            return
        pub = msg.note
        topic, targets = p[0], p[1]
        if pub.__class__ is Publish:  # from our own PUBLISH path: no need to parse the properties back
            if pub.message_expiry_interval is None and self.gw.tracer is None:
                targets = forward_v4(self._heads.get(topic), self._head, topic, targets, pub, msg, self.gw.stats)
                if targets is None:
                    return
            out = outbound_from_publish(pub, topic, msg.properties.get(P_CLIENT), msg.born_timestamp)
        else:
            out = outbound_from_message(msg, topic)
        if out is None:
            return
        if self.gw.tracer is not None:
            self.gw.tracer.remember(out, msg.properties)
        for sess, qos, rap, ids, group in targets:
            if sess.conn is not None:
                sess.enqueue(Delivery(out, min(qos, out.qos), rap and out.retain, ids, group))

    def _head(self, topic: str, key: int) -> bytes:
        """The 3.1.1 PUBLISH head (``publish_v4_head``) of ``topic`` for
        ``key``: the payload's length << 3 | QoS << 1 | retain flag; kept
        per topic (at most ``_HEADS`` keys each)."""
        heads = self._heads.get(topic)
        if heads is None:
            if len(self._heads) >= _CACHE:
                self._heads.clear()
            heads = self._heads[topic] = {}
        head = heads.get(key)
        if head is None:
            if len(heads) >= _HEADS:
                heads.clear()
            head = heads[key] = publish_v4_head(topic, key >> 3, (key >> 1) & 3, bool(key & 1))
        return head

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
        """The message a flow ref points at (for redelivery), or None if gone;
        `MessageUnavailable` if its queue's broker does not answer."""
        broker = self.gw.backend
        if type(ref) is int and queue is not None:
            qid, off = ref >> REF_SHIFT, ref & REF_MASK
            result = await broker.read_queue(queue, qid, off, 1)
            if result.entries and result.queue_offsets and result.queue_offsets[0] == off:
                return self.decoded(result.entries[0])
            if result.status in _UNAVAILABLE:
                raise MessageUnavailable(f"{queue} queue {qid} offset {off}: {result.status.name}")
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
