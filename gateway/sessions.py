"""MQTT sessions: subscriptions, QoS flows and the queue each one reads.

ARCHITECTURE decision 4. Rules kept here:

* A session is persistent when its expiry interval is above 0 (3.1.1:
  clean session off, expiry = ``maxSessionExpiryInterval``). A persistent
  session owns the session queue ``session_queue_name(client_id)``: the
  router adds a unit there for every matching message (multi-dispatch), and
  delivery reads it from ``next_read``. A non-persistent session gets its
  messages in memory (``pending``), and so does any session for messages
  that are not in its queue (retained messages sent on subscribe, ``$SYS``).
* The session queue is read in each of the backend's ``queue_ids`` (one in
  process; one per broker group remotely: gateway.backend), each from its
  own ``next_read[queue id]``. Order is kept within one queue id (an MQTT
  topic is on one group), not across them.
* Outbound QoS 1/2 flows (``OutboundFlows``) carry a plain ``ref``: for a
  queue entry an int, its queue id above ``REF_SHIFT`` bits and its offset
  below (queue id 0: the offset itself), ``["r", phys, size]`` for another
  stored message, None for one that is not stored. The committed offset of
  each queue id (consumer group = the queue name) is its smallest offset
  still in flight, or its ``next_read``: everything below is acknowledged.
* At most ``min(client Receive Maximum, maxInflightMessages)`` QoS 1/2
  messages are in flight. Beyond that messages wait (in the queue, or in
  ``pending``); more than ``maxQueuedMessages`` waiting in a session queue,
  or more than ``maxOutboundBytes`` of payload waiting in ``pending``, are
  cut by the overflow policy, and every cut is counted (session and ``$SYS``).
* In-memory deliveries skip ``pending`` when they can: while nothing waits
  there and the connection is live, a QoS 0 message (or a QoS 1/2 one the
  window admits) goes straight into the connection's output at dispatch
  time, so a burst routed in one read is not cut by a queue limit. The
  output has its own bounds (``gateway.connection``): QoS 0 past
  ``maxOutboundBytes``, and past ``maxQueuedMessages`` behind a write the
  client's socket has no room for, is cut (``cut``, counted).
* ``notify()`` asks the connection to run ``pump`` once more (new queue
  entries, acknowledgements that open the window): its reader does at the
  end of its read, or a writer task started for it.
* Dicts of a session with nothing in them (``subs``, ``refs``, ``mem``)
  are one shared read-only mapping until the first entry: an idle session
  holds no empty containers of its own.
* ``mem`` holds, per packet id, the in-memory delivery in flight: a
  ``Delivery``, or (the router's QoS 1/2 fast path, which builds no
  ``Outbound`` for a message nobody may ever ask for again) an
  ``InMemory`` tuple of the PUBLISH it came from; ``delivery_of`` makes
  the ``Delivery`` of either, and every reader of ``mem`` goes through it.
  ``track`` writes ``refs`` and ``mem`` (``PublishOutput.deliver_v4`` does
  it inline, the same way).
* The durable state (``to_record``) is written as a ``"sess"`` meta record
  at connect, on (un)subscribe, at disconnect and at shutdown, and for
  outbound QoS 2 exactly-once across SIGKILL: by ``pump`` before QoS 2
  PUBLISHes from the queue go out, and by the connection before PUBRELs go
  out (once per wake-up / read, never per message). ``restore`` keeps the
  record's QoS 2 flows even when the periodic consumer offset is newer.
"""

from __future__ import annotations

import logging
from collections import deque
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import trio

from core.broker import PullStatus
from core.trace import DeliveryOutcome
from gateway.limits import QueueOverflow
from gateway.mapping import P_CLIENT, Outbound, now_ms, outbound_from_publish, session_queue_name
from gateway.mqtt import (NO_REF, NOT_FOUND, InboundFlows, OutboundFlows, OutboundStage, PacketTooLarge, PubAck,
                          PublishTemplate, PubRec, PubRel)
from gateway.publish_output import SessionState
from gateway.wildcard import TopicFilter, parse_filter, topic_matches

