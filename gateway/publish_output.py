"""How a connection queues an outbound PUBLISH, and QoS 0's limits and fast path.

``PublishOutput`` is a part of ``gateway.connection.Connection`` (its base
class): the methods that put an encoded PUBLISH into the connection's
``out`` and count it, and the fields they touch per message (``mq``,
``out``, ``out_bytes``, ``live``, ``closing``, ``_writer_of``,
``_writing``); they use the connection's ``_behind``, ``_room``,
``stream``, ``gw`` and ``wake()`` too. ``SessionState`` is likewise the
base of ``gateway.sessions.Session``. The router calls ``forward_v4`` once
per stored message with in-memory targets: the hot path. Compiled
(``publish_output.pxd``), both bases are extension types and the fast path
reads their fields as C fields (issue 13).

Rules kept here (ARCHITECTURE decision 7; the writer side is
``gateway.connection``'s):

* Every PUBLISH that joins ``out`` is counted in ``$SYS`` (sent, per QoS)
  and in ``out_bytes``, and wakes a writer if nobody will write it.
* QoS 0 messages that arrive while a write is under way wait behind it
  (their indexes in ``out`` are in ``_behind``); once
  ``maxQueuedMessages`` of them wait and the client's socket has no room
  (a slow subscriber, not a busy gateway), ``queueOverflow`` drops the
  oldest waiting one (its bytes blanked in ``out``) or the new one; with
  ``maxOutboundBytes`` waiting, new QoS 0 messages are dropped. Each drop
  is counted (session and ``$SYS``) and traced when a tracer runs.
* The fast paths give the same result as ``deliver`` for what they are
  given: a 3.1.1 message without expiry, no tracer, nothing pending, and
  at QoS 1/2 room in the client's window (``deliver_v4``).
* ``send_acks`` writes a run of acks (ack words, ``gateway.mqtt.qos``) as
  ``send_event`` would write their events one by one, in one write when
  every one is a plain success ack.
"""

from __future__ import annotations

import select
import struct
from collections import deque
from typing import Any

import trio

from core.trace import DeliveryOutcome
from gateway.mqtt import NOT_FOUND, ConnectionState, ack_event, plain_acks

try:
    import cython
except ImportError:  # a pure-Python install: nothing here is compiled
    from gateway.mqtt import _cython_shadow as cython

_CONNECTED = ConnectionState.CONNECTED
_U16 = struct.Struct(">H").pack  # a packet id

# Who writes what ``out`` holds (``Connection._writer_of``).
NOBODY = 0  # a new output starts a writer task
READER = 1  # the reader is acting on a read or writing after it
TASK = 2  # a writer task runs
NO_OUTPUT: Any = ()  # Connection.out while nothing waits (a tuple: appending to it would fail)


class SessionState:
    """The base of ``gateway.sessions.Session``: the fields ``forward_v4``
    reads or replaces per message (an extension type when compiled: C
    fields). It holds no logic: what they mean is ``gateway.sessions``'."""

    __slots__ = ("conn", "pending", "flows", "refs", "mem")


