"""Pop consumption for RocketMQ 5 consumers: ReceiveMessage, AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, over the broker's
queues and a `PopTable`.

Rules kept here:
- ReceiveMessage pops across every queue of the topic: redeliveries that are
  due first, then new messages (through the broker's pull, so the tag or
  SQL92 filter and the read statistics are the 4.x path's); with nothing to
  give it waits (long polling) until a message arrives, an invisible time
  ends, the poll time ends, or the service closes. It always answers with a
  status: OK with messages, or MESSAGE_NOT_FOUND.
- A lite consumer pops the light queues of its lite topics (`wire.lite_queue`,
  queue 0 each) instead of the topic's queues; its acks and invisible-time
  changes name the lite topic, so they find the same pop state.
- A group new to a queue starts at the queue's first offset; otherwise at
  its committed consumer offset, which pop keeps at the oldest message in
  flight (`core.proxy.pop`).
- A FIFO group (``consumeMessageOrderly`` in its subscription group config)
  is handed each queue in order: nothing new from a queue while any of its
  messages is out, and a due message only when no earlier one of its queue
  is still out; so each message group (one queue) is consumed in order.
- A message due again after ``max_attempts`` deliveries goes to the group's
  dead-letter topic (``%DLQ%group``) instead; the group's ``retryMaxTimes``
  (16) + 1 is that maximum, as RocketMQ's.
"""

from __future__ import annotations

import logging
import math
import time

import trio

from core.broker import LMQ_TOPIC_PREFIX, Broker, PullStatus, dlq_topic
from core.broker.jsonfile import read_json, write_json_atomic
from core.store.message import PROPERTY_UNIQ_KEY, StoredMessage

from . import pb, pop_log, wire
from .pop import PopQueue, PopTable, ReceiptError
from .remote import RemoteQueues, remote_queue_id
from .wire import OK, WireError, status

log = logging.getLogger("mqgate.proxy")

DEFAULT_POLL_S = 20.0  # when the request names no long-polling time
POLL_MARGIN_S = 0.5  # answer this long before the client's own deadline
MIN_INVISIBLE_S = 1.0
MAX_INVISIBLE_S = 12 * 3600.0  # RocketMQ's upper bound
MAX_BATCH = 32
UNAVAILABLE = object()  # _read_one: another group's light queue did not answer
REMOTE_POLL_S = 1.0  # a lite receive that also reads other groups' light queues looks again this often
POP_STATE_FILE = "popState.json"
# Snapshot records (core.proxy.pop_log) add at most this to the commit log on average: ~8 bytes a
# message in flight, so 1000 in flight are a snapshot each save, 100 000 one every ~48 s.
SNAPSHOT_BYTES_PER_S = 16 * 1024


def max_attempts(broker: Broker, group: str) -> int:
    """Deliveries of one message to ``group`` before it goes to the DLQ."""
    gcfg = broker.get_group(group) if group else None
    return (gcfg.retry_max_times if gcfg is not None else 16) + 1