if TYPE_CHECKING:
    from gateway.app import MQTTGateway

log = logging.getLogger("mqgate.gateway")
REF_SHIFT = 40
REF_MASK = (1 << REF_SHIFT) - 1


class MessageUnavailable(Exception):
    """A message in flight is still stored but cannot be read now (its broker
    group did not answer): not the same as gone."""


class SubOptions(NamedTuple):
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    sub_id: int | None = None

    def to_list(self) -> list:
        return [self.qos, self.no_local, self.retain_as_published, self.retain_handling, self.sub_id]


class Delivery(NamedTuple):
    """One message waiting to go to one session."""

    out: Outbound
    qos: int
    retain: bool
    sub_ids: tuple
    group: str | None = None  # the $share filter it came through, for redispatch


# A delivery the router's QoS 1/2 fast path started, as ``Session.mem`` keeps it:
# a plain tuple (publish, MQTT topic, stored message, QoS, retain flag,
# subscription ids, $share group): the publishing client and the publish time
# are read from the stored message (``P_CLIENT``, ``born_timestamp``) only if
# anyone asks; ``delivery_of`` builds the ``Outbound`` and the ``Delivery``.
InMemory = tuple


def delivery_of(entry: Delivery | InMemory) -> Delivery:
    """The ``Delivery`` an entry of ``Session.mem`` stands for."""
    if entry.__class__ is Delivery:
        return entry
    pub, topic, msg, qos, retain, sub_ids, group = entry
    out = outbound_from_publish(pub, topic, msg.properties.get(P_CLIENT), msg.born_timestamp)
    return Delivery(out, qos, retain, sub_ids, group)


def inbound_window(version: int, receive_maximum: int) -> int:
    """How many unacknowledged QoS 1/2 publishes a client may have in flight.

    Only MQTT 5 has a Receive Maximum (we announce ours in CONNACK); a 3.1.1
    client has no flow control and may use every packet identifier.
    """
    return receive_maximum if version >= 5 else 65535


_NO_ITEMS: tuple = ()
# The subscriptions, refs or in-memory flows of a session with none (most of
# them, most of the time): read-only and shared, a dict of its own at the first.
_NONE: Any = MappingProxyType({})


class Pending:
    """In-memory deliveries waiting for the window, with their payload bytes.
    ``items`` is a shared empty tuple until the first append: most sessions
    never wait for the window, and an empty deque costs ~600 bytes."""

    __slots__ = ("items", "bytes")

    def __init__(self) -> None:
        self.items: deque[Delivery] | tuple = _NO_ITEMS
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def append(self, d: Delivery) -> None:
        items = self.items
        if items is _NO_ITEMS:
            items = self.items = deque()
        items.append(d)
        self.bytes += len(d.out.payload)

    def extend(self, ds) -> None:
        for d in ds:
            self.append(d)

    def popleft(self) -> Delivery:
        d = self.items.popleft()
        self.bytes -= len(d.out.payload)
        return d

    def clear(self) -> None:
        self.items = _NO_ITEMS
        self.bytes = 0


