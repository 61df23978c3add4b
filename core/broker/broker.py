"""`Broker`: the in-process broker the MQTT gateway and the remoting processors call.

It owns one `MessageStore` and the tables around it (topics, subscription
groups, consumer offsets), and runs its background tasks (flusher, config
persister, retention) in one nursery under `Broker.run`.

Its send and pull paths live in `sending.SendPath` and `pulling.PullPath`
(mixed in; see their rules). Rules kept here:
- All broker state is touched only in the trio thread. Store appends and
  in-memory reads (get_messages, min/max offset) run inline: they are
  page-cache work. fsync, index lookups, file deletion and config-file
  writes run through `trio.to_thread.run_sync`.
- Running a broker lowers the interpreter's GIL switch interval to at most
  ``GIL_SWITCH_INTERVAL_S``: a worker thread doing Python work (the periodic
  flush hashes index keys) otherwise keeps the trio thread waiting up to
  5 ms (CPython's default) each time it gives the GIL up for a send or recv.
- Topic changes are persisted (topics.json) before the call that made them
  returns; consumer offsets and groups every ``flushConsumerOffsetInterval``
  when changed; all three at shutdown. Files are replaced atomically.
- Shutdown (cancellation of `run`) wakes every parked pull, persists topics,
  groups and offsets (bounded in time), then always shuts the store down
  (final flush, clean-shutdown marker, lock released), shielded.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import trio

from core.store import LatencyHistogram, MessageStore, RecoveryReport, StoreConfig
from core.store.message import StoredMessage, decode_message, pack_host, parse_offset_msg_id

from .config import PERM_READ, PERM_WRITE, BrokerConfig, BrokerRole, FlushDiskType, store_config_for
from .flush import CommitLogFlusher
from .group_gets import GroupGetRates
from .hooks import TopicHooks
from .jsonfile import read_json, write_json_atomic
from .notify import QueueNotifier
from .offsets import ConsumerOffsetTable, SubscriptionGroupConfig, SubscriptionGroupTable
from .pulling import LMQ_TOPIC_PREFIX, PullPath
from .results import QueryResult
from .sending import PutHook, Replicator, SendPath, StoredHook
from .topics import (
    OFFSET_MOVED_EVENT, SCHEDULE_QUEUE_NUMS, SCHEDULE_TOPIC, SELF_TEST_TOPIC, TopicConfig, TopicTable, is_system_topic,
    validate_topic,
)
from .uniq_key import UniqKeyGenerator

log = logging.getLogger(__name__)

TOPICS_FILE = "topics.json"
OFFSETS_FILE = "consumerOffset.json"
GROUPS_FILE = "subscriptionGroup.json"
SHUTDOWN_TIMEOUT_S = 30.0

__all__ = ["Broker", "open_broker", "LMQ_TOPIC_PREFIX", "PutHook", "Replicator", "StoredHook"]


def _now_ms() -> int:
    return int(time.time() * 1000)


GIL_SWITCH_INTERVAL_S = 0.0005


class Broker(SendPath, PullPath):
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
        self.get_counts: dict[str, int] = {}  # topic -> messages pulled by consumers (pulling._count_gets)
        self.group_gets = GroupGetRates()  # (group, topic) -> pull rate, for GET_CONSUME_STATS
        self.durable_latency = LatencyHistogram()  # seconds a SYNC_FLUSH / SYNC_MASTER send waited (sending)
        self._flusher: CommitLogFlusher | None = None
        self._put_hooks: list[tuple[PutHook, frozenset | None]] = []  # (hook, its `when` names or None)
        self._put_always: list[PutHook] = []  # the hooks without `when`, in order
        self._put_triggers: tuple[str, ...] = ()  # every hook's `when` names
        self._stored_hooks = TopicHooks()  # the stored hooks and the hooks of each topic
        self._ahead_wanted = trio.Event()  # the store asked for its next commit-log segment (_segment_ahead_loop)
        # The timer-wheel service (core.timers) when one runs; runtime info shows it.
        self.timers = None
        # This process's RocketMQ 5 gRPC port (core.proxy sets it; 0: none). Runtime info tells
        # it to other brokers' gRPC services, whose routes name it for this broker's queues.
        self.grpc_port = 0
        self._round_robin: dict[str, int] = {}
        self._persist_lock = trio.Lock()
        self._written = 0
        self._running = False
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._sync_master = config.broker_role is BrokerRole.SYNC_MASTER
        self._must_wait = self._sync_flush or self._sync_master
        # core/ha sets this on a SYNC_MASTER; without it SYNC_MASTER sends answer SLAVE_NOT_AVAILABLE.
        self.replicator: Replicator | None = None
        # core/ha's controller sets this when the master lease is lost: sends are refused from then on
        self.fenced = False
        self._sync_flush_timeout_s = config.sync_flush_timeout / 1000

    @property
    def sends_wait(self) -> bool:
        """Whether a stored send waits before it is answered (SYNC_FLUSH: for
        the disk; SYNC_MASTER: for a slave). Fixed for the broker's life."""
        return self._must_wait

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
        if c.trace_topic_enable:
            # one queue, like RocketMQ's TopicConfigManager: records are found by key, not read in order
            out.append(TopicConfig(c.msg_trace_topic_name, 1, 1, rw))
        return {t.topic_name: t for t in out}

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Open the store, serve until cancelled, then shut down cleanly."""
        if sys.getswitchinterval() > GIL_SWITCH_INTERVAL_S:
            sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        self._notifier.bind()
        self.store.add_dispatch_listener(self._notifier.on_dispatch)
        ahead = self.store.commitlog.ahead  # warmMapedFileEnable: the next segment made ahead through trio
        if ahead is not None:
            token = trio.lowlevel.current_trio_token()
            ahead.on_request = lambda: token.run_sync_soon(self._ahead_wanted.set)
        await trio.to_thread.run_sync(self._open_blocking)
        self._written = self._log_end()
        # SYNC_FLUSH acks wait for the commit log alone, ASYNC_FLUSH (any role)
        # flushes it every flushIntervalCommitLog; queues, index and checkpoint
        # follow every flushIntervalConsumeQueue in both modes
        self._flusher = CommitLogFlusher(self.store.flush, self._log_end,
                                         interval_s=self.config.flush_interval_consume_queue / 1000,
                                         flushed=self._log_end(), flush_log=self.store.flush_log,
                                         log_interval_s=None if self._sync_flush else self.config.flush_interval_commit_log / 1000)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self._flusher.run)
                nursery.start_soon(self._persist_loop)
                nursery.start_soon(self._retention_loop)
                if ahead is not None:
                    nursery.start_soon(self._segment_ahead_loop, ahead)
                self._running = True
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._running = False
            self._notifier.close()
            with trio.CancelScope(shield=True):
                await self._shutdown()

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
        """Persist the tables (bounded in time), then shut the store down
        whatever happened: its flush, clean marker and lock release must not
        be skipped because persisting ran out of time or failed."""
        try:
            with trio.move_on_after(SHUTDOWN_TIMEOUT_S) as scope:
                await self.persist()
            if scope.cancelled_caught:
                log.error("persisting the broker's tables did not finish in %.0f s", SHUTDOWN_TIMEOUT_S)
        finally:
            await trio.to_thread.run_sync(self.store.shutdown)  # flushes log, queues, index; clean marker

    @property
    def running(self) -> bool:
        return self._running

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

    async def recover_topics_from_store(self) -> list[str]:
        """A promoted slave's topics: every topic with consume queues in the
        (replicated) store but no config gets one, its queue count from the
        highest queue id seen; light queues (MQTT sessions) and the broker's
        own system topics are left alone. Returns the topics created."""
        made = []
        for topic in self.store.topics():
            if topic in self.topics or topic.startswith(LMQ_TOPIC_PREFIX) or is_system_topic(topic) or validate_topic(topic):
                continue
            qids = self.store.queue_ids(topic)
            self.topics.create_if_absent(topic, max(max(qids) + 1, 1) if qids else 1)
            made.append(topic)
        if made:
            await self._persist_topics()
        return made

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

    async def delete_queue(self, topic: str, queue_id: int) -> None:
        """Drop one consume queue's files (an ended MQTT session queue)."""
        await trio.to_thread.run_sync(self.store.delete_queue, topic, queue_id)

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

    async def earliest_message_time(self) -> int:
        """Store time of the first message the commit log still holds; -1 if none
        (``getEarliestMessageTime``, runtime info's ``earliestMessageTimeStamp``)."""
        return await trio.to_thread.run_sync(self.store.earliest_store_time, None)

    async def store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at a queue offset; -1 if none (topic status)."""
        return await trio.to_thread.run_sync(self.store.store_time, topic, queue_id, offset)

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
            except OSError as e:  # a full disk: one line each time, the offsets stay in memory
                log.error("persisting consumer offsets failed, will retry: %s", e)
                self.offsets.dirty = self.groups.dirty = True

    # ------------------------------------------------------------------ retention

    async def delete_expired(self) -> object:
        """Run retention now (what the periodic task does at ``deleteWhen`` hours)."""
        return await trio.to_thread.run_sync(self.store.delete_expired, _now_ms())

    async def _segment_ahead_loop(self, ahead) -> None:
        """Make each commit-log segment asked for ahead (`NextSegment`) in a
        worker thread: writing a warm segment takes as long as a segment of
        writes.  `_ahead_wanted` is set at the store's request, from any thread."""
        while True:
            await self._ahead_wanted.wait()
            self._ahead_wanted = trio.Event()
            await trio.to_thread.run_sync(ahead.make_one)

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
    def flush_latency(self) -> LatencyHistogram | None:
        """Seconds per commit-log fsync of the flusher (None before it runs)."""
        return self._flusher.latency if self._flusher else None

    def page_cache_busy_ms(self) -> float:
        """How long the running commit-log flush has taken so far, in ms (0 when none runs).

        RocketMQ's ``isOSPageCacheBusy`` measures the time a put has held the
        commit-log lock. Our appends run in the trio thread, so a stalled page
        cache shows in the flush that runs in a worker thread instead."""
        started = self._flusher.flush_started if self._flusher else None
        return 0.0 if started is None else (trio.current_time() - started) * 1000.0

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
