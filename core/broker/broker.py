"""`Broker`: the in-process broker the MQTT gateway and the remoting processors call.

It owns one `MessageStore` and the tables around it (topics, subscription
groups, consumer offsets), and runs its background tasks (flusher, config
persister, retention) in one nursery under `Broker.run`.

Rules kept here:
- All broker state is touched only in the trio thread. Store appends and
  in-memory reads (get_messages, min/max offset) run inline: they are
  page-cache work. fsync, index lookups, file deletion and config-file
  writes run through `trio.to_thread.run_sync`.
- A send answers a `SendResult` for every outcome the client may see;
  it raises only for bugs. SYNC_FLUSH sends wait for the shared flusher
  (group commit) and answer FLUSH_DISK_TIMEOUT after ``syncFlushTimeout``;
  a message whose ``WAIT`` property is ``false`` is not waited for.
- ``send`` takes ownership of the `Message` it is given: it stamps the
  store host, the ``CLUSTER`` property and, when missing, ``UNIQ_KEY`` and
  the born timestamp, and it strips ``WAIT``.
- A pull maps the store's `GetMessageStatus` to the codes and
  ``nextBeginOffset`` of reference 2.5; a pull that finds nothing and may
  suspend waits on the queue's dispatch event until its deadline, then
  re-runs once without suspending (as RocketMQ's hold service does).
- Shutdown (cancellation of `run`) persists topics, groups and offsets,
  flushes the log and shuts the store down (its clean-shutdown marker),
  shielded and bounded in time.
"""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Callable, Iterable, Protocol

import trio

from core.store import MessageStore, RecoveryReport, StoreConfig
from core.store.errors import GetMessageStatus, PutStatus
from core.store.message import (
    MULTI_TAGS_FLAG, PROPERTY_CLUSTER, PROPERTY_DELAY, PROPERTY_TRAN_MSG, PROPERTY_UNIQ_KEY, PROPERTY_WAIT,
    EncodedMessage, Message, StoredMessage, decode_message, pack_host, parse_offset_msg_id,
)

from .config import PERM_READ, PERM_WRITE, BrokerConfig, BrokerRole, FlushDiskType, store_config_for
from .flush import CommitLogFlusher
from .jsonfile import read_json, write_json_atomic
from .notify import DispatchListener, QueueNotifier
from .offsets import ConsumerOffsetTable, SubscriptionGroupConfig, SubscriptionGroupTable
from .results import PullResult, PullStatus, QueryResult, SendResult, SendStatus
from .subscription import SubscriptionData, SubscriptionParseError, parse_subscription
from .topics import (
    DEFAULT_TOPIC, NOT_ALLOWED_SEND_TOPICS, OFFSET_MOVED_EVENT, RETRY_GROUP_TOPIC_PREFIX, SCHEDULE_QUEUE_NUMS,
    SCHEDULE_TOPIC, SELF_TEST_TOPIC, TopicConfig, TopicFilterType, TopicTable, validate_topic,
)
from .uniq_key import UniqKeyGenerator

log = logging.getLogger(__name__)

LMQ_TOPIC_PREFIX = "%LMQ%"  # light message queues: no topic config, queue 0 only
TOPICS_FILE = "topics.json"
OFFSETS_FILE = "consumerOffset.json"
GROUPS_FILE = "subscriptionGroup.json"
SHUTDOWN_TIMEOUT_S = 30.0

PutHook = Callable[[Message], None]


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

# (pull status, where nextBeginOffset comes from) per store status (reference 2.5)
_GET_TO_PULL = {
    GetMessageStatus.FOUND: PullStatus.FOUND,
    GetMessageStatus.NO_MATCHED_MESSAGE: PullStatus.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: PullStatus.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: PullStatus.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: PullStatus.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: PullStatus.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_TOO_SMALL: PullStatus.PULL_OFFSET_MOVED,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE: None,  # moved unless offset == 0
    GetMessageStatus.NO_MESSAGE_IN_QUEUE: None,
}


def _now_ms() -> int:
    return int(time.time() * 1000)