class Session(SessionState):
    # (conn, pending, flows, refs, mem: SessionState's, which the router's fast path reads per message:
    # gateway.publish_output)
    __slots__ = ("gw", "client_id", "version", "expiry", "queue", "subs", "inbound",
                 "next_read", "due", "expiry_scope", "will_scope", "pending_will", "dropped",
                 "ended", "node", "record")

    def __init__(self, gw: MQTTGateway, client_id: str, *, expiry: int, version: int) -> None:
        self.gw = gw
        self.client_id = client_id
        self.version = version
        self.expiry = expiry
        self.queue: str | None = session_queue_name(client_id) if expiry > 0 else None
        self.subs: dict[str, tuple[TopicFilter, SubOptions]] = _NONE
        self.flows = OutboundFlows(gw.settings.limits.max_inflight_messages)
        self.inbound = InboundFlows(inbound_window(version, gw.settings.limits.max_inflight_messages))
        self.refs: dict[int, object] = _NONE  # packet id -> ref (see module docstring)
        self.mem: dict[int, Delivery | InMemory] = _NONE  # packet id -> in-memory delivery in flight
        self.pending = Pending()
        self.next_read = [0]  # per queue id (module docstring)
        self.conn = None  # the Connection while connected
        self.due = True  # pump has work (see notify)
        self.expiry_scope: trio.CancelScope | None = None
        self.will_scope: trio.CancelScope | None = None
        self.pending_will = None  # a will waiting for its delay
        self.dropped = 0
        self.ended = False
        self.node: str | None = None  # another gateway node's id: a stub (gateway.cluster)
        self.record: dict | None = None  # a stub's last record
        if self.queue is not None:
            self.next_read = [gw.backend.max_offset(self.queue, i) for i in gw.backend.queue_ids(self.queue)]

    # ---- state --------------------------------------------------------------

    @property
    def persistent(self) -> bool:
        return self.queue is not None

    @property
    def connected_somewhere(self) -> bool:
        """Connected here, or (a stub) on its node: a non-persistent stub
        exists only while connected, a persistent one says so in its record."""
        if self.conn is not None:
            return True
        return self.node is not None and (self.queue is None or (self.record or {}).get("gone") is None)

    def notify(self) -> None:
        self.due = True
        conn = self.conn
        if conn is not None:
            conn.wake()

    def subscribe(self, text: str, options: SubOptions) -> bool:
        """Record a subscription (the caller adds it to the trie); True if new."""
        new = text not in self.subs
        if self.subs is _NONE:
            self.subs = {}
        self.subs[text] = (parse_filter(text), options)
        return new

    def unsubscribe(self, text: str) -> bool:
        """Forget a subscription (the caller removes it from the trie); True if it existed.
        The last one gone, the session holds no dict again: a dict keeps the
        table of its largest size (a topic flood's, tests/faults/topic_memory.py)."""
        subs = self.subs
        if not subs or subs.pop(text, None) is None:
            return False
        if not subs:
            self.subs = _NONE
        return True

    def track(self, packet_id: int, ref, d: Delivery | InMemory) -> None:
        """A QoS 1/2 delivery has started with ``packet_id`` (see ``refs``, ``mem``)."""
        if self.refs is _NONE:
            self.refs = {}
        self.refs[packet_id] = ref
        if type(ref) is not int:
            if self.mem is _NONE:
                self.mem = {}
            self.mem[packet_id] = d

    def untrack(self, packet_id: int) -> None:
        """The flow of ``packet_id`` is over."""
        if self.refs:
            self.refs.pop(packet_id, None)
        if self.mem:
            self.mem.pop(packet_id, None)

    def forget_in_memory(self) -> list[Delivery]:
        """Take every in-memory delivery, in flight or waiting (the session ends)."""
        waiting = [*map(delivery_of, self.mem.values()), *self.pending]
        self.mem = _NONE
        self.pending.clear()
        return waiting

    def committed(self) -> list[int]:
        """The committed offset of each queue id."""
        lows = list(self.next_read)
        for ref in self.refs.values():
            if type(ref) is int:
                qid, off = ref >> REF_SHIFT, ref & REF_MASK
                if qid < len(lows) and off < lows[qid]:
                    lows[qid] = off
        return lows

    def commit(self) -> None:
        if self.queue is not None:
            for qid, off in enumerate(self.committed()):
                self.gw.backend.commit_offset(self.queue, self.queue, qid, off)

    def to_record(self, *, gone: int | None) -> dict:
        flows = self.flows.to_state()
        flows["flows"] = [f for f in flows["flows"] if f[3] is not None]
        committed = self.committed()
        rec = {
            "v": self.version, "exp": self.expiry, "next": self.next_read[0], "off": committed[0],
            "subs": {text: opts.to_list() for text, (_, opts) in self.subs.items()},
            "flows": flows, "gone": gone, "node": self.gw.node_id,
        }
        if len(committed) > 1:  # every queue id's (one broker group each)
            rec["nexts"], rec["offs"] = list(self.next_read), committed
        return rec

    def restore(self, rec: dict) -> None:
        """Rebuild from a ``"sess"`` record after a restart (subscriptions are
        re-added to the trie by the caller)."""
        for text, opts in rec.get("subs", {}).items():
            self.subscribe(text, SubOptions(*opts))
        backend, queue = self.gw.backend, self.queue
        ids = backend.queue_ids(queue)
        nexts = list(rec.get("nexts") or [rec.get("next", 0)])[:len(ids)]
        offs = list(rec.get("offs") or [rec.get("off", 0)])[:len(ids)]
        nexts += [0] * (len(ids) - len(nexts))  # a broker group newer than the record: all of its queue
        offs += [0] * (len(ids) - len(offs))
        self.next_read = [max(n, o) for n, o in zip(nexts, offs)]
        # Acknowledgements after the record (SIGKILL; the consumer offset is
        # persisted periodically). Nothing at or past the record's ``next``
        # went out at QoS 2 (pump writes a record first), so reading resumes
        # at the committed offset; QoS 2 flows are kept (same packet id,
        # DUP or PUBREL), QoS 1 flows below it were acknowledged.
        later = [None] * len(ids)  # per queue id: its committed offset when newer than the record's
        for i in ids:
            committed = backend.query_offset(queue, queue, i)
            if committed is not None and committed > offs[i]:
                later[i] = committed
                self.next_read[i] = max(self.next_read[i], committed)
        state = rec["flows"]
        if any(c is not None for c in later):
            def acked(ref) -> bool:
                qid = ref >> REF_SHIFT
                return qid < len(later) and later[qid] is not None and ref & REF_MASK < later[qid]
            state = dict(state, flows=[f for f in state["flows"]
                                       if f[1] == 2 or type(f[3]) is not int or not acked(f[3])])
        self.flows = OutboundFlows.from_state(state)
        # Flows past PUBREC no longer hold the committed offset back.
        self.refs = {pid: (None if q == 2 and st != OutboundStage.AWAIT_PUBREC and type(ref) is int else ref)
                     for pid, q, st, ref in state["flows"]} or _NONE
        self.next_read = [max(n, backend.min_offset(queue, i)) for i, n in zip(ids, self.next_read)]

    # ---- queue limits ---------------------------------------------------------

    def admit(self) -> bool:
        """Called by the router before a message joins this session's queue.

        False: drop the new message (dropNew); True: queue it (after cutting
        the oldest queued one if the queue is full, dropOldest)."""
        limit = self.gw.settings.limits.max_queued_messages
        if not limit or self.node is not None:  # a stub: its own node applies the limit when reading
            return True
        backend, queue, nexts = self.gw.backend, self.queue, self.next_read
        if len(nexts) == 1:  # one queue id (in process): no generator per routed message
            waiting = backend.max_offset(queue, 0) - nexts[0]
        else:
            waiting = sum(backend.max_offset(queue, i) - n for i, n in enumerate(nexts))
        if waiting < limit:
            return True
        if self.cut():
            return False
        for i, n in enumerate(nexts):  # dropOldest: one waiting entry of the first queue id with any
            if backend.max_offset(queue, i) > n:
                nexts[i] = n + 1
                break
        return True

    def cut(self) -> bool:
        """Count one overflow; True when the policy drops the new message."""
        self.dropped += 1
        self.gw.stats.dropped += 1
        return self.gw.settings.limits.queue_overflow is QueueOverflow.DROP_NEW

    def enqueue(self, delivery: Delivery) -> None:
        """An in-memory delivery (clean session, retained, $SYS)."""
        pending = self.pending
        conn = self.conn
        # ``pending.items``, not ``pending``: its ``__len__`` is a Python call, and this runs per delivery
        if not pending.items and conn is not None and conn.live and (not delivery.qos or self.flows.available()):
            conn.deliver(self, delivery, ref=delivery.out.ref)
            return
        if pending.items and pending.bytes + conn_bytes(conn) >= self.gw.settings.session.max_outbound_bytes:
            if self.cut():
                if self.gw.tracer is not None:
                    self.gw.tracer.ended(self.client_id, delivery.out, delivery.qos, DeliveryOutcome.DROPPED)
                return
            pending.popleft()
        pending.append(delivery)
        self.notify()

    # ---- delivery -------------------------------------------------------------

    def match(self, out: Outbound) -> tuple[int, bool, tuple] | None:
        """(qos, retain flag, subscription ids) for a queued message, or None
        if no subscription of this session matches it any more."""
        qos = -1
        retain = False
        ids = []
        topic = out.topic
        for flt, opts in self.subs.values():
            if not topic_matches(flt, topic):
                continue
            if opts.no_local and out.client_id == self.client_id and flt.group is None:
                continue
            qos = max(qos, min(opts.qos, out.qos))
            retain = retain or (opts.retain_as_published and out.retain)
            if opts.sub_id is not None:
                ids.append(opts.sub_id)
        if qos < 0:
            return None
        return qos, retain, tuple(ids)

    async def pump(self, conn) -> None:
        """Move what the window allows from ``pending`` and the queue to ``conn``."""
        flows = self.flows
        pending = self.pending
        while pending.items and conn.can_send:
            d = pending.items[0]
            if d.qos and not flows.available():
                break
            pending.popleft()
            conn.deliver(self, d, ref=d.out.ref)
        if self.queue is None:
            return
        broker = self.gw.backend
        cache = self.gw.router.decoded
        qos2 = False  # a QoS 2 PUBLISH from the queue was started: write the record first
        for qid in range(len(self.next_read)):
            nexts, base = self.next_read, qid << REF_SHIFT
            while flows.available() and conn.can_send:
                end = broker.max_offset(self.queue, qid)
                start = nexts[qid]
                if start >= end:
                    break
                result = await broker.read_queue(self.queue, qid, start, min(64, max(8, flows.available() * 2)))
                if not conn.can_send or self.conn is not conn:
                    if qos2:
                        await self.gw.save_session(self)
                    return
                if result.status is not PullStatus.FOUND:
                    nxt = result.next_begin_offset
                    if result.status is PullStatus.PULL_OFFSET_MOVED and result.min_offset > start:
                        nxt = result.min_offset  # retention removed the oldest entries
                    if nxt <= start:
                        break
                    nexts[qid] = max(nexts[qid], nxt)
                    continue
                stop = False
                for raw, qoff in zip(result.entries, result.queue_offsets):
                    if qoff < nexts[qid]:
                        continue  # cut by dropOldest while we were reading
                    out = cache(raw)
                    m = None if out is None else self.match(out)
                    if m is None:
                        nexts[qid] = qoff + 1
                        continue
                    qos, retain, ids = m
                    if qos and not flows.available():
                        stop = True
                        break
                    nexts[qid] = qoff + 1
                    conn.deliver(self, Delivery(out, qos, retain, ids), ref=base | qoff)
                    if qos == 2:
                        qos2 = True
                if stop:
                    break
                nexts[qid] = max(nexts[qid], result.next_begin_offset)
        self.commit()
        if qos2:
            # Packet id <-> queue offset durable before the PUBLISHes go out (the
            # writer sends after pump): after a restart the same message is
            # resent with the same packet id and DUP. One record per wake-up.
            await self.gw.save_session(self)

    def on_acks(self, events: list, conn) -> None:
        """A run of a read's client acks (PubAck, PubRec, PubComp, ClientAcks), in order:
        one flows call (``OutboundFlows.on_acks``), the PUBRELs in one write,
        one commit and one notify. A protocol error is raised after what the
        acks before it did is done.

        A PUBREL of a flow past PUBREC is held (``conn.hold_pubrels``) when
        the session is persistent: the client frees the packet id on PUBREL,
        so the flow's new stage must be durable first (the connection writes
        one ``"sess"`` record for the read, then sends them). A flow past
        PUBREC no longer holds the committed offset back: the message is
        received, only PUBREL remains."""
        replies: list = []
        done: list = []
        received: list = []
        try:
            self.flows.on_acks(events, replies, done, received)
        finally:
            if replies:
                if self.queue is not None:
                    # the flows past PUBREC durable first (see above)
                    now = [w for w in replies if w & (NO_REF | NOT_FOUND)]
                    if len(now) < len(replies):
                        conn.hold_pubrels([w for w in replies if not w & (NO_REF | NOT_FOUND)])
                    if now:
                        conn.send_acks(now)
                else:
                    conn.send_acks(replies)
            if received:
                refs = self.refs
                for pid in received:
                    refs[pid] = None
            if done:
                # `untrack` of each, inline: a subscriber acknowledges every QoS 1/2 message
                refs, mem = self.refs, self.mem
                if refs:
                    for pid in done:
                        refs.pop(pid, None)
                if mem:
                    for pid in done:
                        mem.pop(pid, None)
                tracer = self.gw.tracer
                if tracer is not None:
                    for pid in done:
                        tracer.acked(self.client_id, pid)
            if done or received:
                self.commit()
            if done:
                self.notify()

    async def redeliver(self, conn) -> None:
        """After a reconnect to an existing session: resend what is in flight."""
        self.flows.receive_maximum = min(conn.mq.peer_receive_maximum,
                                         self.gw.settings.limits.max_inflight_messages)
        for pid, qos, ref, release in self.flows.redeliveries():
            if release:
                conn.send_event(PubRel(packet_id=pid))
                continue
            d = self.mem.get(pid)
            if d is not None:
                d = delivery_of(d)
            else:
                try:
                    out = await self.gw.router.load(ref, self.queue)
                except MessageUnavailable as e:
                    # Ending the flow would lose a message still stored: keep it (and
                    # the rest) for the next connect, and end this one.
                    log.warning("client %s: in-flight message not readable (%s); closing to retry on reconnect",
                                self.client_id, e)
                    conn.kick(0x89)  # Server busy (0x88 is a CONNACK code, not a DISCONNECT one)
                    return
                m = None if out is None else self.match(out)
                if out is None:
                    # Gone from the store (retention): end the flow.
                    self.flows.on_ack(PubAck(packet_id=pid, reason_code=0x80) if qos == 1
                                      else PubRec(packet_id=pid, reason_code=0x80))
                    self.untrack(pid)
                    continue
                d = Delivery(out, qos, m[1] if m else False, m[2] if m else ())
            conn.resend(self, d, pid)

    def drop_connection_state(self) -> None:
        """At disconnect of a session that lives on: forget in-memory waits."""
        self.pending.clear()


