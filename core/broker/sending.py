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
- `send_many` checks every message first (synchronous unless a topic must
  be created), then stamps, hooks and encodes them (`_prepare_many`: one
  clock read and one call for the UNIQ_KEYs of the batch), appends them
  together (`MessageStore.append_many`) and waits once, for the last end
  offset: one flush covers the whole batch. A message refused on the way
  leaves the others alone.
- Put hooks run in send order before encoding; stored hooks run in send
  order after the append, for exactly the messages whose put hooks ran
  (each message: the stored hooks of its topic, in the order added; see
  hooks.py). Nothing awaits between a call's first put hook and its last
  stored hook.
- A batch (`send_batch`) is checked, appended (one lock, consecutive queue
  offsets), woken up and waited for once, but each of its items goes through
  the put and stored hooks like a single send, so MQTT subscribers and
  session queues get every item. It is stored whole or not at all: an item
  a hook refuses, or moves off the batch's queue, refuses the batch.
"""

from __future__ import annotations

import logging
import time
from typing import Iterable, Protocol

import trio

from core.store.encoder import EncodedMessage
from core.store.message import PROPERTY_DELAY, PROPERTY_TRAN_MSG, TIMER_TRIGGERS, Message

from .config import PERM_READ, PERM_WRITE
from .hooks import PutHook, StoredHook
from .results import SendResult, SendStatus
from .send_checks import Prepared, SendChecks
from .topics import DEFAULT_TOPIC, NOT_ALLOWED_SEND_TOPICS, RETRY_GROUP_TOPIC_PREFIX, TopicConfig, validate_topic

__all__ = ["PutHook", "Replicator", "SendPath", "StoredHook"]

log = logging.getLogger(__name__)


class Replicator(Protocol):
    """What core/ha plugs in for SYNC_MASTER (`Broker.replicator`)."""

    async def wait_replicated(self, end_offset: int, deadline: float) -> bool | None:
        """True when a slave has the log up to ``end_offset``; False at the
        deadline (FLUSH_SLAVE_TIMEOUT); None when no slave is connected
        (SLAVE_NOT_AVAILABLE)."""


class SendPath(SendChecks):
    """Send methods of `Broker`; the state they use is set up in ``Broker.__init__``."""

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

    async def send_many(self, items: Iterable[tuple[Message, int | None]], *, internal: bool = False,
                        checkpoint: bool = True) -> list[SendResult]:
        """Store independent messages (any topics) with one append and one flush wait.

        The hot path of the gateway and the timer service: every message is
        checked (`_check_many`; an await only where a topic must be created
        first), then the batch is stamped, put through the hooks and encoded
        (`_prepare_many`), then all of it goes to the store together
        (`MessageStore.append_many`): no await from the first put hook to
        the last stored hook. With ``checkpoint=False`` a call that need not
        wait (no topic to create, nothing to make durable first) returns
        without a trio checkpoint: for a caller that has just been through
        one and goes through another before it runs long (the gateway's
        reader, between two waits for input).
        """
        if items.__class__ is not list:
            items = list(items)
        checked: list = []
        stop = self._check_many(items, checked, internal)
        while stop < len(items):  # a topic to create first (may persist the topic table)
            msg, qid = items[stop]
            checked.append(await self._check_send(msg, qid, DEFAULT_TOPIC, None, internal))
            stop = self._check_many(items, checked, internal)
        results: list = [None] * len(items)
        prepared: list[Prepared] = []
        try:
            self._prepare_many(items, checked, results, prepared)
        except BaseException:  # a put hook's bug: stored hooks hear of every message whose put hooks ran
            failed = SendResult(SendStatus.SYSTEM_ERROR, remark="a put hook failed")
            for p in prepared:
                self._stored(p[0], p[6] if p[6] is not None else failed)
            raise
        end, waiting = self._store_prepared(prepared, results) if prepared else (0, None)
        if waiting:
            await self._await_durable(end, waiting)
        elif checkpoint:
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
        wait = all(self._stamp_many(msgs, [checked] * len(msgs)))
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

    async def _await_durable(self, end: int, results: list[SendResult]) -> None:
        """SYNC_FLUSH: wait for the group commit; SYNC_MASTER: then for a slave."""
        assert self._flusher is not None
        started = time.perf_counter()  # only sends that wait get here: ASYNC_FLUSH to an ASYNC_MASTER never does
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
        self.durable_latency.observe(time.perf_counter() - started)
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