class PopConsumption:
    """The pop side of the MessagingService; ``topic(name, create=...)`` is the
    service's checked topic lookup (a `WireError` when there is none)."""

    def __init__(self, broker: Broker, topic, remote: RemoteQueues | None = None) -> None:
        """``remote``: reads other groups' light queues (lite consumers of a cluster)."""
        self.broker = broker
        self._topic = topic
        self.remote = remote or RemoteQueues(None)
        self._remote_addr: dict[tuple[str, int], tuple[str, str]] = {}  # (light queue, qid) -> (addr, broker)
        self.pop = PopTable()
        self.closing = trio.Event()
        self._arrived: dict[str, trio.Event] = {}
        self._locks: dict[tuple[str, str], trio.Lock] = {}
        self._rr = 0
        self._saved = PopTable().fingerprint()  # of the last snapshot record: none yet, nothing to say
        self._next_snapshot_at = -math.inf
        broker.add_dispatch_listener(self._on_dispatch)

    async def load(self) -> None:
        """Start from the newest saved table: ``config/popState.json`` (or its ``.bak``),
        or the newest snapshot record (`core.proxy.pop_log`: what a master had when this
        broker was its slave), whichever was saved last."""
        path = self.broker.config_dir / POP_STATE_FILE
        try:
            from_file = await trio.to_thread.run_sync(read_json, path)
        except ValueError as e:
            log.warning("%s is unreadable (%s): pop starts from the replicated snapshot or committed offsets", path, e)
            from_file = None
        from_log = await pop_log.latest(self.broker)
        candidates = [(o.get("savedAt", 0), where, o) for where, o in ((path, from_file), (pop_log.POP_TOPIC, from_log))
                      if isinstance(o, dict)]
        for _, where, obj in sorted(candidates, key=lambda c: c[0], reverse=True):
            try:
                self.pop.load_json(obj, trio.current_time(), int(time.time() * 1000))
            except ValueError as e:
                log.warning("%s: %s", where, e)
                continue
            self._saved = self.pop.fingerprint()
            log.info("pop state read from %s", where)
            return

    async def save(self) -> None:
        """The table to ``config/popState.json``, and, when it changed since the last
        time, to a snapshot record first (so a slave has it too); snapshots of a large
        table are spaced so that they add at most ``SNAPSHOT_BYTES_PER_S`` to the log."""
        now = trio.current_time()
        obj = self.pop.to_json(now, int(time.time() * 1000))
        fingerprint = self.pop.fingerprint()
        if fingerprint != self._saved and now >= self._next_snapshot_at:
            try:
                written = await pop_log.write(self.broker, obj)
                if written:
                    self._saved = fingerprint
                    self._next_snapshot_at = now + written / SNAPSHOT_BYTES_PER_S
            except Exception as e:  # noqa: BLE001 - e.g. the store closing under a role change: the file still holds it
                log.warning("pop state snapshot not stored: %s: %s", type(e).__name__, e)
        await trio.to_thread.run_sync(write_json_atomic, self.broker.config_dir / POP_STATE_FILE, obj)

    async def save_every(self, seconds: float, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await trio.sleep(seconds)
            try:
                await self.save()
            except OSError as e:
                log.warning("saving the pop state failed: %s; trying again in %.0f s", e, seconds)

    def close(self) -> None:
        """Wake every waiting receive (it answers MESSAGE_NOT_FOUND) and stop listening."""
        self.closing.set()
        self.broker.remove_dispatch_listener(self._on_dispatch)

    def _on_dispatch(self, topic: str, queue_id: int, next_offset: int) -> None:
        self._wake(topic)

    def wake(self, topic: str) -> None:
        """Waiting receives of ``topic`` look again (their sources may have changed)."""
        self._wake(topic)

    def _wake(self, topic: str) -> None:
        ev = self._arrived.pop(topic, None)
        if ev is not None:
            ev.set()

    def orderly(self, group: str) -> bool:
        """A FIFO group (``consumeMessageOrderly``): each queue is handed out in order, one
        batch at a time, the next only when every message of the last is acked."""
        gcfg = self.broker.get_group(group) if group else None
        return bool(gcfg is not None and gcfg.consume_message_orderly)

    def _max_attempts(self, group: str) -> int:
        return max_attempts(self.broker, group)

    async def receive_message(self, req: pb.ReceiveMessageRequest, time_left: float | None,
                              lite_queues: list[str] | None = None,
                              remote_groups: list[tuple[str, str]] = ()) -> list[pb.ReceiveMessageResponse]:
        """``lite_queues``: a lite consumer's subscribed light queues of the request's topic
        (pop those instead of the topic's own queues; empty: nothing to give yet), here and
        on each of ``remote_groups`` ((broker name, master address): `core.proxy.remote`)."""
        try:
            return await self._receive(req, time_left, lite_queues, list(remote_groups))
        except WireError as e:
            return [pb.ReceiveMessageResponse(status=status(e.code, str(e)))]

    async def _receive(self, req: pb.ReceiveMessageRequest, time_left: float | None,
                       lite_queues: list[str] | None,
                       remote_groups: list[tuple[str, str]]) -> list[pb.ReceiveMessageResponse]:
        group, topic = req.group.name, req.message_queue.topic.name
        if not group:
            raise WireError(pb.ILLEGAL_CONSUMER_GROUP, "the request names no consumer group")
        cfg = await self._topic(topic, create=False)
        if self.broker.groups.get_or_create(group) is None:
            raise WireError(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {group} does not exist")
        invisible_s = _seconds(req.invisible_duration) if req.HasField("invisible_duration") else 30.0
        if not MIN_INVISIBLE_S <= invisible_s <= MAX_INVISIBLE_S:
            raise WireError(pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_s:g} s is outside "
                                                       f"{MIN_INVISIBLE_S:g}..{MAX_INVISIBLE_S:g} s")
        poll_s = _seconds(req.long_polling_timeout) if req.HasField("long_polling_timeout") else DEFAULT_POLL_S
        if time_left is not None:
            poll_s = min(poll_s, time_left - POLL_MARGIN_S)
        batch = max(1, min(req.batch_size or MAX_BATCH, MAX_BATCH))
        expr = req.filter_expression
        expression = expr.expression or "*"
        expression_type = "SQL92" if expr.type == pb.SQL else "TAG"
        deadline = trio.current_time() + max(0.0, poll_s)
        while True:
            # a lite message is stored in its parent topic too: the topic's wake-up serves both
            wake = self._arrived.setdefault(topic, trio.Event())
            sources = ([(q, 0) for q in lite_queues] if lite_queues is not None
                       else [(topic, qid) for qid in range(cfg.read_queue_nums)])
            for name, addr in remote_groups if lite_queues else ():
                for q in lite_queues:
                    key = (q, remote_queue_id(name))
                    self._remote_addr[key] = (addr, name)
                    sources.append(key)
            # one take at a time per group and topic: two consumers must not be handed one offset
            async with self._locks.setdefault((group, topic), trio.Lock()):
                out = await self._take(group, sources, batch, invisible_s, expression, expression_type)
            now = trio.current_time()
            if out or now >= deadline or self.closing.is_set():
                break
            due = min((t for s in sources if (t := self._pop_queue(group, *s).next_due()) is not None), default=None)
            if remote_groups and lite_queues:  # no wake-up comes from another broker: look again soon
                due = min(due if due is not None else math.inf, now + REMOTE_POLL_S)
            with trio.move_on_at(min(deadline, due if due is not None else math.inf)):
                async with trio.open_nursery() as waits:
                    waits.start_soon(_set_then_cancel, wake, waits.cancel_scope)
                    waits.start_soon(_set_then_cancel, self.closing, waits.cancel_scope)
        if not out:
            return [pb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))]
        stamp = pb.ReceiveMessageResponse()
        stamp.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
        return ([pb.ReceiveMessageResponse(status=OK)] + [pb.ReceiveMessageResponse(message=m) for m in out] + [stamp])

    def _pop_queue(self, group: str, topic: str, queue_id: int) -> PopQueue:
        start = self.broker.query_offset(group, topic, queue_id)
        if start is None:
            start = self.broker.min_offset(topic, queue_id)
        return self.pop.queue(group, topic, queue_id, start)

    async def _take(self, group: str, sources: list[tuple[str, int]], batch: int, invisible_s: float,
                    expression: str, expression_type: str) -> list[pb.Message]:
        """Up to ``batch`` messages of the (store topic, queue) ``sources``: due ones first."""
        now = trio.current_time()
        invisible_ms = int(invisible_s * 1000)
        out: list[pb.Message] = []
        states = [(t, self._pop_queue(group, t, qid)) for t, qid in sources]
        fifo = self.orderly(group)
        for topic, q in states:  # redeliveries first: they waited longest
            for f in q.due(now):
                if len(out) >= batch:
                    break
                if fifo and f.offset != min(q.inflight):
                    break  # FIFO: never a later message of a queue before an earlier one still out
                sm = await self._read_one(group, topic, q.queue_id, f.offset)
                if q.inflight.get(f.offset) is not f or f.visible_at > now or sm is UNAVAILABLE:
                    continue  # acked, or its invisible time changed, while the store was read; or unreadable now
                if sm is None or f.attempt >= self._max_attempts(group):
                    del q.inflight[f.offset]
                    if sm is not None:
                        await self._to_dlq(group, sm, f.attempt)
                    continue
                f2, handle = self.pop.hand_out(q, f.offset, now, invisible_s)
                out.append(wire.from_store(sm, receipt_handle=handle, attempt=f2.attempt, invisible_ms=invisible_ms))
        self._rr += 1
        for i in range(len(states)):
            if len(out) >= batch:
                break
            topic, q = states[(self._rr + i) % len(states)]
            if fifo and q.inflight:
                continue  # FIFO: a queue gives its next messages once those out are acked
            remote = self._remote_of(topic, q.queue_id)
            if remote is not None:
                res = await self.remote.pull(*remote, group, topic, q.next_offset, batch - len(out))
            else:
                res = await self.broker.pull(group, topic, q.queue_id, q.next_offset, batch - len(out), expression,
                                             expression_type=expression_type)
            if res.status is PullStatus.SUBSCRIPTION_PARSE_FAILED or (
                    res.status is PullStatus.SYSTEM_ERROR and expression_type == "SQL92"):
                raise WireError(pb.ILLEGAL_FILTER_EXPRESSION, res.remark or "bad filter expression")
            if res.status is PullStatus.FOUND:
                # the offset in the queue read: a light queue's differs from the stored message's own
                for sm, offset in zip(res.messages(), res.queue_offsets):
                    _, handle = self.pop.hand_out(q, offset, now, invisible_s)
                    out.append(wire.from_store(sm, receipt_handle=handle, attempt=1, invisible_ms=invisible_ms))
                q.next_offset = max(q.next_offset, res.next_begin_offset)
            elif res.status in (PullStatus.PULL_RETRY_IMMEDIATELY, PullStatus.PULL_OFFSET_MOVED):
                q.next_offset = max(q.next_offset, res.next_begin_offset) if res.status is not PullStatus.PULL_OFFSET_MOVED \
                    else res.next_begin_offset
            self._commit(group, topic, q)
        return out

    def _remote_of(self, topic: str, queue_id: int) -> tuple[str, str] | None:
        """(address, broker name) of another group's light queue; None: a queue of this broker."""
        if queue_id == 0 or not topic.startswith(LMQ_TOPIC_PREFIX):
            return None
        return self._remote_addr.get((topic, queue_id))

    def _commit(self, group: str, topic: str, q: PopQueue) -> None:
        if queue_id_is_remote(topic, q.queue_id):
            return  # another group's light queue: its progress is the pop state's alone
        committed = q.committed()
        if committed != self.broker.query_offset(group, topic, q.queue_id):
            self.broker.commit_offset(group, topic, q.queue_id, committed)

    async def _read_one(self, group: str, topic: str, queue_id: int, offset: int):
        """The message at ``offset``; None when it is gone, `UNAVAILABLE` when another
        group's light queue cannot be read now (the message stays in flight)."""
        remote = self._remote_of(topic, queue_id)
        if remote is not None:
            res = await self.remote.pull(*remote, group, topic, offset, 1)
            if res.status is PullStatus.SERVICE_NOT_AVAILABLE:
                return UNAVAILABLE
        elif queue_id_is_remote(topic, queue_id):
            return UNAVAILABLE  # not seen since a restart: a receive of its consumer names it again
        else:
            res = await self.broker.read_queue(topic, queue_id, offset, 1)
        msgs = res.messages() if res.status is PullStatus.FOUND else []
        return msgs[0] if msgs and res.queue_offsets[0] == offset else None

    async def _to_dlq(self, group: str, sm: StoredMessage, attempts: int) -> None:
        """A message delivered ``attempts`` times and never acked: a copy to ``%DLQ%group``."""
        dlq = dlq_topic(group)
        await self.broker.ensure_topic(dlq, queue_nums=1)
        msg = sm.to_message()
        msg.topic, msg.queue_id = dlq, 0
        msg.properties = {**sm.properties, "RETRY_TOPIC": sm.topic, "ORIGIN_MESSAGE_ID": sm.msg_id}
        msg.reconsume_times = attempts
        result = await self.broker.send(msg, 0, internal=True)
        if result.ok:
            log.info("message %s of %s went to %s after %d deliveries", sm.properties.get(PROPERTY_UNIQ_KEY),
                     sm.topic, dlq, attempts)
        else:
            log.warning("message %s of %s could not go to %s: %s", sm.properties.get(PROPERTY_UNIQ_KEY), sm.topic,
                        dlq, result.remark or result.status.name)

    async def ack_message(self, req: pb.AckMessageRequest) -> pb.AckMessageResponse:
        await trio.lowlevel.checkpoint()
        group = req.group.name
        entries = []
        for e in req.entries:
            topic = _popped(req.topic.name, e)
            try:
                q = self.pop.ack(group, topic, e.receipt_handle)
            except ReceiptError as err:
                st = status(pb.INVALID_RECEIPT_HANDLE, str(err))
            else:
                self._commit(group, topic, q)
                st = OK
            entries.append(pb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=st))
        if not entries:
            return pb.AckMessageResponse(status=status(pb.BAD_REQUEST, "the request holds no entry"))
        first = entries[0].status
        whole = first if all(x.status.code == first.code for x in entries) else status(pb.MULTIPLE_RESULTS, "see entries")
        return pb.AckMessageResponse(status=whole, entries=entries)

    async def change_invisible_duration(self, req: pb.ChangeInvisibleDurationRequest) -> pb.ChangeInvisibleDurationResponse:
        await trio.lowlevel.checkpoint()
        seconds = _seconds(req.invisible_duration)
        if not 0 <= seconds <= MAX_INVISIBLE_S:
            return pb.ChangeInvisibleDurationResponse(status=status(
                pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {seconds:g} s is outside 0..{MAX_INVISIBLE_S:g} s"))
        try:
            handle = self.pop.change_invisible(req.group.name, _popped(req.topic.name, req), req.receipt_handle,
                                               trio.current_time(), seconds)
        except ReceiptError as err:
            return pb.ChangeInvisibleDurationResponse(status=status(pb.INVALID_RECEIPT_HANDLE, str(err)))
        self._wake(req.topic.name)  # a waiting receive recomputes when to look again
        return pb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)

    async def forward_to_dlq(self, req: pb.ForwardMessageToDeadLetterQueueRequest) -> pb.ForwardMessageToDeadLetterQueueResponse:
        """The client gave up on a message (a FIFO push consumer after its own retries): to the DLQ now."""
        group, topic = req.group.name, _popped(req.topic.name, req)
        try:
            q = self.pop.ack(group, topic, req.receipt_handle)
        except ReceiptError as err:
            await trio.lowlevel.checkpoint()
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.INVALID_RECEIPT_HANDLE, str(err)))
        offset = int(req.receipt_handle.split("_")[2])
        sm = await self._read_one(group, topic, q.queue_id, offset)
        if sm is not None and sm is not UNAVAILABLE:
            await self._to_dlq(group, sm, max(1, req.delivery_attempt))
        self._commit(group, topic, q)
        return pb.ForwardMessageToDeadLetterQueueResponse(status=OK)


def _popped(topic: str, req) -> str:
    """The store topic a receipt handle is of: a lite message's light queue, else ``topic``."""
    return wire.lite_queue(topic, req.lite_topic) if req.HasField("lite_topic") and req.lite_topic else topic


def queue_id_is_remote(topic: str, queue_id: int) -> bool:
    """A pop key of another group's light queue (`core.proxy.remote`): a light queue has queue 0 only."""
    return queue_id != 0 and topic.startswith(LMQ_TOPIC_PREFIX)


async def _set_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _seconds(d) -> float:
    return d.seconds + d.nanos / 1e9