def conn_bytes(conn) -> int:
    return 0 if conn is None else conn.out_bytes


def encode_delivery(conn, d: Delivery, packet_id: int | None, dup: bool = False) -> bytes | None:
    """The PUBLISH bytes of one delivery on ``conn`` (None: too large, dropped)."""
    out = d.out
    mq = conn.mq
    version = mq.protocol_version
    remaining = None
    if out.expiry is not None:
        remaining = out.remaining_expiry(now_ms())
    if version == 5:
        key = (5, d.qos, d.retain, d.sub_ids)
        tpl = out.templates.get(key)
        if tpl is None:
            tpl = out.templates[key] = PublishTemplate(
                out.publish(qos=d.qos, retain=d.retain, sub_ids=d.sub_ids, packet_id=1), 5, qos=d.qos, retain=d.retain)
    else:
        key = (4, d.qos, d.retain)
        tpl = out.templates.get(key)
        if tpl is None:  # 3.1.1 reads only topic and payload: no Publish event is built
            tpl = out.templates[key] = PublishTemplate(out, 4, qos=d.qos, retain=d.retain)
    limit = mq.peer_max_packet_size
    if limit is not None and tpl.size + 6 > limit:
        return None
    try:
        if version == 5 and (remaining is not None or mq.peer_topic_alias_maximum):
            pub = out.publish(qos=d.qos, retain=d.retain, sub_ids=d.sub_ids, expiry=remaining,
                              packet_id=packet_id, dup=dup)
            return mq.send(mq.with_topic_alias(pub))
        if d.qos:
            return mq.send_encoded_publish(tpl.render(packet_id, dup))
        return mq.send_encoded_publish(tpl.data)
    except PacketTooLarge:
        return None
