"""The trio push consumer (Java ``DefaultMQPushConsumer``): concurrent or orderly listeners.

Rules kept here:

- One pull loop per owned queue, long polling; a queue holding
  ``pull_threshold_for_queue`` (1000) unacknowledged messages, or more than
  ``pull_threshold_size_for_queue`` (100) MiB of bodies, or (concurrent
  consumers) offsets spanning more than ``consume_concurrently_max_span``
  (2000), stops pulling until the listener catches up (Java's flow control).
- Concurrent: messages go to the listener in batches of
  ``consume_batch_size`` (1), at most ``consume_concurrency`` (20) batches
  at a time across queues. CONSUME_SUCCESS acknowledges the batch;
  RECONSUME_LATER (or an exception) sends each message back
  (CONSUMER_SEND_MSG_BACK with ``maxReconsumeTimes``, default 16): the
  broker re-delivers it through ``%RETRY%<group>`` after delay level
  ``3 + reconsume times`` and puts it in ``%DLQ%<group>`` past the
  maximum. If the send-back fails the message is re-sent to the retry topic
  as a new message; if that fails too it is consumed again locally after
  5 s. Broadcasting consumers do not retry (as in Java).
- Orderly: one queue is consumed by one task, one batch at a time, lowest
  offset first; in clustering mode only while this client holds the
  broker lock on the queue (LOCK_BATCH_MQ when the queue is taken, renewed
  every ``lock_interval``, 20 s; a lock is trusted for 30 s; UNLOCK when the
  queue is given up). SUSPEND_CURRENT_QUEUE_A_MOMENT (or an exception)
  consumes the same messages again after ``suspend_current_queue_ms``;
  past ``max_reconsume_times`` (unlimited by default) they go to the DLQ.
- Committed offsets advance only past acknowledged messages (`ProcessQueue`)
  and are sent every 5 s and at shutdown.
- With ``enable_msg_trace=True`` each listener call adds SubBefore and
  SubAfter trace records (group, request id, retry count, cost, status).
- Listeners take ``(msgs, context)`` and may be plain or async functions;
  ``None``/``True`` mean success and ``False`` means later. A plain
  listener runs on the event loop, so it must be quick; the blocking
  facade runs it in a worker thread instead.
"""

from __future__ import annotations

import inspect
import logging
import time
import traceback
import zlib
from collections import deque
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import trio

from core.client.message_selector import MessageSelector
from core.client.consumer_base import ConsumerBase
from core.client.model import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    MessageExt,
    MessageQueue,
)
from core.client.process_queue import ProcessQueue
from core.client.tracing import make_dispatcher
from core.trace import ConsumeReturnType
from core.client.instance import run_client
from core.remoting import RequestCode
from core.store.message import (
    COMPRESSED_FLAG,
    PROPERTY_DELAY,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    encode_properties,
)

__all__ = ["AsyncPushConsumer", "ConsumeContext", "MessageListener", "open_push_consumer"]

log = logging.getLogger("mqgate.client.push")

MessageListener = Callable[[list[MessageExt], "ConsumeContext"], Any | Awaitable[Any]]
ORDERLY_MAX_RECONSUME = 2**31 - 1
LOCAL_RETRY_DELAY = 5.0


@dataclass(slots=True)
class _Work:
    """The batches of one pull waiting for the listener."""

    mq: MessageQueue
    pq: ProcessQueue
    batches: deque
    pending: int = 0  # helper tasks started but not yet running


@dataclass(slots=True)
class ConsumeContext:
    """Passed to listeners. Concurrent listeners may set ``delay_level_when_next_consume``
    (0: the broker's 3 + reconsume times; -1: straight to the DLQ); orderly ones may set
    ``suspend_current_queue_ms``."""

    queue: MessageQueue
    delay_level_when_next_consume: int = 0
    suspend_current_queue_ms: int = -1


