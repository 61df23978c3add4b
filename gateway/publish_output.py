"""How a connection queues an outbound PUBLISH, and QoS 0's limits and fast path.

``PublishOutput`` is a part of ``gateway.connection.Connection`` (its base
class): the methods that put an encoded PUBLISH into the connection's
``out`` and count it. It keeps no state of its own; it uses the
connection's ``out``, ``out_bytes``, ``_writing``, ``_behind``, ``_room``,
``_writer_of``, ``closing``, ``mq``, ``stream``, ``gw`` and ``wake()``. The
router calls ``deliver_qos0_v4`` once per subscriber of a fanned-out QoS 0
message: the hot path, kept as plain attribute access on one object.

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

_CONNECTED = ConnectionState.CONNECTED
_U16 = struct.Struct(">H").pack  # a packet id

# Who writes what ``out`` holds (``Connection._writer_of``).
NOBODY = 0  # a new output starts a writer task
READER = 1  # the reader is acting on a read or writing after it
TASK = 2  # a writer task runs
NO_OUTPUT: Any = ()  # Connection.out while nothing waits (a tuple: appending to it would fail)


class PublishOutput:
    """Queueing of encoded PUBLISHes on a connection's output (see the module docstring)."""

    __slots__ = ()

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

    def deliver_v4(self, sess, qos: int, head: bytes, payload: bytes, entry: tuple) -> bool:
        """``deliver`` of a QoS 1/2 message as a 3.1.1 PUBLISH, for the
        router's fast path: ``head`` is ``publish_v4_head`` of its topic,
        payload length, ``qos`` and retain flag; ``entry`` what ``sess.mem``
        keeps of it (``gateway.sessions.InMemory``). The caller has checked
        what ``deliver_qos0_v4``'s has. False, with nothing done, when the
        client's window is full (the caller queues the message); else the
        same flow, tracking and counters as ``deliver``."""
        flows = sess.flows
        if len(flows) >= flows.receive_maximum:  # `flows.available()`, without a method call
            return False
        if self.closing or self.mq.state is not _CONNECTED:
            return True  # as `deliver`: a message reaching a closing connection stays unsent
        pid = flows.start(qos, None)
        # `sess.track(pid, None, entry)`, inline (its shared empty mappings replaced at the first flow)
        refs, mem = sess.refs, sess.mem
        if refs.__class__ is not dict:
            refs = sess.refs = {}
        if mem.__class__ is not dict:
            mem = sess.mem = {}
        refs[pid] = None
        mem[pid] = entry
        data = b"".join((head, _U16(pid), payload))
        stats = self.gw.stats
        stats.sent += 1
        stats.sent_qos[qos] += 1
        if self.out is NO_OUTPUT:
            self.out = [data]
        else:
            self.out.append(data)
        self.out_bytes += len(data)
        if self._writer_of == NOBODY:
            self.wake()
        return True

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