class PublishOutput:
    """Queueing of encoded PUBLISHes on a connection's output (see the module
    docstring): the connection's output state the fast paths touch per
    message (an extension type when compiled, ``publish_output.pxd``: C
    fields), and the methods that queue into it."""

    __slots__ = ("mq", "out", "out_bytes", "live", "closing", "_writer_of", "_writing", "_plain_v4")

    def deliver_qos0_v4(self, sess, data: bytes) -> None:
        """``deliver`` of a QoS 0 message already encoded as a 3.1.1 PUBLISH
        (``encode_publish_v4_qos0``), for the router's fast path: the caller
        has checked that the message has no expiry, that no tracer runs and
        that nothing waits in the session's ``pending``. The same limits and
        counters apply."""
        if self.closing or self.mq.state is not _CONNECTED:
            return
        out = self.out
        if out and not self._writing and self.out_bytes <= self.gw.settings.session.max_outbound_bytes:
            # the common case of a burst, inline: output waits already and no write is under way
            stats = self.gw.stats
            stats.sent += 1
            stats.sent_qos[0] += 1
            out.append(data)
            self.out_bytes += len(data)
            if self._writer_of == NOBODY:
                self.wake()
        elif self._admit_qos0(sess, None):
            self._append_publish(data, 0)

    def plain_v4(self) -> bool:
        """Whether the client is a 3.1/3.1.1 one with no Maximum Packet Size
        (a 3.1.1 CONNECT has none): the fast paths' PUBLISHes are its bytes.
        Known once the connection is live (neither changes after CONNECT),
        and kept then."""
        known = self._plain_v4
        if known < 0:
            mq = self.mq
            known = 1 if mq.protocol_version != 5 and mq.peer_max_packet_size is None else 0
            if self.live:
                self._plain_v4 = known
        return known == 1

    def send_acks(self, words: list, plain: bool = False) -> None:
        """Send the acks ``words`` stands for, in order (see the module
        docstring); ``plain``: the caller knows none has a flag. A client
        whose Maximum Packet Size is under 4 bytes gets none, as
        ``send_event`` drops an ack too large for it."""
        mq = self.mq
        if mq.state is _CONNECTED:
            if not plain:
                for w in words:
                    if w & NOT_FOUND:
                        break
                else:
                    plain = True
            if plain:
                limit = mq.peer_max_packet_size
                if limit is None or limit >= 4:
                    self.write(plain_acks(words))
                return
        for w in words:
            self.send_event(ack_event(w))

    def _admit_qos0(self, sess, out) -> bool:
        """Whether a QoS 0 PUBLISH may join the output; False: dropped and
        counted (``maxOutboundBytes``, or the queue limit behind a write)."""
        gw = self.gw
        if self.out_bytes > gw.settings.session.max_outbound_bytes:
            gw.stats.dropped += 1
            sess.dropped += 1
        elif self._writing and not self._behind_write(sess):
            pass
        else:
            return True
        if gw.tracer is not None:
            gw.tracer.ended(sess.client_id, out, 0, DeliveryOutcome.DROPPED)
        return False

    def _append_publish(self, data: bytes, qos: int) -> None:
        stats = self.gw.stats
        stats.sent += 1
        stats.sent_qos[qos] += 1
        if self.out is NO_OUTPUT:
            self.out = []
        if not qos and self._writing:
            self._behind.append(len(self.out))
        self.out.append(data)
        self.out_bytes += len(data)
        self.wake()

    def _behind_write(self, sess) -> bool:
        """A QoS 0 PUBLISH is about to wait behind a write under way: False if
        the queue limit drops it (dropNew), else it may wait (room was made
        by dropOldest if needed). The limit holds only while the client's
        socket has no room: a write that is merely not finished (this task
        has not run again yet) is no slow subscriber."""
        behind = self._behind
        if behind is None:
            behind = self._behind = deque()
        limit = self.gw.settings.limits.max_queued_messages
        if not limit or len(behind) < limit:
            return True
        if self._room is None:  # asked once per write
            self._room = socket_has_room(self.stream)
        if self._room:
            return True
        if sess.cut():
            return False
        i = behind.popleft()
        self.out_bytes -= len(self.out[i])
        self.out[i] = b""
        return True


