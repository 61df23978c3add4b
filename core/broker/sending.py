"""The send path of `Broker` (mixed into it): checks, stamping, append, durability.

Rules kept here:
- A send answers a `SendResult` for every outcome a client may see and
  raises only for bugs; the statuses and remarks follow RocketMQ's
  ``msgCheck`` and ``PutMessageStatus`` mapping (reference 2.5).
- ``send`` takes ownership of the `Message`: it stamps the store host, the
  ``CLUSTER`` property and, when missing, ``UNIQ_KEY`` and the born
  timestamp, and it strips ``WAIT``.
- The append runs inline in the trio thread (a page-cache write). Only a
  message that must be durable before its ack (SYNC_FLUSH, or SYNC_MASTER
  replication; and ``WAIT`` not ``false``) waits, on the shared flusher
  (group commit, bounded by ``syncFlushTimeout``) and then the replicator
  (bounded by ``slaveTimeout``); a timeout downgrades SEND_OK to FLUSH_DISK_TIMEOUT,
  FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE (the message is stored).
- `send_many` checks, stamps, hooks and encodes every message first
  (`_prepare`, synchronous unless a topic must be created), appends them
  together (`MessageStore.append_many`) and waits once, for the last end
  offset: one flush covers the whole batch. A message refused on the way
  leaves the others alone.
- Put hooks run in send order before encoding; stored hooks run in send
  order after the append, for exactly the messages whose put hooks ran.
- A batch (`send_batch`) is checked, appended (one lock, consecutive queue
  offsets), woken up and waited for once, but each of its items goes through
  the put and stored hooks like a single send, so MQTT subscribers and
  session queues get every item. It is stored whole or not at all: an item
  a hook refuses, or moves off the batch's queue, refuses the batch.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Protocol

import trio

from core.store.errors import PutStatus
from core.store.message import (
    MULTI_TAGS_FLAG, PROPERTY_CLUSTER, PROPERTY_DELAY, PROPERTY_TRAN_MSG, PROPERTY_UNIQ_KEY, PROPERTY_WAIT, TIMER_TRIGGERS,
    EncodedMessage, Message,
)

from .config import PERM_READ, PERM_WRITE, BrokerRole
from .results import SendResult, SendStatus
from .topics import (
    DEFAULT_TOPIC, NOT_ALLOWED_SEND_TOPICS, RETRY_GROUP_TOPIC_PREFIX, TopicConfig, TopicFilterType, validate_topic,
)

log = logging.getLogger(__name__)

PutHook = Callable[[Message], "SendResult | None"]
StoredHook = Callable[[Message, SendResult], None]


class _Prepared:
    """A message past checks, stamps and hooks, encoded and waiting for its append."""

    __slots__ = ("msg", "enc", "topic", "queue_id", "wait", "index", "refused")

    def __init__(self, msg: Message, enc: EncodedMessage | None, topic: str, queue_id: int, wait: bool,
                 refused: SendResult | None = None):
        self.msg = msg
        self.enc = enc  # None when refused after the put hooks ran (``refused`` says why)
        self.topic = topic  # as the sender gave it: results report this, not a hook's rewrite
        self.queue_id = queue_id
        self.wait = wait
        self.index = 0
        self.refused = refused


def _now_ms() -> int:
    return int(time.time() * 1000)


class Replicator(Protocol):
    """What core/ha plugs in for SYNC_MASTER (`Broker.replicator`)."""

    async def wait_replicated(self, end_offset: int, deadline: float) -> bool | None:
        """True when a slave has the log up to ``end_offset``; False at the
        deadline (FLUSH_SLAVE_TIMEOUT); None when no slave is connected
        (SLAVE_NOT_AVAILABLE)."""

_PUT_TO_SEND = {
    PutStatus.PUT_OK: (SendStatus.SEND_OK, ""),
    PutStatus.FLUSH_DISK_TIMEOUT: (SendStatus.FLUSH_DISK_TIMEOUT, ""),
    PutStatus.FLUSH_SLAVE_TIMEOUT: (SendStatus.FLUSH_SLAVE_TIMEOUT, ""),
    PutStatus.SLAVE_NOT_AVAILABLE: (SendStatus.SLAVE_NOT_AVAILABLE, ""),
    PutStatus.SERVICE_NOT_AVAILABLE: (SendStatus.SERVICE_NOT_AVAILABLE, "service not available now, maybe disk full or the store is shut down"),
    PutStatus.CREATE_MAPEDFILE_FAILED: (SendStatus.SYSTEM_ERROR, "create mapped file failed, server is busy or broken"),
    PutStatus.MESSAGE_ILLEGAL: (SendStatus.MESSAGE_ILLEGAL, "the message is illegal, maybe msg body or properties length not matched"),
    PutStatus.PROPERTIES_SIZE_EXCEEDED: (SendStatus.MESSAGE_ILLEGAL, "the message properties are too long"),
    PutStatus.OS_PAGECACHE_BUSY: (SendStatus.SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control for a while"),
    PutStatus.UNKNOWN_ERROR: (SendStatus.SYSTEM_ERROR, "UNKNOWN_ERROR"),
    PutStatus.LMQ_CONSUME_QUEUE_NUM_EXCEEDED: (SendStatus.SYSTEM_ERROR, "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]"),
}

_STORED = frozenset(s for s in SendStatus if s.stored)
_PUT_OK = PutStatus.PUT_OK
_SEND_OK = SendStatus.SEND_OK
_MULTI_TAG = TopicFilterType.MULTI_TAG


class SendPath:
    """Send methods of `Broker`; the state they use is set up in ``Broker.__init__``."""

    def add_put_hook(self, hook: PutHook, *, when: Iterable[str] | None = None) -> None:
        """``hook(msg)`` runs on every send, each item of a batch included, after
        validation and before encoding, and may rewrite topic, queue id and
        properties in place (delay levels, timers, transactions; never on a
        batch item: that refuses the batch). It must not block. A hook that
        returns a `SendResult` refuses the message (a batch item: the whole
        batch): the send answers it and nothing is stored.

        ``when``: property names; the hook then runs only on messages that
        carry at least one of them as the hooks start (decided once per
        message, before the first hook), so that a hook with nothing to do
        costs a message nothing. Hooks run in the order they were added."""
        names = None if when is None else frozenset(when)
        self._put_hooks.append((hook, names))
        self._put_always = [h for h, w in self._put_hooks if w is None]
        self._put_triggers = frozenset().union(*(w for _, w in self._put_hooks if w is not None))

    def _hooks_for(self, props: dict) -> list[PutHook]:
        """The put hooks that run on a message with ``props`` (see `add_put_hook`)."""
        if props.keys().isdisjoint(self._put_triggers):
            return self._put_always
        return [h for h, w in self._put_hooks if w is None or not props.keys().isdisjoint(w)]

    def add_stored_hook(self, hook: StoredHook) -> None:
        """``hook(msg, result)`` runs, in send order, for every message whose put
        hooks ran, once the call's messages are appended (before any
        durability wait), refused ones included; ``result.ok`` says it was
        stored. `send_many` appends its messages together, so a put hook that
        keeps state for a message finds it here, not in a dispatch listener."""
        self._stored_hooks.append(hook)

    async def send(self, msg: Message, queue_id: int | None = None, *, default_topic: str = DEFAULT_TOPIC,
                   default_topic_queue_nums: int | None = None, internal: bool = False) -> SendResult:
        """Store one message; ``queue_id`` None (or negative) = round-robin over write queues.

        ``internal=True`` is for the broker's own services (retry, delay, transactions):
        it allows system topics like SCHEDULE_TOPIC_XXXX.
        """
        checked = self._check_known(msg, queue_id, internal)
        if checked is None:
            checked = await self._check_send(msg, queue_id, default_topic, default_topic_queue_nums, internal)
        if checked.__class__ is not SendResult:
            checked = self._prepare(msg, checked[0], checked[1])
        if checked.__class__ is SendResult:
            await trio.lowlevel.checkpoint()
            return checked
        results: list[SendResult | None] = [None]
        end, waiting = self._store_prepared([checked], results)
        if waiting:
            await self._await_durable(end, waiting)
        else:
            await trio.lowlevel.checkpoint()
        return results[0]

    async def send_many(self, items: Iterable[tuple[Message, int | None]], *, internal: bool = False) -> list[SendResult]:
        """Store independent messages (any topics) with one append and one flush wait.

        The hot path of the gateway and the timer service: each message is
        checked, stamped, put through the hooks and encoded (`_prepare`; no
        coroutine of its own unless its topic must be created), then all of
        them go to the store together (`MessageStore.append_many`).
        """
        results: list = []
        append = results.append
        prepared: list[_Prepared] = []
        add = prepared.append
        check = self._check_topic
        prepare = self._prepare
        writable = self.writable()  # broker state, checked again after each await
        try:
            for msg, qid in items:
                checked = check(msg, qid, internal) if writable else self._refuse_state(msg.topic)
                if checked is None:  # a topic to create first (may persist the topic table)
                    checked = await self._check_send(msg, qid, DEFAULT_TOPIC, None, internal)
                    writable = self.writable()
                if checked.__class__ is not SendResult:
                    checked = prepare(msg, checked[0], checked[1])
                    if checked.__class__ is not SendResult:
                        checked.index = len(results)
                        add(checked)
                        append(None)
                        continue
                append(checked)
        except BaseException:  # cancelled while creating a topic: stored hooks hear of every prepared message
            gone = SendResult(SendStatus.SYSTEM_ERROR, remark="the send was cancelled")
            for p in prepared:
                self._stored(p.msg, p.refused if p.refused is not None else gone)
            raise
        end, waiting = self._store_prepared(prepared, results) if prepared else (0, None)
        if waiting:
            await self._await_durable(end, waiting)
        else:
            await trio.lowlevel.checkpoint()
        return results

    async def send_batch(self, msgs: list[Message], queue_id: int | None = None, *, default_topic: str = DEFAULT_TOPIC,
                         default_topic_queue_nums: int | None = None) -> SendResult:
        """A RocketMQ batch: one topic, one queue, consecutive queue offsets; ``msg_id`` comma-joined.

        Every item goes through the put hooks and the stored hooks like a
        single send (`_batch_put_hooks`, `_batch_stored`); the checks, the
        append (one lock), the wake-ups and the durability wait happen once
        for the batch."""
        refused = _refuse_batch(msgs)
        if refused is not None:
            await trio.lowlevel.checkpoint()
            return refused
        topic = msgs[0].topic
        checked = await self._check_send(msgs[0], queue_id, default_topic, default_topic_queue_nums, False)
        if isinstance(checked, SendResult):
            await trio.lowlevel.checkpoint()
            return checked
        cfg, qid = checked
        for m in msgs:
            bad = self._check_body(m)
            if bad:
                await trio.lowlevel.checkpoint()
                return bad
        wait = True
        for m in msgs:
            wait &= self._stamp(m, cfg, qid)
        # from here to the stored hooks nothing awaits: the hooks hear of every item whose put hooks ran
        ran, refused = self._batch_put_hooks(msgs, topic, qid) if self._put_hooks else (len(msgs), None)
        if refused is None:
            try:
                encoded = [EncodedMessage(m) for m in msgs]
            except ValueError as e:
                refused = SendResult(SendStatus.MESSAGE_ILLEGAL, topic=topic, remark=str(e))
        if refused is not None:
            if self._stored_hooks:
                self._batch_stored(msgs[:ran], None, refused)
            await trio.lowlevel.checkpoint()
            return refused
        put = self.store.append_batch(encoded)
        result = self._send_result(put, encoded, topic, qid)
        if self._stored_hooks:
            self._batch_stored(msgs, put, result, encoded)
        if result.status is SendStatus.SEND_OK:
            self._written = max(self._written, put.end_offset)
        if result.status is SendStatus.SEND_OK and self._must_wait and wait:
            await self._await_durable(self._written, [result])
        else:
            await trio.lowlevel.checkpoint()
        return result

    def _batch_put_hooks(self, msgs: list[Message], topic: str, queue_id: int) -> tuple[int, SendResult | None]:
        """The put hooks on each item in order: (items they ran on, refusal or None).
        One item refused refuses the batch; so does an item a hook moved to
        another topic or queue (a batch is stored in one queue)."""
        for i, m in enumerate(msgs):
            try:
                for hook in self._hooks_for(m.properties):
                    refused = hook(m)
                    if refused is not None:
                        return i + 1, refused
            except Exception:  # a hook's bug: the hooks that ran before it still hear the outcome
                self._batch_stored(msgs[:i + 1], None, SendResult(SendStatus.SYSTEM_ERROR, topic=topic, queue_id=queue_id,
                                                                  remark="put hook failed"))
                raise
            if m.topic != topic or m.queue_id != queue_id:
                return i + 1, SendResult(SendStatus.MESSAGE_ILLEGAL, topic=topic,
                                         remark="a put hook moved a batch message off the batch's queue")
        return len(msgs), None

    def _batch_stored(self, msgs: list[Message], put, result: SendResult,
                      encoded: list[EncodedMessage] | None = None) -> None:
        """The stored hooks for each item: its own `SendResult` when the batch
        was stored (its queue and log offsets), else the batch's refusal."""
        if put is None or not result.ok:
            for m in msgs:
                self._stored(m, result)
            return
        status, remark, qoff, ts = result.status, result.remark, put.queue_offset, put.store_timestamp
        topic, qid = result.topic, result.queue_id
        for i, (m, enc, phys) in enumerate(zip(msgs, encoded, put.physical_offsets)):
            self._stored(m, SendResult(status, topic, qid, qoff + i, enc.uniq_key or None, phys, ts, 1, remark, enc))

    def _prepare(self, msg: Message, cfg: TopicConfig, queue_id: int) -> "_Prepared | SendResult":
        """Body check, stamps, put hooks, encoding; a `SendResult` if refused
        before the hooks, a `_Prepared` (with ``refused`` set) after them."""
        bad = self._check_body(msg)
        if bad:
            return bad
        wait = self._stamp(msg, cfg, queue_id)
        topic = msg.topic
        try:
            props = msg.properties
            hooks = self._put_always if props.keys().isdisjoint(self._put_triggers) else self._hooks_for(props)
            for hook in hooks:
                refused = hook(msg)
                if refused is not None:  # the stored hooks hear of it in send order (_store_prepared)
                    return _Prepared(msg, None, topic, queue_id, False, refused)
        except Exception:  # a hook's bug: the hooks that ran before it still hear the outcome
            self._stored(msg, SendResult(SendStatus.SYSTEM_ERROR, topic=topic, queue_id=queue_id, remark="put hook failed"))
            raise
        try:
            enc = EncodedMessage(msg)
        except ValueError as e:
            return _Prepared(msg, None, topic, queue_id, False,
                             SendResult(SendStatus.MESSAGE_ILLEGAL, topic=topic, remark=str(e)))
        return _Prepared(msg, enc, topic, queue_id, wait and self._must_wait)

    def _store_prepared(self, prepared: list["_Prepared"], results: list) -> tuple[int, list[SendResult]]:
        """Append prepared messages together and fill in their results; returns
        (log end offset to be durable up to, results that wait for it)."""
        encs = [p.enc for p in prepared if p.enc is not None]
        status, rows, ts = self.store.append_many(encs) if encs else (_PUT_OK, [], 0)
        hooks = self._stored_hooks
        waiting: list[SendResult] = []
        end = 0
        if status is not _PUT_OK:
            send_status, remark = _PUT_TO_SEND.get(status, (SendStatus.SYSTEM_ERROR, str(status)))
            for p in prepared:
                r = p.refused if p.refused is not None else SendResult(send_status, topic=p.topic, queue_id=p.queue_id,
                                                                       remark=remark)
                results[p.index] = r
                if hooks:
                    self._stored(p.msg, r)
            return 0, waiting
        if len(encs) < len(prepared):  # refused after the put hooks: no row of their own
            it = iter(rows)
            rows = [None if p.enc is None else next(it) for p in prepared]
        illegal = _PUT_TO_SEND[PutStatus.MESSAGE_ILLEGAL]
        for p, row in zip(prepared, rows):
            if p.refused is not None:
                r = p.refused
            elif row is None:
                r = SendResult(illegal[0], topic=p.topic, queue_id=p.queue_id,
                               remark=f"the message is {p.enc.size} bytes stored, more than the store takes")
            else:
                enc = p.enc
                phys = row[0]
                # SEND_OK built here, not through a helper: this runs for every message
                r = SendResult(_SEND_OK, p.topic, p.queue_id, row[1], enc.uniq_key or None, phys, ts, 1, "", enc)
                if phys + enc.size > end:
                    end = phys + enc.size
                if p.wait:
                    waiting.append(r)
            results[p.index] = r
            if hooks:
                self._stored(p.msg, r)
        if end > self._written:
            self._written = end
        return end, waiting

    def _stored(self, msg: Message, result: SendResult) -> None:
        """Run the stored hooks; one that raises is logged and the others still run
        (a put hook may be waiting for its message's outcome to free its state)."""
        for hook in self._stored_hooks:
            try:
                hook(msg, result)
            except Exception:
                log.exception("stored hook %r failed for a message to %s", hook, result.topic)

    def _check_known(self, msg: Message, queue_id: int | None, internal: bool) -> tuple[TopicConfig, int] | SendResult | None:
        """``msgCheck`` for a topic that exists: broker state, topic permission,
        queue id. None when the topic is not known yet (`_check_send` creates it)."""
        if not self.writable():
            return self._refuse_state(msg.topic)
        return self._check_topic(msg, queue_id, internal)

    def writable(self) -> bool:
        """The broker takes sends now: running, a master, with write permission."""
        config = self.config
        return (self._running and config.broker_role is not BrokerRole.SLAVE and bool(config.broker_permission & PERM_WRITE)
                and not self.fenced)

    def _check_topic(self, msg: Message, queue_id: int | None, internal: bool) -> tuple[TopicConfig, int] | SendResult | None:
        """`_check_known` once the broker takes writes: topic permission and queue id."""
        topic = msg.topic
        cfg = self.topics.get(topic)
        if cfg is None:
            return None
        if not internal and topic in NOT_ALLOWED_SEND_TOPICS:
            return SendResult(SendStatus.NO_PERMISSION, topic=topic, remark=f"sending message to topic[{topic}] is forbidden")
        return self._pick_queue(cfg, topic, queue_id)

    def _refuse_state(self, topic: str) -> SendResult:
        if not self._running:
            return SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=topic, remark="the broker is not running")
        if self.config.broker_role is BrokerRole.SLAVE:
            return SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=topic, remark="the broker is a slave, it takes no sends")
        if self.fenced:
            return SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=topic,
                              remark="the broker lost its master lease (fenced): it is becoming a slave")
        return SendResult(SendStatus.NO_PERMISSION, topic=topic,
                          remark=f"the broker[{self.config.broker_name}] sending message is forbidden")

    def _pick_queue(self, cfg: TopicConfig, topic: str, queue_id: int | None) -> tuple[TopicConfig, int] | SendResult:
        perm = cfg.perm
        if not perm & PERM_WRITE:
            return SendResult(SendStatus.NO_PERMISSION, topic=topic, remark=f"the topic[{topic}] sending message is forbidden")
        write_nums = cfg.write_queue_nums
        if queue_id is None or queue_id < 0:
            if write_nums <= 0:
                return SendResult(SendStatus.NO_PERMISSION, topic=topic, remark=f"topic[{topic}] has no write queue")
            n = self._round_robin.get(topic, -1) + 1
            self._round_robin[topic] = n
            return cfg, n % write_nums
        if queue_id >= write_nums and queue_id >= cfg.read_queue_nums:
            return SendResult(SendStatus.SYSTEM_ERROR, topic=topic,
                              remark=f"request queueId[{queue_id}] is illegal, topic {topic} has {cfg.queue_nums} queues")
        return cfg, queue_id

    async def _check_send(self, msg: Message, queue_id: int | None, default_topic: str,
                          default_queue_nums: int | None, internal: bool) -> tuple[TopicConfig, int] | SendResult:
        """``msgCheck``: broker state, topic name, topic config (auto-create), queue id."""
        checked = self._check_known(msg, queue_id, internal)
        if checked is not None:
            return checked
        topic = msg.topic
        reason = validate_topic(topic)
        if reason:
            return SendResult(SendStatus.SYSTEM_ERROR, topic=topic, remark=reason)
        if not internal and topic in NOT_ALLOWED_SEND_TOPICS:
            return SendResult(SendStatus.NO_PERMISSION, topic=topic, remark=f"sending message to topic[{topic}] is forbidden")
        sys_flag = 0
        cfg = self.topics.create_on_send(topic, default_topic, default_queue_nums or self.config.default_topic_queue_nums, sys_flag)
        if cfg is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            cfg = self.topics.create_if_absent(topic, 1, PERM_READ | PERM_WRITE, sys_flag)
        if cfg is None:
            return SendResult(SendStatus.TOPIC_NOT_EXIST, topic=topic,
                              remark=f"topic[{topic}] not exist, apply first please!")
        await self._persist_topics()
        return self._pick_queue(cfg, topic, queue_id)

    def _check_body(self, msg: Message) -> SendResult | None:
        if len(msg.body) > self.config.max_message_size:
            return SendResult(SendStatus.MESSAGE_ILLEGAL, topic=msg.topic,
                              remark=f"message body is {len(msg.body)} bytes, more than maxMessageSize {self.config.max_message_size}")
        if msg.properties.get(PROPERTY_TRAN_MSG) == "true" and self.config.reject_transaction_message:
            return SendResult(SendStatus.NO_PERMISSION, topic=msg.topic,
                              remark=f"the broker[{self.config.broker_name}] sending transaction message is forbidden")
        return None

    def _stamp(self, msg: Message, cfg: TopicConfig, queue_id: int) -> bool:
        """Broker-side fields of a message; returns whether the sender waits for the store (WAIT)."""
        props = msg.properties
        wait = props.pop(PROPERTY_WAIT, "true") != "false" if PROPERTY_WAIT in props else True
        props[PROPERTY_CLUSTER] = self.config.broker_cluster_name
        if PROPERTY_UNIQ_KEY not in props:
            props[PROPERTY_UNIQ_KEY] = self._uniq.next()
        msg.queue_id = queue_id
        msg.store_host = self.store_host
        if not msg.born_timestamp:
            msg.born_timestamp = time.time_ns() // 1_000_000
        if cfg.topic_filter_type is _MULTI_TAG:
            msg.sysflag |= MULTI_TAGS_FLAG
        return wait

    def _send_result(self, put, encoded: list[EncodedMessage], topic: str, queue_id: int) -> SendResult:
        if put.status is _PUT_OK:  # identity first: hashing an Enum member is a Python-level call
            status, remark = SendStatus.SEND_OK, ""
        else:
            mapped = _PUT_TO_SEND.get(put.status)
            status, remark = mapped if mapped is not None else (SendStatus.SYSTEM_ERROR, str(put.status))
            if status not in _STORED:
                return SendResult(status, topic=topic, queue_id=queue_id, remark=remark)
        if len(encoded) == 1:
            uniq_key = encoded[0].uniq_key or None
        else:
            uniq_key = ",".join([e.uniq_key for e in encoded if e.uniq_key]) or None
        return SendResult(status, topic, queue_id, put.queue_offset, uniq_key, put.physical_offset,
                          put.store_timestamp, put.msg_num, remark, put)

    async def _await_durable(self, end: int, results: list[SendResult]) -> None:
        """SYNC_FLUSH: wait for the group commit; SYNC_MASTER: then for a slave."""
        assert self._flusher is not None
        deadline = trio.current_time() + self._sync_flush_timeout_s
        status = SendStatus.SEND_OK
        if self._sync_flush and not await self._flusher.wait_flushed(end, deadline):
            status, remark = SendStatus.FLUSH_DISK_TIMEOUT, "flush to disk timed out"
        if self._sync_master and status is SendStatus.SEND_OK:
            # 4.9.3+: the slave wait is bounded by slaveTimeout, after the flush
            slave_deadline = trio.current_time() + self.config.slave_timeout / 1000
            replicated = None if self.replicator is None else await self.replicator.wait_replicated(end, slave_deadline)
            if replicated is None:
                status, remark = SendStatus.SLAVE_NOT_AVAILABLE, "no slave is available"
            elif not replicated:
                status, remark = SendStatus.FLUSH_SLAVE_TIMEOUT, "replication to the slave timed out"
            elif self.fenced:  # replicated, but maybe not to the group's next master
                status, remark = SendStatus.FLUSH_SLAVE_TIMEOUT, "the broker lost its master lease while replicating"
        if status is not SendStatus.SEND_OK:
            for r in results:
                if r.status is SendStatus.SEND_OK:
                    r.status = status
                    r.remark = remark


def _refuse_batch(msgs: list[Message]) -> SendResult | None:
    """Batches hold one topic and no delayed, timer or transactional message
    (MESSAGE_ILLEGAL: parking such an item would take it off the batch's queue)."""
    if not msgs:
        return SendResult(SendStatus.MESSAGE_ILLEGAL, remark="empty batch")
    topic = msgs[0].topic
    for m in msgs:
        if m.topic != topic:
            return SendResult(SendStatus.MESSAGE_ILLEGAL, topic=topic, remark="a batch holds one topic")
        props = m.properties
        if (props.get(PROPERTY_DELAY, "0") not in ("", "0") or props.get(PROPERTY_TRAN_MSG) == "true"
                or not props.keys().isdisjoint(TIMER_TRIGGERS)):
            return SendResult(SendStatus.MESSAGE_ILLEGAL, topic=topic, remark="batch messages may not be delayed or transactional")
    return None
