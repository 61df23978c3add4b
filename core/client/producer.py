"""The trio producer (Java ``DefaultMQProducer``): sync, async, oneway, ordered and batch sends.

Rules kept here:

- Sends use SEND_MESSAGE_V2 (310, one-letter header keys); batches use
  SEND_BATCH_MESSAGE (320) with ``m=true`` and the batch encoding, like the
  Java client. Every message gets a ``UNIQ_KEY`` (its ``msg_id``) unless it
  has one, and ``WAIT=true`` unless set otherwise; a single body of at
  least ``compress_over`` bytes (4 KiB) is zlib-compressed with sysFlag 0x1.
- Queue choice: round robin over the topic's writable queues; a retry
  avoids the broker that just failed when another one exists. A sync or
  async send is tried ``1 + retry_times`` times (2 retries) on connection
  errors, timeouts and the broker codes Java retries on; every attempt
  shares the send's one timeout. Oneway, selector and explicit-queue sends
  are tried once (order must not move to another queue).
- A topic without a route uses the TBW102 route (at most
  ``default_topic_queue_nums`` queues) and the broker creates it on the
  first send.
- Response codes 0/10/11/12 map to SEND_OK, FLUSH_DISK_TIMEOUT,
  SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT (all stored); any other code
  raises `MQBrokerError`.
- With ``enable_msg_trace=True`` each answered send attempt adds a Pub
  trace record (``core.client.tracing``) without waiting for it to be sent.
- `send_async` returns at once; its task lives in the producer's nursery,
  so shutting the producer down waits for (or cancels) sends in flight.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import logging
import random
import re
import time
import zlib
from contextlib import AbstractAsyncContextManager
from typing import Any, Callable

import trio

from core.client.api import MQBrokerError, MQClientError, is_remoting_error
from core.client.ids import UniqKeyFactory
from core.client.instance import DEFAULT_TOPIC, INNER_PRODUCER_GROUP, ClientInstance, run_client
from core.client.model import Message, MessageQueue, SendResult, SendStatus
from core.client.route import TopicRoute
from core.client.tracing import make_dispatcher, now_ms
from core.client.selector import SHARDING_KEY, MessageQueueSelector, select_by_hash
from core.remoting import RequestCode, ResponseCode
from core.store.batch import encode_batch
from core.store.message import (
    COMPRESSED_FLAG,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    encode_properties,
)

__all__ = ["AsyncProducer", "SendFuture", "open_producer", "validate_message"]

log = logging.getLogger("mqgate.client.producer")

RETRY_CODES = frozenset({
    ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
    ResponseCode.SYSTEM_BUSY, ResponseCode.NO_PERMISSION, ResponseCode.NO_BUYER_ID, ResponseCode.NOT_IN_CURRENT_UNIT,
})
RECONSUME_TIME = "RECONSUME_TIME"
RETRY_PREFIX = "%RETRY%"
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
MAX_MESSAGE_SIZE = 4 * 1024 * 1024


def validate_message(msg: Message, max_size: int = MAX_MESSAGE_SIZE) -> None:
    if not msg.topic or len(msg.topic) > 127 or not _TOPIC_RE.match(msg.topic):
        raise MQClientError(f"the topic {msg.topic!r} is not allowed (at most 127 of [%|a-zA-Z0-9_-])")
    if msg.topic == DEFAULT_TOPIC:
        raise MQClientError(f"the topic {DEFAULT_TOPIC} is reserved")
    if not msg.body:
        raise MQClientError("the message body is empty")
    if len(msg.body) > max_size:
        raise MQClientError(f"the message body is {len(msg.body)} bytes, more than {max_size}")


class SendFuture:
    """The result of `AsyncProducer.send_async`: ``await fut.result()``."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self._result: SendResult | None = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _finish(self, result: SendResult | None, error: BaseException | None) -> None:
        self._result, self._error = result, error
        self._done.set()

    async def result(self) -> SendResult:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class AsyncProducer:
    """See the module docstring; make one with `open_producer`."""

    def __init__(
        self,
        nursery: trio.Nursery,
        namesrv: str | list[str],
        group: str = "DEFAULT_PRODUCER",
        *,
        instance_name: str | None = None,
        send_timeout: float = 3.0,
        retry_times: int = 2,
        default_topic_queue_nums: int = 4,
        compress_over: int = 4096,
        max_message_size: int = MAX_MESSAGE_SIZE,
        heartbeat_interval: float = 30.0,
        poll_namesrv_interval: float = 30.0,
        enable_msg_trace: bool = False,
        trace_topic: str | None = None,
        trace_flush_interval: float = 1.0,
    ) -> None:
        self.group = group
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.default_topic_queue_nums = default_topic_queue_nums
        self.compress_over = compress_over
        self.max_message_size = max_message_size
        self._nursery = nursery
        self.instance = ClientInstance(nursery, namesrv, instance_name=instance_name,
                                       heartbeat_interval=heartbeat_interval,
                                       poll_namesrv_interval=poll_namesrv_interval, timeout=send_timeout)
        self.instance.owner = self
        self._ids = UniqKeyFactory(self.instance.client_ip)
        self._publish: dict[str, list[MessageQueue]] = {}
        self._rr: dict[str, itertools.count] = {}
        self._tasks: trio.Nursery | None = None
        self._stopped = trio.Event()
        self._in_flight = 0
        self._idle = trio.Event()
        self._idle.set()
        self.tracer = make_dispatcher(self, namesrv, "PRODUCER", enable_msg_trace, trace_topic,
                                      {"flush_interval": trace_flush_interval})

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    # ---- ClientOwner ----

    def heartbeat_data(self) -> tuple[list[dict], list[dict]]:
        return [{"groupName": INNER_PRODUCER_GROUP}, {"groupName": self.group}], []

    def topics_in_use(self) -> set[str]:
        return set(self._publish)

    def on_route_changed(self, topic: str, route: TopicRoute) -> None:
        queues = route.publish_queues()
        if queues:
            self._publish[topic] = queues

    def on_consumer_ids_changed(self, group: str) -> None:
        pass

    # ---- lifecycle ----

    async def _run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as tasks:
            self._tasks = tasks
            await tasks.start(self.instance.run)
            if self.tracer is not None:
                await tasks.start(self.tracer.run)
            task_status.started()
            await self._stopped.wait()
            tasks.cancel_scope.cancel()

    async def start(self) -> None:
        await self._nursery.start(self._run)

    async def shutdown(self) -> None:
        """Wait up to ``send_timeout`` for async sends, unregister, close connections."""
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.send_timeout):
                await self._idle.wait()
            if self.tracer is not None:
                await self.tracer.close()
            self._stopped.set()
            await self.instance.shutdown(producer_group=self.group)

    # ---- queues ----

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        queues = self._publish.get(topic)
        if queues:
            return queues
        route = await self.instance.update_route(topic)
        if route is None or not route.publish_queues():
            default = await self.instance.fetch_route(DEFAULT_TOPIC)
            if default is None:
                raise MQClientError(f"no route info for topic {topic} (and no {DEFAULT_TOPIC} to create it from)")
            route = default.for_new_topic(topic, self.default_topic_queue_nums)
            self.instance.routes.setdefault(topic, route)
            self.instance.broker_addrs.update(route.broker_addrs())
        queues = route.publish_queues()
        if not queues:
            raise MQClientError(f"topic {topic} has no writable queue")
        new_broker = not route.all_addrs() <= self.instance.heartbeated
        self._publish[topic] = queues
        if new_broker and self._tasks is not None:
            self._tasks.start_soon(self.instance.heartbeat)
        return queues

    def _select(self, topic: str, queues: list[MessageQueue], last_broker: str | None) -> MessageQueue:
        counter = self._rr.get(topic)
        if counter is None:
            counter = self._rr[topic] = itertools.count(random.randrange(1 << 16))
        n = len(queues)
        if last_broker is not None:
            for _ in range(n):
                mq = queues[next(counter) % n]
                if mq.broker_name != last_broker:
                    return mq
        return queues[next(counter) % n]

    # ---- encoding ----

    def _prepare(self, msg: Message) -> tuple[dict[str, str], bytes, int]:
        validate_message(msg, self.max_message_size)
        props = dict(msg.properties)
        props.setdefault(PROPERTY_UNIQ_KEY, self._ids.new())
        props.setdefault(PROPERTY_WAIT, "true")
        body, sys_flag = msg.body, 0
        if len(body) >= self.compress_over:
            body, sys_flag = zlib.compress(body, 5), COMPRESSED_FLAG
        return props, body, sys_flag

    def _header(self, topic: str, mq: MessageQueue, props: dict[str, str], sys_flag: int, flag: int,
                batch: bool = False) -> dict:
        props = dict(props)
        h: dict[str, Any] = {
            "a": self.group, "b": topic, "c": DEFAULT_TOPIC, "d": self.default_topic_queue_nums, "e": mq.queue_id,
            "f": sys_flag, "g": int(time.time() * 1000), "h": flag, "j": 0, "k": False,
        }
        if topic.startswith(RETRY_PREFIX):
            if RECONSUME_TIME in props:
                h["j"] = int(props.pop(RECONSUME_TIME))
            if PROPERTY_MAX_RECONSUME_TIMES in props:
                h["l"] = int(props.pop(PROPERTY_MAX_RECONSUME_TIMES))
        h["i"] = encode_properties(props)
        if batch:
            h["m"] = True
        return h

    def _result(self, resp, mq: MessageQueue, uniq: str) -> SendResult:
        status = SendStatus.from_code(resp.code) or SendStatus.SEND_OK
        qid = resp.get_int("queueId", mq.queue_id)
        return SendResult(
            status=status, msg_id=uniq, offset_msg_id=resp.get_str("msgId", ""),
            queue=MessageQueue(mq.topic, mq.broker_name, qid), queue_offset=resp.get_long("queueOffset", -1),
            transaction_id=resp.get_str("transactionId", None), region_id=resp.get_str("MSG_REGION", None),
        )

    # ---- sends ----

    def _trace_send(self, msg: Message, result: SendResult, addr: str, started: int, t0: float, trace_on: bool,
                    count: int = 1) -> None:
        assert self.tracer is not None
        cost = int((time.monotonic() - t0) * 1000) // count
        self.tracer.on_send(self.group, msg, result, addr, started, cost, self.client_id, trace_on)

    async def _attempts(self, topic: str, fixed: MessageQueue | None, tries: int, timeout: float,
                        one: Callable[[MessageQueue, float], Any]) -> SendResult:
        deadline = trio.current_time() + timeout
        last_broker: str | None = None
        last_exc: BaseException | None = None
        for attempt in range(tries):
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                break
            mq = fixed or self._select(topic, await self.fetch_publish_queues(topic), last_broker)
            try:
                return await one(mq, remaining)
            except MQBrokerError as exc:
                if exc.code not in RETRY_CODES:
                    raise
                last_exc = exc
            except Exception as exc:
                if not is_remoting_error(exc):
                    raise
                last_exc = exc
            last_broker = mq.broker_name
            log.info("send to %s failed (attempt %d of %d): %s", mq, attempt + 1, tries, last_exc)
        raise MQClientError(f"send to {topic} failed after {tries} attempt(s) in {timeout}s: {last_exc}") from last_exc

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer (retrying on another queue or broker on failure)."""
        timeout = timeout or self.send_timeout
        props, body, sys_flag = self._prepare(msg)
        uniq = props[PROPERTY_UNIQ_KEY]
        if selector is not None:
            queues = await self.fetch_publish_queues(msg.topic)
            queue = selector(queues, msg, arg)
        tries = 1 if queue is not None else 1 + self.retry_times

        async def one(mq: MessageQueue, remaining: float) -> SendResult:
            addr = await self.instance.find_broker_addr(mq.broker_name, msg.topic)
            header = self._header(msg.topic, mq, props, sys_flag, msg.flag)
            if self.tracer is None:  # no clock read when not tracing
                return self._result(await self.instance.api.send(addr, RequestCode.SEND_MESSAGE_V2, header, body,
                                                                 remaining), mq, uniq)
            started, t0 = now_ms(), time.monotonic()
            resp = await self.instance.api.send(addr, RequestCode.SEND_MESSAGE_V2, header, body, remaining)
            result = self._result(resp, mq, uniq)
            if self.tracer is not None:
                self._trace_send(msg, result, addr, started, t0, resp.get_str("TRACE_ON", "true") != "false")
            return result

        return await self._attempts(msg.topic, queue, tries, timeout, one)

    async def send_orderly(self, msg: Message, sharding_key: str | int, *, timeout: float | None = None) -> SendResult:
        """Send to the queue chosen by the sharding key's hash (same key, same queue, same order)."""
        msg.properties[SHARDING_KEY] = str(sharding_key)
        return await self.send(msg, selector=select_by_hash, arg=sharding_key, timeout=timeout)

    def send_async(
        self,
        msg: Message,
        callback: Callable[[SendResult | None, BaseException | None], Any] | None = None,
        **kwargs: Any,
    ) -> SendFuture:
        """Start a send and return at once; ``callback(result, error)`` runs when it ends."""
        if self._tasks is None or self._stopped.is_set():
            raise MQClientError("the producer is not running")
        fut = SendFuture()

        async def task() -> None:
            result: SendResult | None = None
            error: BaseException | None = None
            try:
                try:
                    result = await self.send(msg, **kwargs)
                except Exception as exc:
                    error = exc
                fut._finish(result, error)
                if callback is not None:
                    try:
                        out = callback(result, error)
                        if inspect.isawaitable(out):
                            await out
                    except Exception:
                        log.exception("send callback failed")
            finally:
                self._in_flight -= 1
                if not self._in_flight:
                    self._idle.set()

        self._in_flight += 1
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        self._tasks.start_soon(task)
        return fut

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None,
                          selector: MessageQueueSelector | None = None, arg: Any = None) -> None:
        """Write the request and return; no answer, no retry."""
        props, body, sys_flag = self._prepare(msg)
        if selector is not None:
            queue = selector(await self.fetch_publish_queues(msg.topic), msg, arg)
        mq = queue or self._select(msg.topic, await self.fetch_publish_queues(msg.topic), None)
        addr = await self.instance.find_broker_addr(mq.broker_name, msg.topic)
        header = self._header(msg.topic, mq, props, sys_flag, msg.flag)
        await self.instance.api.send_oneway(addr, RequestCode.SEND_MESSAGE_V2, header, body)

    async def send_batch(self, msgs: list[Message], *, queue: MessageQueue | None = None,
                         timeout: float | None = None) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE; they land in one queue, in order."""
        if not msgs:
            raise MQClientError("the batch is empty")
        topic = msgs[0].topic
        items = []
        uniqs = []
        for m in msgs:
            if m.topic != topic:
                raise MQClientError("the messages of a batch must share one topic")
            if m.delay_level > 0:
                raise MQClientError("delayed messages cannot be sent in a batch")
            if topic.startswith(RETRY_PREFIX):
                raise MQClientError("retry topics cannot take batches")
            validate_message(m, self.max_message_size)
            props = dict(m.properties)
            props.setdefault(PROPERTY_UNIQ_KEY, self._ids.new())
            props.setdefault(PROPERTY_WAIT, "true")
            uniqs.append(props[PROPERTY_UNIQ_KEY])
            items.append((m.body, m.flag, props))
        body = encode_batch(items)
        if len(body) > self.max_message_size:
            raise MQClientError(f"the batch is {len(body)} bytes, more than {self.max_message_size}")
        uniq = ",".join(uniqs)
        tries = 1 if queue is not None else 1 + self.retry_times

        async def one(mq: MessageQueue, remaining: float) -> SendResult:
            addr = await self.instance.find_broker_addr(mq.broker_name, topic)
            header = self._header(topic, mq, {PROPERTY_WAIT: "true"}, 0, 0, batch=True)
            started, t0 = (now_ms(), time.monotonic()) if self.tracer is not None else (0, 0.0)
            resp = await self.instance.api.send(addr, RequestCode.SEND_BATCH_MESSAGE, header, body, remaining)
            result = self._result(resp, mq, uniq)
            if self.tracer is not None:
                # one Pub record per message of the batch, so each is found by its own id and keys
                offset_ids = result.offset_msg_id.split(",")
                trace_on = resp.get_str("TRACE_ON", "true") != "false"
                for i, (m, one_id) in enumerate(zip(msgs, uniqs)):
                    part = dataclasses.replace(result, msg_id=one_id,
                                               offset_msg_id=offset_ids[i] if i < len(offset_ids) else "")
                    self._trace_send(m, part, addr, started, t0, trace_on, len(msgs))
            return result

        return await self._attempts(topic, queue, tries, timeout or self.send_timeout, one)


def open_producer(namesrv: str | list[str], group: str = "DEFAULT_PRODUCER",
                  **options: Any) -> AbstractAsyncContextManager[AsyncProducer]:
    """``async with open_producer("127.0.0.1:9876", "PG") as producer: await producer.send(msg)``."""
    return run_client(lambda nursery: AsyncProducer(nursery, namesrv, group, **options))