def forward_v4(heads: dict | None, head_of, topic: str, targets, pub, msg, stats):
    """The router's fast path (``Router.stored_hook``) for one stored message
    ``pub`` (a ``Publish`` with no expiry, no tracer running) to ``targets``
    (the route's ``(session, qos, retain as published, sub ids, group)``):
    each target that ``Session.enqueue`` would put straight into a live
    3.1.1 connection's output (nothing pending, at QoS 1/2 room in its
    window) gets the bytes ``deliver`` would send, tracked and counted as
    ``deliver`` does. Answers the targets left to the general path (a 5.0
    or size-limited client, something pending, a full window), or None.

    The bytes are ``publish_v4_head`` (``heads``: the topic's kept heads,
    keyed by payload length << 3 | QoS << 1 | retain; ``head_of(topic,
    key)`` makes and keeps a missing one) + the packet id the flows give
    (``OutboundFlows.start``) + the payload (``with_packet_id``). A QoS
    1/2 forward's ``mem`` entry is an ``InMemory`` tuple (gateway.sessions:
    the publish, its topic, the stored message ``msg``, QoS, retain flag,
    sub ids, group). A target not connected is skipped; a closing
    connection takes nothing (as ``deliver``: the message stays unsent)
    unless its window is full."""
    payload = pub.payload
    if type(payload) is not bytes:  # (the decoder's are bytes) the general path copes with any buffer
        return targets
    rest = None
    key = -1  # of the head last used
    size = len(payload) << 3
    pub_qos = pub.qos
    pub_retain = pub.retain
    head = data = None
    sent = sent1 = sent2 = 0
    for t in targets:
        sess = t[0]
        c = sess.conn
        if c is None:
            continue
        plain = c._plain_v4  # `c.plain_v4()`, inline
        if plain < 0 and c.live:
            plain = 1 if c.plain_v4() else 0
        if sess.pending.items or not c.live or plain != 1:
            if rest is None:
                rest = []
            rest.append(t)
            continue
        qos = t[1]
        if qos > pub_qos:
            qos = pub_qos
        retain = 1 if (t[2] and pub_retain) else 0
        k = size | qos << 1 | retain
        if k != key:
            key = k
            head = None
            if heads is not None:
                kept = heads  # (typed: one C lookup)
                head = kept.get(k)
            if head is None:
                head = head_of(topic, k)
                heads = None
            if not qos:
                data = head + payload
        if not qos:
            c.deliver_qos0_v4(sess, data)
            continue
        flows = sess.flows
        if c.closing or c.mq.state is not _CONNECTED:
            # as `deliver`: a message reaching a closing connection stays unsent
            if len(flows) >= flows.receive_maximum:
                if rest is None:
                    rest = []
                rest.append(t)
            continue
        pid = _start(flows, qos)
        if not pid:
            if rest is None:  # the client's window is full: the general path queues it
                rest = []
            rest.append(t)
            continue
        # `sess.track(pid, None, entry)`, inline (its shared empty mappings replaced at the first flow)
        refs = sess.refs
        if type(refs) is not dict:  # (`type`, not `__class__`: compiled, no attribute read)
            refs = sess.refs = {}
        mem = sess.mem
        if type(mem) is not dict:
            mem = sess.mem = {}
        ref_map = refs
        mem_map = mem
        ref_map[pid] = None
        mem_map[pid] = (pub, topic, msg, qos, bool(retain), t[3], t[4])
        data = with_packet_id(head, pid, payload)
        sent += 1
        if qos == 1:
            sent1 += 1
        else:
            sent2 += 1
        out = c.out
        if out is NO_OUTPUT:
            c.out = [data]
        else:
            out.append(data)
        c.out_bytes += len(data)
        if c._writer_of == NOBODY:
            c.wake()
    if sent:
        stats.sent += sent
        by_qos = stats.sent_qos
        if sent1:
            by_qos[1] += sent1
        if sent2:
            by_qos[2] += sent2
    return rest


def _start(flows, qos: int) -> int:
    """``flows.start(qos, None)`` if the client's window has room, else 0:
    compiled, through ``OutboundFlows``' C fields and C ``start`` (the
    kernels run compiled together or not at all: core/_kernels.py)."""
    if cython.compiled:
        typed = cython.cast(OutboundFlows, flows, typecheck=True)
        if len(typed) >= typed.receive_maximum:
            return 0
        return typed.start(qos, None)
    if len(flows) >= flows.receive_maximum:  # `flows.available()`, without a method call
        return 0
    return flows.start(qos, None)


def with_packet_id(head: bytes, packet_id: int, payload: bytes) -> bytes:
    """A 3.1.1 PUBLISH: its head (``publish_v4_head``), ``packet_id`` (1..65535), the payload."""
    if packet_id < 1 or packet_id > 0xFFFF:  # compiled, the two bytes below would keep its low 16 bits
        raise ValueError(f"packet id {packet_id} is outside 1..65535")
    if cython.compiled:  # one bytes, written in place (a C call from forward_v4)
        n_head = len(head)
        n_payload = len(payload)
        data = PyBytes_FromStringAndSize(cython.NULL, n_head + 2 + n_payload)
        at = PyBytes_AS_STRING(data)
        memcpy(at, PyBytes_AS_STRING(head), n_head)
        at[n_head] = packet_id >> 8
        at[n_head + 1] = packet_id & 0xFF
        memcpy(at + n_head + 2, PyBytes_AS_STRING(payload), n_payload)
        return data
    return b"".join((head, _U16(packet_id), payload))


def socket_has_room(stream: trio.abc.Stream) -> bool:
    """Whether the kernel would take more output on the TCP socket under
    ``stream`` now (TLS and WebSocket streams wrap one). False when there is
    no socket to ask (memory streams)."""
    while not isinstance(stream, trio.SocketStream):
        stream = getattr(stream, "transport_stream", None) or getattr(stream, "transport", None)
        if stream is None:
            return False
    try:
        poll = select.poll()
        poll.register(stream.socket.fileno(), select.POLLOUT)
        return bool(poll.poll(0))
    except (OSError, ValueError):  # closed meanwhile: the write fails on its own
        return False
