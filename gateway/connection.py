"""One MQTT network connection: read, decode, act, write.

Rules kept here (ARCHITECTURE decisions 6 and 7):

* One task per connection, the reader: it owns the codec's input side and
  every decision, and it writes what acting on a read produced (acks,
  CONNACK, what the session's ``pump`` moves out of its queue) itself,
  with one write at the end of the read (non-blocking on a plain TCP
  socket, then ``send_all`` for what the kernel did not take: the client's
  reads wait for that, so a client that does not read its acks is not read
  either). Output from elsewhere (a
  delivery routed by another client's read, a takeover's DISCONNECT, a
  ``notify``) is appended to ``out``; if neither the reader nor a writer
  will write it, it is written when the trio step that queued it ends
  (``gateway.step_writes``: one non-blocking write on a plain TCP socket,
  no task), and only what that cannot write (the socket pushed back, TLS,
  WebSocket, a due ``pump``) starts a writer task in the gateway's nursery,
  which writes everything queued (running ``pump`` when due) and ends when
  ``out`` is empty. So an idle connection holds its reader and nothing
  else; one writer at a time writes, in ``out`` order.
* A write blocks only the writer of this connection (a slow client slows
  its own reads, never others'); every write is bounded by
  ``writeTimeout``, then the connection is dropped. QoS 0 messages that
  arrive while a write is under way wait behind it, within the limits
  ``gateway.publish_output`` keeps (``maxQueuedMessages``,
  ``queueOverflow``, ``maxOutboundBytes``: drops are counted).
* Every complete packet of a read is decoded and acted on (gateway/packets.py) before the next
  read. Consecutive PUBLISHes are stored with one ``send_many`` (one flush
  wait, SYNC_FLUSH); their acks go out in arrival order. Any other packet
  (except client acks and PINGREQ) first finishes the publishes before it,
  so a SUBSCRIBE never overtakes an earlier PUBLISH. The client's acks
  and PUBRELs are acted on in runs, in arrival order (one call and one
  write per run, ``_acks``); a PUBREL after PUBLISHes of the same read
  finishes them first. Across connections,
  the publishes of a read are routed after one checkpoint: packets read in
  the same wake-up of the loop (trio runs those readers in random order)
  have been acted on first, so a SUBSCRIBE that arrived before another
  client's PUBLISH is in force for it. A plain TCP read whose socket was
  the only one of its poll in the gateway's epoll (``woken_alone``) skips
  that checkpoint when no reader acts outside that epoll's wake-ups
  (``MQTTGateway.unpolled_readers``: a TLS or WebSocket connection, whose
  reader may act one loop pass after its wake-up, a TLS record already
  decrypted or input already there each costing trio a step; a plain one
  whose first read, taken at once, may carry CONNECT and SUBSCRIBE), its
  connection is not closing, and sends do not wait (SYNC_FLUSH,
  SYNC_MASTER, gateway nodes). No other plain reader woke with it, and a
  plain reader past its CONNECT acts on its input in the step that reads
  it.
* A hot plain connection (its last read was acted on less than
  ``HOT_GAP_S`` after the one before) waits in trio's own epoll (``Readiness.wait_hot``), at most
  ``HOT_LIMIT`` at a time: its read runs in the pass that finds its input,
  not one pass after the watcher's. It skips the checkpoint only when that
  I/O wait woke no other task and no reader woken earlier is still to act;
  otherwise it steps once more first, and is then ordered as a reader the
  watcher woke. A pass of trio's loop with one task step costs about
  30,000 instructions; a single-message read from a hot connection about
  250,000, from one waiting through the watcher about 300,000
  (docs/PERFORMANCE.md, round 12).
* A PUBCOMP is released only after the inbound QoS 2 state that forgets
  its packet id is durable (persistent sessions), and a PUBREL only after
  the session state with that outbound flow past PUBREC is durable (one
  ``"sess"`` record per read), so exactly-once holds across a restart.
* A protocol violation ends only this connection: a 5.0 client gets a
  CONNACK or DISCONNECT with the reason code, a 3.1.1 client is closed. It
  is logged once, at INFO. A connection the server ends (protocol error,
  takeover, keepalive) is half-closed and drained for up to ``LINGER`` s
  rather than closed with unread input, which would reset it and could
  lose the DISCONNECT that says why. Nothing is sent after the client's
  own DISCONNECT, even for packets read with it.
* Keepalive: no packet for 1.5 x keepalive closes the connection (5.0:
  DISCONNECT 0x8D); a read notes when it ended (``read_at``) and the
  gateway's one keepalive task (``gateway.keepalive``) looks at it when its
  deadline comes, so a read moves no deadline. Waiting for CONNECT is
  bounded by ``connectTimeout``, writes by ``writeTimeout``.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import trio

from core.trace import DeliveryOutcome
from gateway.mapping import now_ms
from gateway.meta import record
from gateway.mqtt import ConnectionState, Disconnect, InboundStage, MQTTConnection, ReasonCode, RemoteProtocolError
from gateway.publish_output import NO_OUTPUT, NOBODY, READER, TASK, PublishOutput
from gateway.packets import handle
from gateway.quota import PublishQuota
from gateway.sessions import Delivery, encode_delivery
from gateway.step_writes import QUEUED, write_collected, write_out
from gateway.readiness import HOT_GAP_S
from gateway.socket_reads import STREAM_ERRORS, linger, read_now, recv, recv_plain

if TYPE_CHECKING:
    from gateway.app import MQTTGateway

log = logging.getLogger("mqgate.gateway")
R = ReasonCode
_CONNECTED = ConnectionState.CONNECTED
_CLOSED = ConnectionState.CLOSED




class Connection(PublishOutput):
    # (mq, out, out_bytes, live, closing, _writer_of, _writing: PublishOutput's, the state its fast paths touch)
    __slots__ = ("gw", "stream", "info", "_held", "_held_rel", "session",
                 "client_id", "username", "acl", "keepalive", "will", "taken_over", "server_stopping",
                 "takeover_ends_session", "_done", "_finished", "peer_closed", "_reader_scope", "_nursery",
                 "_acting", "_behind", "_room", "_writer_done", "auth", "quota", "_leave", "woken_alone",
                 "read_at", "_keepalive_entry")

    def __init__(self, gw: MQTTGateway, stream: trio.abc.Stream, info, nursery: trio.Nursery, leave=None) -> None:
        """``nursery`` runs the writer task when one is needed; ``leave``: the
        listener's callback when ``run`` is the listener's task itself (plain TCP)."""
        self.gw = gw
        self.stream = stream
        self.info = info
        lim = gw.settings.limits
        self.mq = MQTTConnection(max_packet_size=lim.max_packet_size, topic_alias_maximum=lim.max_topic_alias,
                                 ack_words=True)
        self.out: list[bytes] = NO_OUTPUT  # a list of its own while output waits
        self.out_bytes = 0
        self.live = False  # CONNACK and redelivery done: new messages may go out
        self._plain_v4 = -1  # see PublishOutput.plain_v4: not known yet
        self._held: list | None = None  # PUBCOMP words waiting for an "in2" record (see _handle)
        self._held_rel: list | None = None  # outbound PUBREL words waiting for a "sess" record
        self.closing = False
        self.session = None
        self.client_id: str | None = None
        self.username: str | None = None
        self.acl = None
        self.keepalive = 0
        self.will = None
        self.taken_over = False
        self.server_stopping = False
        self.takeover_ends_session = False
        self._done: trio.Event | None = None  # made when someone waits (a takeover)
        self._finished = False
        self.peer_closed = False  # the client sent DISCONNECT or closed its side
        self._reader_scope: trio.CancelScope | None = None
        self._nursery = nursery
        self._acting = False  # the reader is acting on a read (it writes after it)
        self._writer_of = NOBODY
        self._writing = False  # a send_all is under way
        self._behind = None  # deque: indexes in ``out`` of QoS 0 PUBLISHes waiting behind a write
        self._room: bool | None = None  # whether the socket had room during this write (asked when needed)
        self._writer_done: trio.Event | None = None  # made when the end of the connection waits for the writer
        self.auth = None  # connecting.PendingAuth while an enhanced authentication exchange is under way
        self.quota = PublishQuota(lim.max_publish_rate) if lim.max_publish_rate else None
        self._leave = leave
        # Counted from here, the step that starts the connection (the accept loop's), until
        # its reads come through the gateway's epoll (``run``): see MQTTGateway.unpolled_readers.
        gw.unpolled_readers += 1
        # the last read's wake-up woke no other reader (gateway/readiness.py): its
        # publishes need no checkpoint before they are routed (publishing.publish_batch)
        self.woken_alone = False
        self.read_at = 0.0  # trio's clock when the last read was acted on (keepalive > 0: gateway.keepalive)
        self._keepalive_entry: list | None = None

    @property
    def done(self) -> trio.Event:
        """Set once the connection's clean-up (``connection_closed``) is over."""
        if self._done is None:
            self._done = trio.Event()
            if self._finished:
                self._done.set()
        return self._done

    @property
    def version(self) -> int:
        return self.mq.protocol_version or 4

    @property
    def can_send(self) -> bool:
        """Whether a PUBLISH may still go out: not closing, and the codec has not
        seen the client's DISCONNECT (after it, the client reads nothing more)."""
        return not self.closing and self.mq.state is _CONNECTED

    # ---- output -------------------------------------------------------------------

    def wake(self) -> None:
        """Output is queued, or the session's pump is due: see that someone
        writes: at the end of the trio step that woke it (gateway.step_writes),
        or by a writer task where the gateway runs without that."""
        if self._writer_of == NOBODY and not self._acting and not self.closing:
            woken = self.gw.woken
            if woken is not None:
                self._writer_of = QUEUED
                woken.append(self)
            else:
                self.start_writer()

    def start_writer(self) -> None:
        self._writer_of = TASK
        self._nursery.start_soon(self._writer)

    def write(self, data: bytes) -> None:
        if data:
            if self.out is NO_OUTPUT:
                self.out = []
            self.out.append(data)
            self.out_bytes += len(data)
            self.wake()

    def send_event(self, event) -> None:
        if self.mq.state is _CLOSED:
            # The client's DISCONNECT (or EOF) was decoded in the same read as the
            # packets being answered: it reads nothing more (MQTT-3.14.4-1).
            return
        try:
            self.write(self.mq.send(event))
        except Exception as e:  # PacketTooLarge for an ack is already shrunk; anything else is a bug
            if type(e).__name__ == "PacketTooLarge":
                return
            raise

    def hold_pubrels(self, words: list) -> None:
        """Send these PUBRELs (ack words) once this read's ``"sess"`` record is
        written (see _handle)."""
        if self._held_rel is None:
            self._held_rel = words
        else:
            self._held_rel += words

    def deliver(self, sess, d: Delivery, ref=None) -> None:
        """Send one message of ``sess`` (called by the session's pump)."""
        gw = self.gw
        out = d.out
        if not self.can_send:
            return  # callers check can_send first; a message reaching here stays unsent
        if out.expiry is not None and out.remaining_expiry(now_ms()) <= 0:
            gw.router.count_expired(out)
            if gw.tracer is not None:
                gw.tracer.ended(sess.client_id, out, d.qos, DeliveryOutcome.EXPIRED)
            return
        if not d.qos and not self._admit_qos0(sess, out):
            return
        pid = None
        if d.qos:
            pid = sess.flows.start(d.qos, ref if (ref is None or type(ref) is int or isinstance(ref, list)) else None)
            sess.track(pid, ref, d)
        data = encode_delivery(self, d, pid)
        if data is None:
            gw.stats.dropped += 1
            log.info("client %s: a message on %r is larger than its Maximum Packet Size, dropped",
                     self.client_id, out.topic)
            if pid is not None:
                sess.flows.on_ack(PubAck(packet_id=pid, reason_code=0x80) if d.qos == 1
                                  else PubRec(packet_id=pid, reason_code=0x80))
                sess.untrack(pid)
            return
        self._append_publish(data, d.qos)
        if gw.tracer is not None:
            gw.tracer.delivered(sess.client_id, out, d.qos, pid)

    def resend(self, sess, d: Delivery, pid: int) -> None:
        if not self.can_send:
            return  # stays in flight; resent on the next connection
        data = encode_delivery(self, d, pid, dup=True)
        if data is not None:
            self.write(data)
            if self.gw.tracer is not None:
                self.gw.tracer.delivered(sess.client_id, d.out, d.qos, pid, dup=True)

    def kick(self, reason: int, *, ends_session: bool = False, server_reference: str | None = None) -> None:
        """Close this connection from outside (takeover, shutdown)."""
        if reason == R.SESSION_TAKEN_OVER:
            self.taken_over = True
            self.takeover_ends_session = ends_session
        was_closing = self.closing
        self.closing = True  # first: the DISCONNECT below starts no writer, the reader's end writes it
        if not was_closing and self.mq.state is _CONNECTED and self.version == 5:
            self.send_event(Disconnect(reason_code=reason, server_reference=server_reference))
        self._stop_reader()

    def _stop_reader(self) -> None:
        # A reader that is writing (or pumping) is not cut short: a half-sent
        # packet would garble the stream, and pump's record must precede its
        # QoS 2 PUBLISHes. It sees ``closing`` as soon as it is done.
        scope = self._reader_scope
        if scope is not None and (self._writer_of != READER or self._acting):
            scope.cancel()

    def _pump_due(self) -> bool:
        sess = self.session
        return sess is not None and sess.due and self.live and not self.closing and sess.conn is self

    async def _flush(self) -> None:
        """Run the session's pump when it is due, and write everything queued;
        again until there is nothing more (others may queue meanwhile)."""
        while True:
            if self._pump_due():
                self.session.due = False
                await self.session.pump(self)
            out = self.out
            if not out:
                if self._pump_due():
                    continue  # notified during the pump: wake() did nothing, as this writer runs
                return
            data = b"".join(out)
            self.out = NO_OUTPUT
            self.out_bytes = 0
            self._behind = self._room = None
            self._writing = True
            try:
                with trio.fail_after(self.gw.settings.session.write_timeout):
                    await self.stream.send_all(data)
                self.gw.stats.bytes_out += len(data)
            finally:
                self._writing = False

    async def _writer(self) -> None:
        """Started by ``wake``; ends once nothing waits (or the write fails)."""
        try:
            await self._flush()
        except (trio.TooSlowError, *STREAM_ERRORS):
            self.closing = True
            self._stop_reader()
        except Exception:
            # Runs in the gateway's nursery: a bug here must end this connection, not the gateway.
            log.exception("client %s: writer failed, closing the connection", self.client_id)
            self.closing = True
            self._stop_reader()
        finally:
            self._writer_of = NOBODY
            if self._writer_done is not None:
                self._writer_done.set()

    # ---- the connection's life --------------------------------------------------------

    async def run(self) -> None:
        """The connection's whole life: read and act (``_turn``) until it ends,
        write what is left (``_drain``), clean up and close (``_end``).

        One cancel scope for the reading part (a scope per phase or per read
        is an allocation per idle connection): ``kick`` and the keepalive task
        cancel it, and its deadline is the connect timeout until CONNECT, then
        none. Everything that cancels it sets ``closing`` first, so a
        cancellation without ``closing`` is the connect timeout. The read loops are inline, not in a method of their own:
        every coroutine frame on an idle connection's stack costs about 250
        bytes. Run as the listener's task itself (plain TCP, ``leave`` given),
        it also does the listener's part: close the socket, call ``leave``,
        log and count its own failure."""
        plain = type(self.stream) is trio.SocketStream
        unpolled = True  # counted in gw.unpolled_readers since __init__
        try:
            try:
                scope = trio.CancelScope(deadline=trio.current_time() + self.gw.settings.limits.connect_timeout)
                with scope:
                    self._reader_scope = scope
                    try:
                        # A plain TCP socket is read with one non-blocking read
                        # (``socket_reads.read_now``), not through trio's receive_some: a read
                        # costs no trio step of its own.
                        fd = self.stream.socket.fileno() if plain else -1
                        at_once = True  # the task's start was the first read's checkpoint
                        while self.session is None and not self.closing:
                            await self._turn(await (recv_plain(self, fd, at_once) if fd >= 0 else recv(self)))
                            at_once = False
                        if fd >= 0:  # from here every read comes through the gateway's epoll
                            self.gw.unpolled_readers -= 1
                            unpolled = False
                        # A plain TCP connection waits for input here, not inside
                        # a read: an idle one then holds no receive stack (about
                        # 1.7 KB of frames). TLS and WebSocket streams may hold input
                        # already read from the socket, so they wait in receive_some.
                        # It waits in the gateway's one epoll (gateway/readiness.py), on
                        # one Waiter (no frame of trio's: ~1.5 KB less than wait_readable).
                        readiness = self.gw.readiness
                        scope.deadline = math.inf
                        clock = trio.lowlevel.current_clock()
                        # when the last read was acted on, and how long after the one before
                        # (below HOT_GAP_S the next wait is in trio's own epoll: Readiness.wait_hot)
                        done, gap = -math.inf, math.inf
                        watched = self.keepalive and not self.closing
                        if watched:
                            self.read_at = clock.current_time()
                            self._keepalive_entry = self.gw.keepalive.watch(self)
                        while not self.closing:
                            alone = False
                            if fd >= 0:
                                try:
                                    if gap < HOT_GAP_S and readiness.can_wait_hot():
                                        alone = await readiness.wait_hot(fd)
                                    else:
                                        waiter = readiness.arm(fd)
                                        if waiter is None:
                                            await trio.lowlevel.wait_readable(fd)
                                        else:
                                            alone = await waiter
                                    data = read_now(self, fd)
                                except trio.ClosedResourceError:
                                    # closed while trio waited for it: its descriptor number may be
                                    # another socket's by now, so the stream says what happened
                                    data = None
                                except STREAM_ERRORS:  # OSError included: a closed socket
                                    data = read_now(self, fd)  # (armed in this step) the read says what happened
                                if data is None:  # woken with nothing to read (the watcher stopped), or closed
                                    alone = False
                                    data = await recv(self)
                            else:
                                data = await recv(self)
                            self.woken_alone = alone
                            await self._turn(data)
                            now = clock.current_time()
                            gap, done = now - done, now
                            if watched:
                                self.read_at = now
                    except RemoteProtocolError as e:
                        self._protocol_error(e)
                    finally:
                        self._reader_scope = None
                        if self._keepalive_entry is not None:
                            self.gw.keepalive.forget(self._keepalive_entry)
                if scope.cancelled_caught and not self.closing:
                    self.closing = True
                    log.info("connection %s: no CONNECT within %.0f s, closed", self.info.peer,
                             self.gw.settings.limits.connect_timeout)
                self.closing = True
                await self._drain()
            finally:
                await self._end()
        except Exception:
            if self._leave is None:
                raise  # the listener's task logs and counts it
            self.gw.listener_stats.handler_errors += 1
            log.exception("%s connection %d from %s: handler failed", self.info.listener, self.info.connection_id,
                          self.info.peer)
        finally:
            if unpolled:
                self.gw.unpolled_readers -= 1
            if self._leave is not None:  # run as the listener's task (MQTTGateway.handle_plain): its part here
                self.stream.socket.close()  # closed already, unless _end failed
                self._leave()

    @property
    def busy_reading(self) -> bool:
        """The reader is acting on a read or writing its output: the keepalive
        does not cut it (``read_at`` is set when it is done)."""
        return self._acting or self._writer_of == READER

    def keepalive_expired(self) -> None:
        """No packet for 1.5 x keepalive (called by gateway.keepalive, never
        while ``busy_reading``): close, telling a 5.0 client why."""
        if self.closing:
            return
        self.closing = True  # first: the DISCONNECT starts no writer, the reader's end writes it
        log.info("client %s: keepalive (%d s) expired", self.client_id, self.keepalive)
        try:
            if self.version == 5:
                self.send_event(Disconnect(reason_code=R.KEEP_ALIVE_TIMEOUT))
        finally:
            self._stop_reader()

    async def _end(self) -> None:
        # Cancelled from outside (not by kick): the server is stopping.
        self.server_stopping = trio.current_effective_deadline() == -math.inf
        try:
            # Not cut short by a server shutdown: connection_closed shields its
            # own waits (and waits on nothing outside them).
            await self.gw.connection_closed(self)
        finally:
            self._finished = True
            if self._done is not None:
                self._done.set()
        try:
            if not self.server_stopping and not self.peer_closed:
                await linger(self.stream)  # not shielded: a server shutdown cuts it short
        finally:
            stream = self.stream
            if type(stream) is trio.SocketStream:
                stream.socket.close()  # what its aclose does, minus a trio step: nothing to wait for
            else:
                with trio.CancelScope(shield=True, deadline=trio.current_time() + 1):
                    try:
                        await stream.aclose()
                    except STREAM_ERRORS:
                        pass

    async def _drain(self) -> None:
        """What is left (a DISCONNECT, a refusing CONNACK, the last acks) is
        written, all of it within ``writeTimeout``."""
        if self._writer_of != TASK and not (self.out and self._writer_of != READER):
            return  # nothing left (most ends): no cancel scope to make
        with trio.move_on_after(self.gw.settings.session.write_timeout):
            try:
                if self._writer_of == TASK:
                    self._writer_done = trio.Event()
                    await self._writer_done.wait()
                if self.out and self._writer_of != READER:  # NOBODY, or QUEUED: claimed here
                    self._writer_of = READER
                    try:
                        await self._flush()
                    finally:
                        self._writer_of = NOBODY
            except (trio.TooSlowError, *STREAM_ERRORS):
                pass

    async def _turn(self, data: bytes) -> None:
        """Act on one read, then write what it produced, unless a writer task is
        writing (it takes this output too): on a plain TCP socket first with
        one non-blocking write (``step_writes.write_out``, no trio step), then
        what the kernel did not take with ``send_all``. Sets ``closing`` when
        the connection ends (run's ``_drain`` writes what is left then)."""
        self._acting = True
        try:
            more = await self._feed(data)
        finally:
            self._acting = False
        if not more:
            self.closing = True
        woken = self.gw.woken
        if woken:  # what this read routed to others goes out before its own acks
            write_collected(woken)
        if self.closing or (self._writer_of != NOBODY and self._writer_of != QUEUED):
            return  # a writer task writes (QUEUED: the end of this step would, it is claimed here)
        sess = self.session
        if self.out or (sess is not None and sess.due):
            if write_out(self):
                return  # written without waiting (or the write failed: closing)
            self._writer_of = READER  # the rest, waiting for room: this client's reads wait for it
            try:
                await self._flush()
            except (trio.TooSlowError, *STREAM_ERRORS):
                self.closing = True
            finally:
                self._writer_of = NOBODY

    async def _feed(self, data: bytes) -> bool:
        mq = self.mq
        mq.receive_data(data)
        while True:
            events = mq.events()  # RemoteProtocolError goes up to run()
            if not events:
                break
            await handle(self, events)
            if self.closing:
                return False
        return bool(data)

    def _protocol_error(self, e: RemoteProtocolError) -> None:
        self.gw.stats.protocol_errors += 1
        log.info("connection %s (client %s): protocol error, closing: %s (reason 0x%02X)",
                 self.info.peer, self.client_id, e, e.reason_code)
        data = self.mq.error_response(e)
        self.closing = True  # first: run's _drain writes it, no writer task is started
        self.write(data)

    def in2_record(self):
        sess = self.session
        pids = sess.inbound.packet_ids(InboundStage.QOS2_RECEIVED)
        return record("in2", sess.client_id, pids or None)
