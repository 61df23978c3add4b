"""The synchronous half of `Broker`'s send path (mixed into it through
`SendPath`): put hooks, checks, stamps, encoding, the append of prepared
messages and their results. Nothing here awaits, so it is compiled with the
other kernels (setup.py); the rules it keeps are in ``sending.py``'s
docstring.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

from core.store.errors import PutStatus
from core.store.message import (
    MULTI_TAGS_FLAG, PROPERTY_CLUSTER, PROPERTY_TRAN_MSG, PROPERTY_UNIQ_KEY, PROPERTY_WAIT, EncodedMessage, Message,
)

from .config import PERM_WRITE, BrokerRole
from .results import SendResult, SendStatus
from .topics import NOT_ALLOWED_SEND_TOPICS, TopicConfig, TopicFilterType

log = logging.getLogger("core.broker.sending")

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


class SendChecks:
    """The send path's synchronous methods; the state they use is set up in ``Broker.__init__``."""

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
            if status is PutStatus.SERVICE_NOT_AVAILABLE:
                remark = self._not_available_remark(remark)
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

    def _not_available_remark(self, remark: str) -> str:
        """RocketMQ's SERVICE_NOT_AVAILABLE wording, with the disk's use when
        the store refused for space."""
        store = self.store
        if store.disk_full:
            return (f"service not available now. It may be caused by one of the following reasons: the broker's "
                    f"disk is full [{store.disk_usage_percent()}% used; {store.disk_full}], messages are put to "
                    f"the slave, message store has been shut down, etc.")
        return remark

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
            if put.status is PutStatus.SERVICE_NOT_AVAILABLE:
                remark = self._not_available_remark(remark)
            if status not in _STORED:
                return SendResult(status, topic=topic, queue_id=queue_id, remark=remark)
        if len(encoded) == 1:
            uniq_key = encoded[0].uniq_key or None
        else:
            uniq_key = ",".join([e.uniq_key for e in encoded if e.uniq_key]) or None
        return SendResult(status, topic, queue_id, put.queue_offset, uniq_key, put.physical_offset,
                          put.store_timestamp, put.msg_num, remark, put)
