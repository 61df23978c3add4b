"""Message trace for our clients: records made by hooks, sent in batches by an inner producer.

Like the Java client's ``AsyncTraceDispatcher`` and its hooks
(``SendMessageTraceHookImpl``, ``ConsumeMessageTraceHookImpl``,
``EndTransactionTraceHookImpl``), in the record layout of `core.trace`.

Rules kept here:

- Tracing never blocks or fails the user's send or listener: a hook builds
  a record and `TraceDispatcher.append` puts it in a bounded buffer
  (``queue_size``, 2048) without waiting; a full buffer drops the record and
  counts it (``discarded``). Sending trace messages happens in the
  dispatcher's own task; a failed trace send is logged (once at WARNING, then
  at DEBUG) and counted (``failed``), never raised.
- Records leave in batches of at most ``batch_num`` (20, Java's cap) or
  after ``flush_interval`` seconds (1 s; Java waits 5 s), one trace message
  per batch of at most 128 000 characters, keyed by every traced message id
  and key. `TraceDispatcher.close` sends everything still buffered.
- The inner producer is a plain `AsyncProducer` (group
  ``_INNER_TRACE_PRODUCER-<group>-<PRODUCER|CONSUMER>``) that is not traced
  itself, so trace messages never make trace records.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from core.trace import (
    DEFAULT_REGION,
    PROPERTY_MSG_REGION,
    PROPERTY_TRACE_SWITCH,
    TRACE_GROUP_PREFIX,
    TRACE_TOPIC,
    ConsumeReturnType,
    EndTransactionRecord,
    MessageType,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceBatch,
    TraceRecord,
)
from core.client.ids import UniqKeyFactory
from core.client.model import Message, MessageExt, SendResult, SendStatus

if TYPE_CHECKING:
    from core.client.producer import AsyncProducer

__all__ = ["TraceDispatcher", "now_ms"]

log = logging.getLogger("mqgate.client.trace")
_instances = itertools.count(1)
MAX_TRACE_MESSAGE = 128_000


def now_ms() -> int:
    return int(time.time() * 1000)


class TraceDispatcher:
    """Buffers trace records and sends them to the trace topic; see the module docstring."""

    def __init__(self, namesrv: str | list[str], group: str, kind: str, *, trace_topic: str | None = None,
                 batch_num: int = 20, flush_interval: float = 1.0, queue_size: int = 2048,
                 send_timeout: float = 5.0, client_ip: str = "127.0.0.1") -> None:
        self.namesrv = namesrv
        self.group = group
        self.kind = kind
        self.trace_topic = trace_topic or TRACE_TOPIC
        self.batch_num = max(1, min(batch_num, 20))
        self.flush_interval = flush_interval
        self.send_timeout = send_timeout
        self._send, self._recv = trio.open_memory_channel[TraceRecord](queue_size)
        self._ids = UniqKeyFactory(client_ip)
        self._producer: AsyncProducer | None = None
        self._scope: trio.CancelScope | None = None
        self._closed = False
        self._pending: list[TraceRecord] = []
        self._done = trio.Event()
        self.discarded = 0
        self.failed = 0
        self.sent_records = 0
        self._warned = False

    # ---- the user's side: never waits ----

    def append(self, record: TraceRecord) -> bool:
        if self._closed:
            return False
        try:
            self._send.send_nowait(record)
            return True
        except trio.WouldBlock:
            self.discarded += 1
            if self.discarded == 1:
                log.warning("trace buffer of %s full: trace records are dropped until it drains", self.group)
            return False

    def new_request_id(self) -> str:
        return self._ids.new()

    # ---- the dispatcher's task ----

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Start the inner producer, then send batches until `close`."""
        from core.client.producer import AsyncProducer  # the producer module imports this one

        async with trio.open_nursery() as n:
            group = f"{TRACE_GROUP_PREFIX}-{self.group}-{self.kind}-{next(_instances)}"
            self._producer = AsyncProducer(n, self.namesrv, group, instance_name=f"PID_CLIENT_INNER_TRACE_PRODUCER_{group}",
                                           send_timeout=self.send_timeout, max_message_size=MAX_TRACE_MESSAGE * 4)
            await self._producer.start()
            task_status.started()
            with trio.CancelScope() as self._scope:
                while True:
                    await self._fill()
                    batch, self._pending = self._pending, []
                    with trio.CancelScope(shield=True):  # a batch taken is a batch sent (or counted failed)
                        await self._deliver(batch)
            try:
                await self._drain()
                with trio.CancelScope(shield=True):
                    await self._producer.shutdown()
            finally:
                self._done.set()

    async def _fill(self) -> None:
        """Wait for a record, then up to ``flush_interval`` for a full batch (kept in ``_pending``)."""
        self._pending.append(await self._recv.receive())
        with trio.move_on_after(self.flush_interval):
            while len(self._pending) < self.batch_num:
                self._pending.append(await self._recv.receive())

    async def _drain(self) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(self.send_timeout * 2):
            while True:
                batch, self._pending = self._pending, []
                while len(batch) < self.batch_num:
                    try:
                        batch.append(self._recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                        break
                if not batch:
                    return
                await self._deliver(batch)

    async def _deliver(self, records: list[TraceRecord]) -> None:
        assert self._producer is not None
        for body, keys in TraceBatch(max_size=MAX_TRACE_MESSAGE).add_all(records):
            msg = Message(self.trace_topic, body.encode(), keys=keys)
            try:
                result = await self._producer.send(msg)
                if result.status is not SendStatus.SEND_OK:
                    raise RuntimeError(f"status {result.status.name}")
                self.sent_records += body.count("\x02")
            except Exception as exc:
                self.failed += 1
                level = logging.DEBUG if self._warned else logging.WARNING
                self._warned = True
                log.log(level, "trace records to %s not sent (%d so far): %s", self.trace_topic, self.failed, exc)

    async def close(self) -> None:
        """Send what is buffered, then stop; called by the host client's shutdown before
        it stops its own tasks (the inner producer's connections live under them)."""
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()
            with trio.CancelScope(shield=True), trio.move_on_after(self.send_timeout * 3):
                await self._done.wait()

    # ---- records (the hooks) ----

    def on_send(self, group: str, msg: Message, result: SendResult, broker_addr: str, started_ms: int,
                cost_ms: int, client_id: str, trace_on: bool = True, msg_type: MessageType | None = None) -> None:
        if not trace_on or msg.topic.startswith(self.trace_topic):
            return
        if msg_type is None:
            if msg.properties.get("TRAN_MSG") == "true":
                msg_type = MessageType.Trans_Msg_Half
            elif msg.delay_level > 0 or "__STARTDELIVERTIME" in msg.properties:
                msg_type = MessageType.Delay_Msg
            else:
                msg_type = MessageType.Normal_Msg
        self.append(PubRecord(
            timestamp=started_ms, region=result.region_id or DEFAULT_REGION, group=group, topic=msg.topic,
            msg_id=result.msg_id, tags=msg.tags, keys=" ".join(msg.keys) or None, store_host=broker_addr,
            body_length=len(msg.body), cost_ms=cost_ms, msg_type=msg_type, offset_msg_id=result.offset_msg_id,
            success=result.status is SendStatus.SEND_OK, client_host=client_id))

    def before_consume(self, group: str, msgs: list[MessageExt],
                       client_id: str | None = None) -> tuple[str, int, list[MessageExt]] | None:
        traced = [m for m in msgs if m.properties.get(PROPERTY_TRACE_SWITCH) != "false"]
        if not traced:
            return None
        request_id = self.new_request_id()
        started = now_ms()
        for m in traced:
            self.append(SubBeforeRecord(
                timestamp=started, region=m.properties.get(PROPERTY_MSG_REGION) or DEFAULT_REGION, group=group,
                request_id=request_id, msg_id=m.msg_id, retry_times=m.reconsume_times,
                keys=" ".join(m.keys) or None, client_id=client_id))
        return request_id, started, traced

    def after_consume(self, group: str, before: tuple[str, int, list[MessageExt]] | None, success: bool,
                      code: ConsumeReturnType, batch_size: int) -> None:
        if before is None:
            return
        request_id, started, traced = before
        ended = now_ms()
        cost = (ended - started) // max(1, batch_size)
        for m in traced:
            self.append(SubAfterRecord(request_id=request_id, msg_id=m.msg_id, cost_ms=cost, success=success,
                                       keys=" ".join(m.keys) or None, context_code=int(code),
                                       timestamp=ended, group=group))

    def on_end_transaction(self, group: str, msg: Message | MessageExt, msg_id: str, transaction_id: str | None,
                           state: str, broker_addr: str, from_check: bool) -> None:
        if msg.topic.startswith(self.trace_topic):
            return
        self.append(EndTransactionRecord(
            timestamp=now_ms(), region=msg.properties.get(PROPERTY_MSG_REGION) or DEFAULT_REGION, group=group,
            topic=msg.topic, msg_id=msg_id, tags=msg.tags, keys=" ".join(msg.keys) or None, store_host=broker_addr,
            transaction_id=transaction_id or msg_id, transaction_state=state, from_transaction_check=from_check))


def make_dispatcher(owner: Any, namesrv: str | list[str], kind: str, enable: bool, trace_topic: str | None,
                    options: dict[str, Any]) -> TraceDispatcher | None:
    """The dispatcher of a client built with ``enable_msg_trace=True`` (else None)."""
    if not enable:
        return None
    return TraceDispatcher(namesrv, owner.group, kind, trace_topic=trace_topic,
                           client_ip=owner.instance.client_ip, **options)