class AsyncPushConsumer(ConsumerBase):
    consume_type = "CONSUME_PASSIVELY"

    def __init__(
        self,
        nursery: trio.Nursery,
        namesrv: str | list[str],
        group: str,
        *,
        orderly: bool = False,
        listener: MessageListener | None = None,
        consume_concurrency: int = 20,
        consume_batch_size: int = 1,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        suspend_current_queue_ms: int = 1000,
        lock_interval: float = 20.0,
        await_termination: float = 5.0,
        enable_msg_trace: bool = False,
        trace_topic: str | None = None,
        trace_flush_interval: float = 1.0,
        **options: Any,
    ) -> None:
        super().__init__(nursery, namesrv, group, **options)
        self.tracer = make_dispatcher(self, namesrv, "CONSUMER", enable_msg_trace, trace_topic,
                                      {"flush_interval": trace_flush_interval})
        self.orderly = orderly
        self.listener = listener
        self.consume_batch_size = max(1, consume_batch_size)
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue  # MiB, as Java's
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.flow_controlled = 0  # pulls held back by a threshold
        if max_reconsume_times < 0:
            max_reconsume_times = ORDERLY_MAX_RECONSUME if orderly else 16
        self.max_reconsume_times = max_reconsume_times
        self.suspend_current_queue_ms = suspend_current_queue_ms
        self.lock_interval = lock_interval
        self.await_termination = await_termination
        self._limiter = trio.CapacityLimiter(max(1, consume_concurrency))
        self._consuming = 0
        self._consume_idle = trio.Event()
        self._consume_idle.set()
        self.consumed_count = 0

    def subscribe(self, topic: str, expression: str | MessageSelector = "*",
                  listener: MessageListener | None = None) -> "AsyncPushConsumer":
        """Subscribe to ``topic`` with a tag expression (``*``, ``TagA || TagC``) or a
        `MessageSelector` (``MessageSelector.by_sql("a > 1")``); the listener
        defaults to the consumer's own."""
        self._subscribe(topic, expression, listener)
        return self

    def register_listener(self, listener: MessageListener) -> "AsyncPushConsumer":
        self.listener = listener
        return self

    # ---- lifecycle ----

    async def _start_tracer(self, n: trio.Nursery) -> None:
        if self.tracer is not None:
            await n.start(self.tracer.run)

    def _start_extra(self, n: trio.Nursery) -> None:
        if self.orderly and self.clustering:
            n.start_soon(self._lock_loop)

    async def shutdown(self) -> None:
        """Stop pulling, let running listeners finish (up to ``await_termination``), commit
        offsets, release queue locks, unregister and close."""
        if self.stopping:
            return
        self.stopping = True
        with trio.CancelScope(shield=True):
            for scope in list(self._scopes.values()):
                scope.cancel()
            with trio.move_on_after(self.await_termination):
                await self._consume_idle.wait()
            with trio.move_on_after(self.instance.api.timeout * 2):
                await self.offsets.persist_all()
                if self.orderly and self.clustering:
                    await self._unlock(list(self.pqs))
            if self.tracer is not None:
                await self.tracer.close()
            self._stopped.set()
            await self.instance.shutdown(consumer_group=self.group)

    # ---- queues ----

    async def _add_queue(self, mq: MessageQueue, offset: int) -> bool:
        if self.orderly and self.clustering:
            try:
                addr = await self.instance.find_broker_addr(mq.broker_name, mq.topic)
                locked = await self.instance.api.lock_batch(addr, self.group, self.client_id, [mq])
            except Exception as exc:
                log.info("lock of %s failed: %s", mq, exc)
                locked = set()
            if mq not in locked:
                assert self._n is not None
                self._n.start_soon(self._retry_rebalance_soon)
                return False
            ok = await super()._add_queue(mq, offset)
            self.pqs[mq].locked = True
            self.pqs[mq].last_lock_time = trio.current_time()
            return ok
        return await super()._add_queue(mq, offset)

    async def _retry_rebalance_soon(self) -> None:
        await trio.sleep(self.missing_route_retry)
        self.trigger_rebalance()

    async def _remove_queue(self, mq: MessageQueue) -> None:
        await super()._remove_queue(mq)
        if self.orderly and self.clustering:
            await self._unlock([mq])

    async def _unlock(self, mqs: list[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, group in by_broker.items():
            addr = self.instance.broker_addr(broker)
            if addr is None:
                continue
            try:
                await self.instance.api.unlock_batch(addr, self.group, self.client_id, group)
            except Exception as exc:
                log.info("unlock on %s failed: %s", broker, exc)

    async def _lock_loop(self) -> None:
        while True:
            await trio.sleep(self.lock_interval)
            await self.lock_all()

    async def lock_all(self) -> None:
        """Renew the locks of every owned queue (orderly, clustering)."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in self.pqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, mqs in by_broker.items():
            addr = self.instance.broker_addr(broker)
            try:
                locked = await self.instance.api.lock_batch(addr, self.group, self.client_id, mqs) if addr else set()
            except Exception as exc:
                log.info("lock renewal on %s failed: %s", broker, exc)
                continue
            now = trio.current_time()
            for mq in mqs:
                pq = self.pqs.get(mq)
                if pq is None:
                    continue
                pq.locked = mq in locked
                if pq.locked:
                    pq.last_lock_time = now

    async def _queue_task(self, mq: MessageQueue, pq: ProcessQueue, offset: int, scope: trio.CancelScope) -> None:
        pq.pulled_to = offset
        with scope:
            async with trio.open_nursery() as qn:
                if self.orderly:
                    qn.start_soon(self._consume_orderly, mq, pq)
                sub = self.subscriptions.get(mq.topic)
                if sub is not None:
                    await self._pull_loop(mq, pq, offset, sub)

    def _held_back(self, pq: ProcessQueue) -> bool:
        """Java's three checks before a pull: cached count, cached size (MiB) and, for
        concurrent consumers, the span of offsets held."""
        if (len(pq) >= self.pull_threshold_for_queue
                or pq.bytes > self.pull_threshold_size_for_queue * 1024 * 1024
                or (not self.orderly and pq.span() > self.consume_concurrently_max_span)):
            self.flow_controlled += 1
            if self.flow_controlled % 1000 == 1:
                log.warning("%s: pulling held back (flow control, %d times): %d messages, %.1f MiB, span %d "
                            "cached in one queue; the listener is slower than the pulls", self.group,
                            self.flow_controlled, len(pq), pq.bytes / 1048576, pq.span())
            return True
        return False

    def _may_pull(self, pq: ProcessQueue) -> bool:
        return not (self.orderly and self.clustering and not pq.lock_valid())

    def _offset_moved(self, mq: MessageQueue, offset: int, next_offset: int) -> None:
        log.info("offset %d of %s is illegal; moving to %d", offset, mq, next_offset)
        self.offsets.update(mq, next_offset, increase_only=False)

    def _deliver(self, mq: MessageQueue, pq: ProcessQueue, added: list[MessageExt]) -> None:
        if not self.orderly:  # orderly queues are consumed by their own task (_consume_orderly)
            self._dispatch(mq, pq, added)

    # ---- listeners ----

    def _listener_for(self, topic: str) -> MessageListener:
        sub = self.subscriptions.get(topic)
        listener = (sub.listener if sub is not None else None) or self.listener
        if listener is None:
            raise RuntimeError(f"no listener for topic {topic}")
        return listener

    async def _call(self, msgs: list[MessageExt], ctx: ConsumeContext) -> Any:
        out = self._listener_for(msgs[0].topic)(msgs, ctx)
        if inspect.isawaitable(out):
            out = await out
        return out

    def _begin(self) -> None:
        self._consuming += 1
        if self._consume_idle.is_set():
            self._consume_idle = trio.Event()

    def _end(self) -> None:
        self._consuming -= 1
        if not self._consuming:
            self._consume_idle.set()

    def _consumed(self, mq: MessageQueue, pq: ProcessQueue, n: int, ok: bool, began: float) -> None:
        self.stats.consumed(mq.topic, n, ok, (trio.current_time() - began) * 1000 / n)
        pq.last_consume_ms = int(time.time() * 1000)

    # ---- what an operator asks (GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY) ----

    def config_properties(self) -> dict[str, str]:
        props = super().config_properties()
        props.update({"consumeMessageBatchMaxSize": str(self.consume_batch_size),
                      "pullThresholdSizeForQueue": str(self.pull_threshold_size_for_queue),
                      "consumeConcurrentlyMaxSpan": str(self.consume_concurrently_max_span),
                      "consumeThreadMax": str(int(self._limiter.total_tokens)),
                      "maxReconsumeTimes": str(self.max_reconsume_times),
                      "suspendCurrentQueueTimeMillis": str(self.suspend_current_queue_ms),
                      "PROP_CONSUMEORDERLY": "true" if self.orderly else "false",
                      "PROP_THREADPOOL_CORE_SIZE": str(int(self._limiter.total_tokens))})
        return props

    async def consume_directly(self, msg: MessageExt) -> dict:
        """ConsumeMessageDirectlyResult of handing ``msg`` to the listener once, as
        the Java client does for CONSUME_MESSAGE_DIRECTLY: no offset moves, no
        retry, nothing is sent back."""
        msg.restore_retry_topic(self.retry_topic)
        ctx = ConsumeContext(msg.queue)
        began = time.monotonic()
        remark = None
        try:
            out = await self._call([msg], ctx)
        except Exception as exc:
            result, remark = "CR_THROW_EXCEPTION", "".join(traceback.format_exception(exc))
        else:
            if self.orderly:
                ok = out is None or out is True or out is ConsumeOrderlyStatus.SUCCESS
            else:
                ok = out is None or out is True or out is ConsumeConcurrentlyStatus.CONSUME_SUCCESS
            result = "CR_SUCCESS" if ok else "CR_LATER"
        return {"autoCommit": True, "consumeResult": result, "order": self.orderly, "remark": remark,
                "spentTimeMills": int((time.monotonic() - began) * 1000)}

    # ---- concurrent ----

    def _dispatch(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt], delay: float = 0.0) -> None:
        assert self._n is not None
        bs = self.consume_batch_size
        work = _Work(mq, pq, deque(msgs[i:i + bs] for i in range(0, len(msgs), bs)))
        self._begin()
        work.pending = 1
        self._n.start_soon(self._drain, work, delay)

    async def _drain(self, work: "_Work", delay: float = 0.0) -> None:
        """Consume batches of one pull until none is left. A helper task is started only
        while this one is inside a listener that let others run (a slow or threaded
        listener), so a quick listener costs no task per batch and a slow one still gets
        up to ``consume_concurrency`` batches at a time."""
        work.pending -= 1
        try:
            if delay:
                await trio.sleep(delay)
            async with self._limiter:
                while work.batches:
                    batch = work.batches.popleft()
                    if work.batches and not work.pending and self._limiter.available_tokens:
                        self._begin()
                        work.pending += 1
                        assert self._n is not None
                        self._n.start_soon(self._drain, work)
                    await self._consume_batch(work.mq, work.pq, batch)
        finally:
            self._end()

    async def _consume_batch(self, mq: MessageQueue, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        if pq.dropped:
            return
        ctx = ConsumeContext(mq)
        began = trio.current_time()
        traced = self.tracer.before_consume(self.group, batch, self.client_id) if self.tracer is not None else None
        code = ConsumeReturnType.SUCCESS
        try:
            out = await self._call(batch, ctx)
            ok = out is None or out is True or out is ConsumeConcurrentlyStatus.CONSUME_SUCCESS
            if not ok:
                code = ConsumeReturnType.FAILED
        except Exception:
            log.exception("listener failed on %d message(s) of %s; reconsume later", len(batch), mq)
            ok, code = False, ConsumeReturnType.EXCEPTION
        if traced is not None:
            self.tracer.after_consume(self.group, traced, ok, code, len(batch))
        self.consumed_count += len(batch)
        self._consumed(mq, pq, len(batch), ok, began)
        again: list[MessageExt] = []
        if not ok and self.clustering:
            for m in batch:
                if not await self._send_back(m, ctx.delay_level_when_next_consume):
                    again.append(m)
        elif not ok:
            log.warning("broadcasting: %d message(s) of %s dropped after RECONSUME_LATER", len(batch), mq)
        done = [m for m in batch if m not in again] if again else batch
        offset = pq.remove(done)
        if not pq.dropped:
            self.offsets.update(mq, offset)
        if again:
            for m in again:
                m.reconsume_times += 1
            self._dispatch(mq, pq, again, LOCAL_RETRY_DELAY)

    async def _send_back(self, m: MessageExt, delay_level: int) -> bool:
        try:
            addr = await self.instance.find_broker_addr(m.broker_name, m.queue.topic)
            await self.instance.api.send_back(
                addr, self.group, m.commit_log_offset, delay_level=delay_level, origin_msg_id=m.msg_id,
                origin_topic=m.topic, max_reconsume_times=self.max_reconsume_times)
            return True
        except Exception as exc:
            log.info("send-back of %s failed (%s); re-sending to %s", m.msg_id, exc, self.retry_topic)
        try:
            await self._resend_to_retry(m)
            return True
        except Exception as exc:
            log.info("re-send of %s to %s failed: %s", m.msg_id, self.retry_topic, exc)
            return False

    async def _resend_to_retry(self, m: MessageExt) -> None:
        """Java's fallback: a new message in ``%RETRY%<group>`` carrying the retry bookkeeping."""
        props = dict(m.properties)
        for k in ("MIN_OFFSET", "MAX_OFFSET"):
            props.pop(k, None)
        props.setdefault(PROPERTY_RETRY_TOPIC, m.topic)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, m.msg_id)
        props[PROPERTY_DELAY] = str(3 + m.reconsume_times)
        props.pop(PROPERTY_MAX_RECONSUME_TIMES, None)
        props.setdefault(PROPERTY_UNIQ_KEY, m.msg_id)
        route = await self.instance.route(self.retry_topic)
        queues = route.publish_queues() if route else []
        if not queues:
            raise RuntimeError(f"no route to {self.retry_topic}")
        mq = queues[0]
        addr = await self.instance.find_broker_addr(mq.broker_name, mq.topic)
        header = {"a": "CLIENT_INNER_PRODUCER", "b": mq.topic, "c": "TBW102", "d": 4, "e": mq.queue_id,
                  "f": m.sysflag & COMPRESSED_FLAG, "g": m.born_timestamp, "h": m.flag, "i": encode_properties(props),
                  "j": m.reconsume_times + 1, "k": False, "l": self.max_reconsume_times}
        body = zlib.compress(m.body) if m.sysflag & COMPRESSED_FLAG else m.body
        await self.instance.api.send(addr, RequestCode.SEND_MESSAGE_V2, header, body)

    # ---- orderly ----

    async def _consume_orderly(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        while not pq.dropped:
            if not pq.available():
                await pq.changed.wait()
                continue
            if self.clustering and not pq.lock_valid():
                await trio.sleep(min(1.0, self.pull_error_delay))
                continue
            batch = pq.take(self.consume_batch_size)
            ctx = ConsumeContext(mq)
            self._begin()
            began = trio.current_time()
            try:
                traced = self.tracer.before_consume(self.group, batch, self.client_id) if self.tracer is not None else None
                code = ConsumeReturnType.SUCCESS
                try:
                    out = await self._call(batch, ctx)
                    ok = out is None or out is True or out is ConsumeOrderlyStatus.SUCCESS
                    if not ok:
                        code = ConsumeReturnType.FAILED
                except Exception:
                    log.exception("orderly listener failed on %s; suspending the queue", mq)
                    ok, code = False, ConsumeReturnType.EXCEPTION
                if traced is not None:
                    self.tracer.after_consume(self.group, traced, ok, code, len(batch))
                self.consumed_count += len(batch)
                self._consumed(mq, pq, len(batch), ok, began)
                if not ok and all(m.reconsume_times >= self.max_reconsume_times for m in batch):
                    ok = all([await self._to_dlq(m) for m in batch])
                if ok:
                    offset = pq.commit(batch)
                    if not pq.dropped:
                        self.offsets.update(mq, offset)
                    continue
                pq.give_back(batch)
            finally:
                self._end()
            wait_ms = ctx.suspend_current_queue_ms if ctx.suspend_current_queue_ms >= 0 else self.suspend_current_queue_ms
            await trio.sleep(wait_ms / 1000)

    async def _to_dlq(self, m: MessageExt) -> bool:
        try:
            addr = await self.instance.find_broker_addr(m.broker_name, m.queue.topic)
            await self.instance.api.send_back(addr, self.group, m.commit_log_offset, delay_level=-1,
                                              origin_msg_id=m.msg_id, origin_topic=m.topic,
                                              max_reconsume_times=self.max_reconsume_times)
            return True
        except Exception as exc:
            log.info("moving %s to the DLQ failed: %s", m.msg_id, exc)
            return False


def open_push_consumer(namesrv: str | list[str], group: str, subscriptions: dict[str, str] | None = None,
                       listener: MessageListener | None = None, **options: Any) -> AbstractAsyncContextManager[AsyncPushConsumer]:
    """Start a push consumer; it consumes until the block exits.

    ``subscriptions`` maps topic -> tag expression; more can be added with
    ``consumer.subscribe`` before or after it starts.
    """
    def make(nursery: trio.Nursery) -> AsyncPushConsumer:
        consumer = AsyncPushConsumer(nursery, namesrv, group, listener=listener, **options)
        for topic, expr in (subscriptions or {}).items():
            consumer.subscribe(topic, expr)
        return consumer

    return run_client(make)