class Broker:
    """See the module docstring; build with `open_broker` or ``nursery.start(broker.run)``."""

    def __init__(self, config: BrokerConfig, store_config: StoreConfig | None = None, *, store: MessageStore | None = None):
        self.config = config
        if store is None:
            store = MessageStore(store_config_for(config, store_config or StoreConfig()))
        self.store = store
        self.recovery_report: RecoveryReport | None = None
        self.root = Path(store.config.store_path_root_dir)
        self.config_dir = self.root / "config"
        self.store_host = pack_host(config.broker_ip1, config.listen_port)
        self.topics = TopicTable(auto_create=config.auto_create_topic_enable,
                                 default_queue_nums=config.default_topic_queue_nums,
                                 system_topics=self._system_topics())
        self.groups = SubscriptionGroupTable(auto_create=config.auto_create_subscription_group)
        self.offsets = ConsumerOffsetTable()
        self._uniq = UniqKeyGenerator(config.broker_ip1)
        self._notifier = QueueNotifier(self.max_offset)
        self._flusher: CommitLogFlusher | None = None
        self._put_hooks: list[PutHook] = []
        self._round_robin: dict[str, int] = {}
        self._persist_lock = trio.Lock()
        self._written = 0
        self._running = False
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._sync_master = config.broker_role is BrokerRole.SYNC_MASTER
        self._must_wait = self._sync_flush or self._sync_master
        # core/ha sets this on a SYNC_MASTER; without it SYNC_MASTER sends answer SLAVE_NOT_AVAILABLE.
        self.replicator: Replicator | None = None
        self._sync_flush_timeout_s = config.sync_flush_timeout / 1000

    def _system_topics(self) -> dict[str, TopicConfig]:
        c = self.config
        rw = PERM_READ | PERM_WRITE
        out = [
            TopicConfig(SELF_TEST_TOPIC, 1, 1, rw),
            TopicConfig(OFFSET_MOVED_EVENT, 1, 1, rw),
            TopicConfig(SCHEDULE_TOPIC, SCHEDULE_QUEUE_NUMS, SCHEDULE_QUEUE_NUMS, rw),
        ]
        if c.cluster_topic_enable and not validate_topic(c.broker_cluster_name):
            out.append(TopicConfig(c.broker_cluster_name, 16, 16, c.broker_permission & rw))
        if c.broker_topic_enable and not validate_topic(c.broker_name):
            out.append(TopicConfig(c.broker_name, 1, 1, c.broker_permission & rw))
        return {t.topic_name: t for t in out}

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Open the store, serve until cancelled, then shut down cleanly."""
        self._notifier.bind()
        self.store.add_dispatch_listener(self._notifier.on_dispatch)
        await trio.to_thread.run_sync(self._open_blocking)
        self._written = self._log_end()
        interval = None if self._sync_flush else self.config.flush_interval_commit_log / 1000
        self._flusher = CommitLogFlusher(self.store.flush, self._log_end, interval_s=interval,
                                         flushed=self._log_end())
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self._flusher.run)
                nursery.start_soon(self._persist_loop)
                nursery.start_soon(self._retention_loop)
                self._running = True
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._running = False
            self._notifier.close()
            with trio.CancelScope(shield=True):
                with trio.move_on_after(SHUTDOWN_TIMEOUT_S) as scope:
                    await self._shutdown()
                if scope.cancelled_caught:
                    log.error("broker shutdown did not finish in %.0f s", SHUTDOWN_TIMEOUT_S)

    def _open_blocking(self) -> None:
        self.recovery_report = self.store.start()
        topics = read_json(self.config_dir / TOPICS_FILE)
        if topics:
            self.topics.load_json(topics)
        groups = read_json(self.config_dir / GROUPS_FILE)
        if groups:
            self.groups.load_json(groups)
        offsets = read_json(self.config_dir / OFFSETS_FILE)
        if offsets:
            self.offsets.load_json(offsets)
        write_json_atomic(self.config_dir / TOPICS_FILE, self.topics.to_json())

    async def _shutdown(self) -> None:
        try:
            await self.persist()
        finally:
            await trio.to_thread.run_sync(self.store.shutdown)  # flushes log, queues, index; clean marker

    @property
    def running(self) -> bool:
        return self._running

    # ------------------------------------------------------------------ send

    def add_put_hook(self, hook: PutHook) -> None:
        """``hook(msg)`` runs on every single (non-batch) send after validation and
        before encoding, and may rewrite topic, queue id and properties in place
        (delay levels, transactions). It must not block."""
        self._put_hooks.append(hook)

    async def send(self, msg: Message, queue_id: int | None = None, *, default_topic: str = DEFAULT_TOPIC,
                   default_topic_queue_nums: int | None = None, internal: bool = False) -> SendResult:
        """Store one message; ``queue_id`` None (or negative) = round-robin over write queues.

        ``internal=True`` is for the broker's own services (retry, delay, transactions):
        it allows system topics like SCHEDULE_TOPIC_XXXX.
        """
        result, end, wait = await self._put_one(msg, queue_id, default_topic, default_topic_queue_nums, internal)
        if end and wait:
            await self._await_durable(end, [result])
        else:
            await trio.lowlevel.checkpoint()
        return result

    async def send_many(self, items: Iterable[tuple[Message, int | None]], *, internal: bool = False) -> list[SendResult]:
        """Store independent messages (any topics) and wait once for all of them to be durable.

        The gateway's hot path: one flush wait per batch of publishes instead of one per message.
        """
        results: list[SendResult] = []
        end_max = 0
        waiting: list[SendResult] = []
        for msg, qid in items:
            result, end, wait = await self._put_one(msg, qid, DEFAULT_TOPIC, None, internal, checkpoint=False)
            results.append(result)
            if end and wait:
                end_max = max(end_max, end)
                waiting.append(result)
        if waiting:
            await self._await_durable(end_max, waiting)
        else:
            await trio.lowlevel.checkpoint()
        return results

    async def send_batch(self, msgs: list[Message], queue_id: int | None = None, *, default_topic: str = DEFAULT_TOPIC,
                         default_topic_queue_nums: int | None = None) -> SendResult:
        """A RocketMQ batch: one topic, one queue, consecutive queue offsets; ``msg_id`` comma-joined."""
        if not msgs:
            return SendResult(SendStatus.MESSAGE_ILLEGAL, remark="empty batch")
        topic = msgs[0].topic
        for m in msgs:
            if m.topic != topic:
                return SendResult(SendStatus.MESSAGE_ILLEGAL, topic=topic, remark="a batch holds one topic")
            if m.properties.get(PROPERTY_DELAY, "0") not in ("", "0") or m.properties.get(PROPERTY_TRAN_MSG) == "true":
                return SendResult(SendStatus.MESSAGE_ILLEGAL, topic=topic,
                                  remark="batch messages may not be delayed or transactional")
        checked = await self._check_send(msgs[0], queue_id, default_topic, default_topic_queue_nums, False)
        if isinstance(checked, SendResult):
            await trio.lowlevel.checkpoint()
            return checked
        cfg, qid = checked
        wait = True
        encoded: list[EncodedMessage] = []
        for m in msgs:
            bad = self._check_body(m)
            if bad:
                await trio.lowlevel.checkpoint()
                return bad
            wait &= self._stamp(m, cfg, qid)
            try:
                encoded.append(EncodedMessage(m))
            except ValueError as e:
                await trio.lowlevel.checkpoint()
                return SendResult(SendStatus.MESSAGE_ILLEGAL, topic=topic, remark=str(e))
        put = self.store.append_batch(encoded)
        result = self._send_result(put, encoded, topic, qid)
        if result.status is SendStatus.SEND_OK:
            self._written = max(self._written, put.end_offset)
        if result.status is SendStatus.SEND_OK and self._must_wait and wait:
            await self._await_durable(self._written, [result])
        else:
            await trio.lowlevel.checkpoint()
        return result

    async def _put_one(self, msg: Message, queue_id: int | None, default_topic: str, default_queue_nums: int | None,
                       internal: bool, checkpoint: bool = True) -> tuple[SendResult, int, bool]:
        checked = await self._check_send(msg, queue_id, default_topic, default_queue_nums, internal)
        if isinstance(checked, SendResult):
            return checked, 0, False
        cfg, qid = checked
        bad = self._check_body(msg)
        if bad:
            return bad, 0, False
        wait = self._stamp(msg, cfg, qid)
        topic = msg.topic
        for hook in self._put_hooks:
            hook(msg)
        try:
            enc = EncodedMessage(msg)
        except ValueError as e:
            return SendResult(SendStatus.MESSAGE_ILLEGAL, topic=topic, remark=str(e)), 0, False
        put = self.store.append(enc)
        result = self._send_result(put, [enc], topic, qid)
        if result.status is not SendStatus.SEND_OK:
            return result, 0, False
        end = put.end_offset
        if end > self._written:
            self._written = end
        return result, end, wait and self._must_wait

    async def _check_send(self, msg: Message, queue_id: int | None, default_topic: str,
                          default_queue_nums: int | None, internal: bool) -> tuple[TopicConfig, int] | SendResult:
        """``msgCheck``: broker state, topic name, topic config (auto-create), queue id."""
        topic = msg.topic
        if not self._running:
            return SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=topic, remark="the broker is not running")
        if self.config.broker_role is BrokerRole.SLAVE:
            return SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=topic, remark="the broker is a slave, it takes no sends")
        if not self.config.broker_permission & PERM_WRITE:
            return SendResult(SendStatus.NO_PERMISSION, topic=topic,
                              remark=f"the broker[{self.config.broker_name}] sending message is forbidden")
        cfg = self.topics.get(topic)
        if cfg is None:
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
        elif not internal and topic in NOT_ALLOWED_SEND_TOPICS:
            return SendResult(SendStatus.NO_PERMISSION, topic=topic, remark=f"sending message to topic[{topic}] is forbidden")
        if not cfg.writable:
            return SendResult(SendStatus.NO_PERMISSION, topic=topic, remark=f"the topic[{topic}] sending message is forbidden")
        queue_nums = cfg.queue_nums
        if queue_id is None or queue_id < 0:
            if cfg.write_queue_nums <= 0:
                return SendResult(SendStatus.NO_PERMISSION, topic=topic, remark=f"topic[{topic}] has no write queue")
            n = self._round_robin.get(topic, -1) + 1
            self._round_robin[topic] = n
            queue_id = n % cfg.write_queue_nums
        elif queue_id >= queue_nums:
            return SendResult(SendStatus.SYSTEM_ERROR, topic=topic,
                              remark=f"request queueId[{queue_id}] is illegal, topic {topic} has {queue_nums} queues")
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
        wait = props.pop(PROPERTY_WAIT, "true") != "false"
        props[PROPERTY_CLUSTER] = self.config.broker_cluster_name
        if PROPERTY_UNIQ_KEY not in props:
            props[PROPERTY_UNIQ_KEY] = self._uniq.next()
        msg.queue_id = queue_id
        msg.store_host = self.store_host
        if not msg.born_timestamp:
            msg.born_timestamp = _now_ms()
        if cfg.topic_filter_type is TopicFilterType.MULTI_TAG:
            msg.sysflag |= MULTI_TAGS_FLAG
        return wait

    def _send_result(self, put, encoded: list[EncodedMessage], topic: str, queue_id: int) -> SendResult:
        status, remark = _PUT_TO_SEND.get(put.status, (SendStatus.SYSTEM_ERROR, str(put.status)))
        if not status.stored:
            return SendResult(status, topic=topic, queue_id=queue_id, remark=remark)
        uniq = [e.uniq_key for e in encoded if e.uniq_key] if len(encoded) > 1 else None
        if uniq is None:
            uniq = [encoded[0].uniq_key] if encoded[0].uniq_key else []
        return SendResult(
            status, topic=topic, queue_id=queue_id, queue_offset=put.queue_offset,
            uniq_key=",".join(uniq) if uniq else None, physical_offset=put.physical_offset,
            store_timestamp=put.store_timestamp, msg_count=put.msg_num, remark=remark, _put=put,
        )

    async def _await_durable(self, end: int, results: list[SendResult]) -> None:
        """SYNC_FLUSH: wait for the group commit; SYNC_MASTER: then for a slave."""
        assert self._flusher is not None
        deadline = trio.current_time() + self._sync_flush_timeout_s
        status = SendStatus.SEND_OK
        if self._sync_flush and not await self._flusher.wait_flushed(end, deadline):
            status, remark = SendStatus.FLUSH_DISK_TIMEOUT, "flush to disk timed out"
        if self._sync_master and status is SendStatus.SEND_OK:
            replicated = None if self.replicator is None else await self.replicator.wait_replicated(end, deadline)
            if replicated is None:
                status, remark = SendStatus.SLAVE_NOT_AVAILABLE, "no slave is available"
            elif not replicated:
                status, remark = SendStatus.FLUSH_SLAVE_TIMEOUT, "replication to the slave timed out"
        if status is not SendStatus.SEND_OK:
            for r in results:
                if r.status is SendStatus.SEND_OK:
                    r.status = status
                    r.remark = remark

    # ------------------------------------------------------------------ pull

    async def pull(self, group: str, topic: str, queue_id: int, offset: int, max_count: int = 32,
                   subscription: str | SubscriptionData | None = "*", *, suspend_timeout_ms: int | None = None,
                   commit_offset: int | None = None, expression_type: str | None = "TAG") -> PullResult:
        """PULL_MESSAGE. ``suspend_timeout_ms`` set = may long-poll (SUSPEND flag);
        ``commit_offset`` set = also commit that offset for the group (COMMIT_OFFSET flag)."""
        checked = self._check_pull(group, topic, queue_id, subscription, expression_type)
        if isinstance(checked, PullResult):
            await trio.lowlevel.checkpoint()
            return checked
        sub = checked
        if commit_offset is not None and commit_offset >= 0 and self.config.broker_role is not BrokerRole.SLAVE:
            self.offsets.commit(group, topic, queue_id, commit_offset)
        codes = sub.code_filter()
        result = self._get(topic, queue_id, offset, max_count, codes)
        if suspend_timeout_ms is None or not self._parkable(result):
            await trio.lowlevel.checkpoint()
            return result
        timeout_ms = suspend_timeout_ms if self.config.long_polling_enable else self.config.short_polling_time_mills
        deadline = trio.current_time() + max(0, timeout_ms) / 1000
        while self._parkable(result):
            offset = result.next_begin_offset if result.status is PullStatus.PULL_RETRY_IMMEDIATELY else offset
            if not await self._notifier.wait_for_messages(topic, queue_id, offset, deadline):
                break
            if not self._running:
                return PullResult(PullStatus.SERVICE_NOT_AVAILABLE, remark="the broker is shutting down")
            result = self._get(topic, queue_id, offset, max_count, codes)
        return result

    async def read_queue(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
                         tag_codes: frozenset[int] | None = None) -> PullResult:
        """Raw queue read without group or topic checks (session queues, internal services)."""
        await trio.lowlevel.checkpoint()
        return self._get(topic, queue_id, offset, max_count, tag_codes)

    def _check_pull(self, group: str, topic: str, queue_id: int, subscription, expression_type) -> SubscriptionData | PullResult:
        if not self._running:
            return PullResult(PullStatus.SERVICE_NOT_AVAILABLE, remark="the broker is not running")
        if not self.config.broker_permission & PERM_READ:
            return PullResult(PullStatus.NO_PERMISSION, remark=f"the broker[{self.config.broker_name}] pulling message is forbidden")
        gcfg = self.groups.get_or_create(group)
        if gcfg is None:
            return PullResult(PullStatus.SUBSCRIPTION_GROUP_NOT_EXIST, remark=f"subscription group [{group}] does not exist")
        if not gcfg.consume_enable:
            return PullResult(PullStatus.NO_PERMISSION, remark=f"subscription group no permission, {group}")
        if topic.startswith(LMQ_TOPIC_PREFIX):
            if queue_id != 0:
                return PullResult(PullStatus.SYSTEM_ERROR, remark=f"queueId[{queue_id}] is illegal, an LMQ has queue 0 only")
        else:
            tcfg = self.topics.get(topic)
            if tcfg is None:
                return PullResult(PullStatus.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist, apply first please!")
            if not tcfg.readable:
                return PullResult(PullStatus.NO_PERMISSION, remark=f"the topic[{topic}] pulling message is forbidden")
            if queue_id < 0 or queue_id >= tcfg.read_queue_nums:
                return PullResult(PullStatus.SYSTEM_ERROR,
                                  remark=f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tcfg.read_queue_nums}]")
        if isinstance(subscription, SubscriptionData):
            return subscription
        try:
            return parse_subscription(topic, subscription, expression_type)
        except SubscriptionParseError as e:
            return PullResult(PullStatus.SUBSCRIPTION_PARSE_FAILED, remark=str(e))

    @staticmethod
    def _parkable(result: PullResult) -> bool:
        return result.status is PullStatus.PULL_NOT_FOUND or (
            result.status is PullStatus.PULL_RETRY_IMMEDIATELY and result.store_status == GetMessageStatus.NO_MATCHED_MESSAGE.name)

    def _get(self, topic: str, queue_id: int, offset: int, max_count: int, codes: frozenset[int] | None) -> PullResult:
        got = self.store.get_messages(topic, queue_id, offset, max_count, tag_codes=codes)
        status = _GET_TO_PULL.get(got.status)
        next_begin = got.next_begin_offset
        if status is None:  # no queue, or an empty one
            status = PullStatus.PULL_OFFSET_MOVED if offset != 0 else PullStatus.PULL_NOT_FOUND
        return PullResult(status, next_begin_offset=next_begin, min_offset=got.min_offset, max_offset=got.max_offset,
                          entries=got.messages, queue_offsets=got.queue_offsets, store_status=got.status.name)

    # ------------------------------------------------------------------ waiting for queues

    async def wait_for_messages(self, topic: str, queue_id: int, offset: int, deadline: float = float("inf")) -> bool:
        """Park until queue (topic, queue_id) holds an entry at ``offset`` (its max offset
        is past it): True; or until ``deadline`` (trio clock): False."""
        return await self._notifier.wait_for_messages(topic, queue_id, offset, deadline)

    def queue_changed(self, topic: str, queue_id: int) -> trio.Event:
        """An event set at the next consume-queue append to (topic, queue_id)."""
        return self._notifier.changed(topic, queue_id)

    def add_dispatch_listener(self, cb: DispatchListener) -> None:
        """``cb(topic, queue_id, next_queue_offset)`` after every consume-queue append,
        in the trio thread; it must not block (set an event, push to a channel)."""
        self._notifier.add_listener(cb)

    def remove_dispatch_listener(self, cb: DispatchListener) -> None:
        self._notifier.remove_listener(cb)

    # ------------------------------------------------------------------ offsets and groups

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET: kept in memory, persisted every flushConsumerOffsetInterval and at shutdown."""
        self.offsets.commit(group, topic, queue_id, offset)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """QUERY_CONSUMER_OFFSET: the committed offset, or None if the group never committed one."""
        return self.offsets.query(group, topic, queue_id)

    def get_group(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults when autoCreateSubscriptionGroup is on."""
        return self.groups.get_or_create(group)

    # ------------------------------------------------------------------ topics

    def get_topic(self, name: str) -> TopicConfig | None:
        return self.topics.get(name)

    async def update_topic(self, cfg: TopicConfig) -> TopicConfig:
        """UPDATE_AND_CREATE_TOPIC: create or replace, then persist topics.json."""
        self.topics.put(cfg)
        await self._persist_topics()
        return cfg

    async def ensure_topic(self, name: str, queue_nums: int = 1, perm: int = PERM_READ | PERM_WRITE) -> TopicConfig:
        """A topic the broker needs for itself (``%RETRY%G``, ``%DLQ%G``): created if absent."""
        existed = name in self.topics
        cfg = self.topics.create_if_absent(name, queue_nums, perm)
        if not existed:
            await self._persist_topics()
        return cfg

    async def delete_topic(self, name: str) -> bool:
        """DELETE_TOPIC_IN_BROKER: forget the config, its offsets and its consume queues."""
        cfg = self.topics.get(name)
        if cfg is None:
            await trio.lowlevel.checkpoint()
            return False
        self.topics.delete(name)
        self.offsets.remove_topic(name)
        self._round_robin.pop(name, None)
        await self._persist_topics()
        for qid in range(cfg.queue_nums):
            await trio.to_thread.run_sync(self.store.delete_queue, name, qid)
        return True

    # ------------------------------------------------------------------ queries

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.store.min_offset(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to be assigned (number of entries ever written)."""
        return self.store.max_offset(topic, queue_id)

    async def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: first offset stored at or after ``timestamp_ms``."""
        return await trio.to_thread.run_sync(self.store.offset_by_time, topic, queue_id, timestamp_ms)

    async def earliest_store_time(self, topic: str, queue_id: int) -> int:
        """GET_EARLIEST_MSG_STORETIME: store time of the queue's first message; -1 if none."""
        return await trio.to_thread.run_sync(self.store.earliest_store_time, topic, queue_id)

    async def query_message(self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0,
                            end_ts: int = 2**63 - 1) -> QueryResult:
        """QUERY_MESSAGE: entries whose KEYS or UNIQ_KEY is ``key``, stored in [begin_ts, end_ts]."""
        got = await trio.to_thread.run_sync(self.store.query_by_key, topic, key, max_num, begin_ts, end_ts)
        return QueryResult(entries=got.messages, index_last_update_timestamp=got.index_last_update_timestamp,
                           index_last_update_phy_offset=got.index_last_update_phy_offset)

    async def read_at(self, physical_offset: int) -> bytes | None:
        """VIEW_MESSAGE_BY_ID: the entry at a commit-log offset, or None."""
        return await trio.to_thread.run_sync(self.store.read_at, physical_offset)

    async def view_message(self, msg_id: str) -> StoredMessage | None:
        """The message of an offset message id (``SendResult.msg_id``), or None."""
        try:
            _host, phys = parse_offset_msg_id(msg_id)
        except ValueError:
            await trio.lowlevel.checkpoint()
            return None
        raw = await self.read_at(phys)
        return None if raw is None else decode_message(raw)

    # ------------------------------------------------------------------ persistence

    async def persist(self) -> None:
        """Write topics, subscription groups and consumer offsets now."""
        await self._persist_topics()
        await self._persist_offsets(force=True)

    async def _persist_topics(self) -> None:
        async with self._persist_lock:
            snapshot = self.topics.to_json()
            await trio.to_thread.run_sync(write_json_atomic, self.config_dir / TOPICS_FILE, snapshot)

    async def _persist_offsets(self, force: bool = False) -> None:
        async with self._persist_lock:
            if force or self.offsets.dirty:
                self.offsets.dirty = False
                snapshot = self.offsets.to_json()
                await trio.to_thread.run_sync(write_json_atomic, self.config_dir / OFFSETS_FILE, snapshot)
            if force or self.groups.dirty:
                self.groups.dirty = False
                snapshot = self.groups.to_json()
                await trio.to_thread.run_sync(write_json_atomic, self.config_dir / GROUPS_FILE, snapshot)

    async def _persist_loop(self) -> None:
        interval = self.config.flush_consumer_offset_interval / 1000
        while True:
            await trio.sleep(interval)
            try:
                await self._persist_offsets()
            except OSError:
                log.exception("persisting consumer offsets failed; will retry")
                self.offsets.dirty = self.groups.dirty = True

    # ------------------------------------------------------------------ retention

    async def delete_expired(self) -> object:
        """Run retention now (what the periodic task does at ``deleteWhen`` hours)."""
        return await trio.to_thread.run_sync(self.store.delete_expired, _now_ms())

    async def _retention_loop(self) -> None:
        interval = self.config.clean_resource_interval / 1000
        hours = self.config.delete_hours()
        while True:
            await trio.sleep(interval)
            if hours is not None and time.localtime().tm_hour not in hours:
                continue
            try:
                await self.delete_expired()
            except OSError:
                log.exception("retention pass failed; will retry")

    # ------------------------------------------------------------------ internals

    def _log_end(self) -> int:
        return self.store.max_phy_offset

    @property
    def flushed_offset(self) -> int:
        """Commit-log offset below which every entry is on disk (as seen by the flusher)."""
        return self._flusher.flushed_offset if self._flusher else self.store.flushed_offset

    @property
    def flush_count(self) -> int:
        """fsyncs of the commit log done by the flusher (group commit observability)."""
        return self._flusher.flush_count if self._flusher else 0


@asynccontextmanager
async def open_broker(config: BrokerConfig | None = None, store_config: StoreConfig | None = None) -> AsyncIterator[Broker]:
    """Run a broker for the duration of the block; it shuts down cleanly on exit."""
    broker = Broker(config or BrokerConfig(), store_config)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        try:
            yield broker
        finally:
            nursery.cancel_scope.cancel()
