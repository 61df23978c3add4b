"""What push and pull consumers share: subscriptions, heartbeats, rebalance, offsets, one pull.

Rules kept here:

- Clustering consumers also subscribe to ``%RETRY%<group>`` with ``*``
  (messages sent back come through it); their offsets live on the broker.
  Broadcasting consumers take every queue and keep offsets in a local file.
- Rebalance (at start, on NOTIFY_CONSUMER_IDS_CHANGED, when a route
  changes, and every ``rebalance_interval``, 20 s): per subscribed topic,
  the readable queues and the group's members (GET_CONSUMER_LIST_BY_GROUP
  on a broker of the topic), both sorted, are split by
  `allocate_average`; queues no longer ours are dropped (offset committed
  first), new ones start at `start_offset`. One rebalance runs at a time.
- A new queue starts at the committed offset; without one, the
  consume-from-where rule applies: LAST (max offset; 0 for a retry topic),
  FIRST (0), TIMESTAMP (SEARCH_OFFSET_BY_TIMESTAMP; max offset for a retry
  topic). Note the broker answers 0 rather than "none" for a group new to a
  queue that still starts at 0, exactly as a Java broker does.
- A topic without a route (not created yet; ``%RETRY%`` right after the
  first heartbeat) is asked for again after 20 ms, then at doubling
  intervals up to ``missing_route_retry`` (1 s), until it has one; a route
  change then triggers a rebalance.
- RESET_CONSUMER_CLIENT_OFFSET (220, an operator's reset by time): each
  queue of that topic this consumer owns is dropped (buffered messages
  discarded, its pull cancelled), restarted at the new offset, and the
  offset committed at once (Java ``MQClientInstance.resetOffset``, without
  its 10 s pause: nothing here consumes a dropped queue after the drop).
- `pull_once` sends PULL_MESSAGE with the subscription (flag 0x4) and its
  expression type, the
  commit offset (flag 0x1, clustering), long polling (flag 0x2,
  ``suspend_ms`` 15 s; call timeout 30 s), filters tags again on the
  client (not SQL92: the broker filtered on properties), and restores
  retried messages' original topic.
- A subscription is a tag expression string or a `MessageSelector`; before
  it starts, a consumer with an SQL92 subscription sends CHECK_CLIENT_CONFIG
  to each broker of the topic and fails to start if one refuses (Java
  ``MQClientInstance.checkClientInBroker``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from core.client.allocate import allocate_average
from core.client.api import MQClientError, is_remoting_error
from core.client.instance import ClientInstance
from core.client.message_selector import EXPRESSION_TAG, MessageSelector
from core.client.model import ConsumeFromWhere, MessageExt, MessageModel, MessageQueue
from core.client.offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore, default_offset_dir
from core.client.process_queue import ProcessQueue
from core.client.route import TopicRoute
from core.client.stats import ConsumerStats, python_stacks
from core.store.java_hash import java_string_hash
from core.store.message import decode_messages

__all__ = ["ConsumerBase", "Subscription", "retry_topic"]

log = logging.getLogger("mqgate.client.consumer")

RETRY_PREFIX = "%RETRY%"
PULL_FOUND, PULL_NO_NEW_MSG, PULL_NO_MATCHED_MSG, PULL_OFFSET_ILLEGAL = 0, 19, 20, 21


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


@dataclass(slots=True)
class Subscription:
    topic: str
    expression: str = "*"
    listener: Any = None
    version: int = field(default_factory=lambda: int(time.time() * 1000))
    expression_type: str = EXPRESSION_TAG

    @property
    def tags(self) -> list[str]:
        if self.expression_type != EXPRESSION_TAG:
            return []
        e = self.expression.strip()
        if not e or e == "*":
            return []
        return [t.strip() for t in e.split("||") if t.strip()]

    def matches(self, tags: str | None) -> bool:
        if self.expression_type != EXPRESSION_TAG:
            return True  # filtered on the broker
        wanted = self.tags
        return not wanted or (tags is not None and tags in wanted)

    def to_json(self) -> dict:
        tags = self.tags
        return {
            "classFilterMode": False, "codeSet": [java_string_hash(t) for t in tags],
            "expressionType": self.expression_type,
            "subString": self.expression.strip() or "*", "subVersion": self.version, "tagsSet": tags,
            "topic": self.topic,
        }


class ConsumerBase:
    consume_type = "CONSUME_PASSIVELY"
    subscribe_retry = True  # push consumers take messages sent back through %RETRY%<group>

    def __init__(
        self,
        nursery: trio.Nursery,
        namesrv: str | list[str],
        group: str,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | None = None,
        instance_name: str | None = None,
        pull_batch_size: int = 32,
        suspend_ms: int = 15_000,
        pull_timeout: float = 30.0,
        pull_error_delay: float = 3.0,
        rebalance_interval: float = 20.0,
        persist_interval: float = 5.0,
        missing_route_retry: float = 1.0,
        offset_dir: str | Path | None = None,
        heartbeat_interval: float = 30.0,
        poll_namesrv_interval: float = 30.0,
        timeout: float = 3.0,
    ) -> None:
        if not group:
            raise ValueError("a consumer group name is needed")
        self.group = group
        self.message_model = MessageModel(message_model)
        self.consume_from = ConsumeFromWhere(consume_from)
        # Java's default consumeTimestamp: half an hour ago
        self.consume_timestamp = consume_timestamp if consume_timestamp is not None else int(time.time() * 1000) - 1_800_000
        self.pull_batch_size = pull_batch_size
        self.suspend_ms = suspend_ms
        self.pull_timeout = pull_timeout
        self.pull_error_delay = pull_error_delay
        self.rebalance_interval = rebalance_interval
        self.persist_interval = persist_interval
        self.missing_route_retry = missing_route_retry
        self._nursery = nursery
        self.instance = ClientInstance(nursery, namesrv, instance_name=instance_name,
                                       heartbeat_interval=heartbeat_interval,
                                       poll_namesrv_interval=poll_namesrv_interval, timeout=timeout)
        self.instance.owner = self
        self.subscriptions: dict[str, Subscription] = {}
        self.pqs: dict[MessageQueue, ProcessQueue] = {}
        self._scopes: dict[MessageQueue, trio.CancelScope] = {}
        self.offsets: OffsetStore
        if self.clustering:
            self.offsets = RemoteOffsetStore(self.instance, group)
        else:
            self.offsets = LocalFileOffsetStore(offset_dir or default_offset_dir(), self.instance.client_id, group)
        self._rebalance_wanted = trio.Event()
        self._rebalance_lock = trio.Lock()
        self._missing: set[str] = set()
        self._missing_added = trio.Event()
        self._n: trio.Nursery | None = None
        self._stopped = trio.Event()
        self.stopping = False
        self.rebalance_count = 0
        self.rebalanced = trio.Event()  # fires after each rebalance (then replaced)
        self.stats = ConsumerStats()
        self.started_ms = int(time.time() * 1000)

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    @property
    def clustering(self) -> bool:
        return self.message_model is MessageModel.CLUSTERING

    @property
    def retry_topic(self) -> str:
        return retry_topic(self.group)

    # ---- subscriptions ----

    def _subscribe(self, topic: str, expression: str | MessageSelector = "*", listener: Any = None) -> None:
        if isinstance(expression, MessageSelector):
            sub = Subscription(topic, expression.expression, listener, expression_type=expression.expression_type)
        else:
            sub = Subscription(topic, expression or "*", listener)
        self.subscriptions[topic] = sub
        if self.clustering and self.subscribe_retry and self.retry_topic not in self.subscriptions:
            self.subscriptions[self.retry_topic] = Subscription(self.retry_topic, "*")
        if self._n is not None:
            self._n.start_soon(self._after_subscribe, topic)

    async def _after_subscribe(self, topic: str) -> None:
        try:
            await self.instance.update_route(topic)
        except Exception as exc:
            log.info("route of %s: %s", topic, exc)
        await self.instance.heartbeat()
        self.trigger_rebalance()

    # ---- ClientOwner ----

    def heartbeat_data(self) -> tuple[list[dict], list[dict]]:
        consumer = {
            "consumeFromWhere": self.consume_from.value, "consumeType": self.consume_type, "groupName": self.group,
            "messageModel": self.message_model.value,
            "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()], "unitMode": False,
        }
        return [], [consumer]

    def topics_in_use(self) -> set[str]:
        return set(self.subscriptions)

    def on_route_changed(self, topic: str, route: TopicRoute) -> None:
        if topic in self.subscriptions:
            self._missing.discard(topic)
            self.trigger_rebalance()

    def on_consumer_ids_changed(self, group: str) -> None:
        if group == self.group:
            self.trigger_rebalance()

    def on_reset_offset(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        if group == self.group and self._n is not None and not self.stopping:
            self._n.start_soon(self.reset_offsets, topic, offsets)

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Restart the owned queues of ``topic`` named in ``offsets`` there, and commit."""
        async with self._rebalance_lock:
            for mq, offset in sorted(offsets.items(), key=lambda kv: kv[0].queue_id):
                if mq.topic == topic and mq in self.pqs:
                    await self._restart_queue(mq, offset)
                    try:
                        await self.offsets.persist(mq)
                    except Exception as exc:
                        log.info("commit of the reset offset of %s failed: %s", mq, exc)

    async def _restart_queue(self, mq: MessageQueue, offset: int) -> None:
        """Drop ``mq``'s process queue and pull (what was buffered is discarded), go on from ``offset``."""
        pq = self.pqs.pop(mq)
        pq.drop()
        scope = self._scopes.pop(mq, None)
        if scope is not None:
            scope.cancel()
        self.offsets.update(mq, offset, increase_only=False)
        await self._add_queue(mq, offset)
        log.info("%s restarts %s at offset %d", self.client_id, mq, offset)

    def trigger_rebalance(self) -> None:
        self._rebalance_wanted.set()

    # ---- lifecycle ----

    async def _run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as n:
            self._n = n
            await n.start(self.instance.run)
            await self._start_tracer(n)
            for topic in list(self.subscriptions):
                try:
                    await self.instance.update_route(topic)
                except MQClientError as exc:
                    log.info("route of %s: %s", topic, exc)
            await self._check_in_brokers()
            await self.instance.heartbeat()
            await self.rebalance()
            n.start_soon(self._rebalance_loop)
            n.start_soon(self._persist_loop)
            n.start_soon(self._missing_route_loop)
            self._start_extra(n)
            task_status.started()
            await self._stopped.wait()
            n.cancel_scope.cancel()

    async def _start_tracer(self, n: trio.Nursery) -> None:
        pass  # push consumers trace; pull consumers do not (neither does Java's)

    def _start_extra(self, n: trio.Nursery) -> None:
        pass

    async def _check_in_brokers(self) -> None:
        """CHECK_CLIENT_CONFIG for each non-TAG subscription at each broker of its topic."""
        for sub in list(self.subscriptions.values()):
            if sub.expression_type == EXPRESSION_TAG:
                continue
            route = self.instance.routes.get(sub.topic)
            for addr in sorted(route.subscribe_addrs().values()) if route is not None else ():
                await self.instance.api.check_client_config(addr, self.group, self.client_id, sub.to_json())

    async def start(self) -> None:
        if not self.subscriptions and self.consume_type == "CONSUME_PASSIVELY":
            raise MQClientError("subscribe to at least one topic before starting")
        await self._nursery.start(self._run)

    async def _rebalance_loop(self) -> None:
        while True:
            with trio.move_on_after(self.rebalance_interval):
                await self._rebalance_wanted.wait()
            self._rebalance_wanted = trio.Event()
            await self.rebalance()

    async def _persist_loop(self) -> None:
        while True:
            await trio.sleep(self.persist_interval)
            await self.offsets.persist_all()

    async def _missing_route_loop(self) -> None:
        # a %RETRY% topic is registered a few ms after our first heartbeat: ask again soon,
        # then back off to missing_route_retry
        delay = 0.02
        while True:
            if not self._missing:
                delay = 0.02
                await self._missing_added.wait()
                self._missing_added = trio.Event()
            await trio.sleep(delay)
            delay = min(delay * 2, self.missing_route_retry)
            for topic in sorted(self._missing):
                try:
                    await self.instance.update_route(topic)
                except Exception as exc:
                    log.debug("route of %s still missing: %s", topic, exc)

    # ---- rebalance ----

    async def _members(self, route: TopicRoute) -> list[str]:
        for addr in sorted(route.subscribe_addrs().values()):  # a slave knows the group too (heartbeats go to all)
            try:
                ids = await self.instance.api.get_consumer_ids(addr, self.group)
            except Exception as exc:
                log.info("consumer list of %s from %s: %s", self.group, addr, exc)
                continue
            if ids:
                return sorted(ids)
        return []

    async def rebalance(self) -> None:
        if self.stopping:
            return
        async with self._rebalance_lock:
            self.rebalance_count += 1
            routes = {t: self.instance.routes.get(t) for t in self.subscriptions}
            if any(r is not None and not r.all_addrs() <= self.instance.heartbeated for r in routes.values()):
                await self.instance.heartbeat()
            for topic, route in routes.items():
                if route is None:
                    self._missing.add(topic)
                    self._missing_added.set()
                    continue
                queues = route.subscribe_queues()
                if self.clustering:
                    members = await self._members(route)
                    if not members:
                        continue
                    mine = allocate_average(self.client_id, queues, members)
                else:
                    mine = queues
                await self._update_queues(topic, set(mine))
            self.rebalanced.set()
            self.rebalanced = trio.Event()

    async def _update_queues(self, topic: str, mine: set[MessageQueue]) -> None:
        for mq in [mq for mq in self.pqs if mq.topic == topic and mq not in mine]:
            await self._remove_queue(mq)
        for mq in sorted(mine - set(self.pqs)):
            try:
                offset = await self.start_offset(mq)
            except Exception as exc:
                log.info("cannot start %s: %s", mq, exc)
                continue
            await self._add_queue(mq, offset)

    async def _add_queue(self, mq: MessageQueue, offset: int) -> bool:
        pq = ProcessQueue()
        self.pqs[mq] = pq
        self.offsets.update(mq, offset, increase_only=False)
        scope = trio.CancelScope()
        self._scopes[mq] = scope
        assert self._n is not None
        self._n.start_soon(self._queue_task, mq, pq, offset, scope)
        log.info("%s consumes %s from offset %d", self.client_id, mq, offset)
        return True

    async def _queue_task(self, mq: MessageQueue, pq: ProcessQueue, offset: int, scope: trio.CancelScope) -> None:
        raise NotImplementedError

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, offset: int, sub: Subscription) -> None:
        """Pull ``mq`` from ``offset`` into ``pq`` until it is dropped: at most
        ``pull_threshold_for_queue`` messages held, a pause after a failed pull,
        new messages to `_deliver`, and the offset of an empty queue committed
        as it moves (OFFSET_MOVED, code 21, may move it back)."""
        while not pq.dropped:
            if self._held_back(pq):
                await pq.changed.wait()
                continue
            if not self._may_pull(pq):
                await trio.sleep(min(1.0, self.pull_error_delay))
                continue
            began = trio.current_time()
            try:
                code, next_offset, msgs = await self.pull_once(mq, offset, sub)
            except Exception as exc:
                log.info("pull %s@%d failed: %s", mq, offset, exc)
                await trio.sleep(self.pull_error_delay)
                continue
            self.stats.pulled(mq.topic, len(msgs), (trio.current_time() - began) * 1000)
            pq.last_pull_ms = int(time.time() * 1000)
            if pq.dropped:
                return
            if code == 21:
                self._offset_moved(mq, offset, next_offset)
            offset = pq.pulled_to = next_offset
            added = pq.put(msgs) if msgs else []
            if added:
                self._deliver(mq, pq, added)
            elif not len(pq):
                self.offsets.update(mq, offset, increase_only=code != 21)

    def _held_back(self, pq: ProcessQueue) -> bool:
        """True to stop pulling ``pq`` until messages leave it (flow control)."""
        return len(pq) >= self.pull_threshold_for_queue

    def _may_pull(self, pq: ProcessQueue) -> bool:
        """False to wait a moment before the next pull (an orderly queue not locked)."""
        return True

    def _offset_moved(self, mq: MessageQueue, offset: int, next_offset: int) -> None:
        """The broker said ``offset`` is illegal (code 21) and the queue goes on at ``next_offset``."""

    def _deliver(self, mq: MessageQueue, pq: ProcessQueue, added: list[MessageExt]) -> None:
        raise NotImplementedError

    async def _remove_queue(self, mq: MessageQueue) -> None:
        pq = self.pqs.pop(mq)
        pq.drop()
        scope = self._scopes.pop(mq, None)
        if scope is not None:
            scope.cancel()
        try:
            await self.offsets.persist(mq)
        except Exception as exc:
            log.info("commit on removing %s failed: %s", mq, exc)
        self.offsets.remove(mq)
        log.info("%s no longer consumes %s", self.client_id, mq)

    async def start_offset(self, mq: MessageQueue) -> int:
        stored = await self.offsets.read_stored(mq)
        if stored is not None and stored >= 0:
            return stored
        addr = await self.instance.find_broker_addr_in_subscribe(mq.broker_name, mq.topic)
        api = self.instance.api
        is_retry = mq.topic.startswith(RETRY_PREFIX)
        if self.consume_from is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return 0
        if self.consume_from is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP and not is_retry:
            return await api.search_offset(addr, mq, self.consume_timestamp)
        return 0 if is_retry and self.consume_from is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET else await api.max_offset(addr, mq)

    # ---- what an operator asks (GET_CONSUMER_RUNNING_INFO) ----

    def config_properties(self) -> dict[str, str]:
        """The consumer's settings under the Java client's field names."""
        return {"consumerGroup": self.group, "messageModel": self.message_model.value,
                "consumeFromWhere": self.consume_from.value, "consumeTimestamp": str(self.consume_timestamp),
                "pullBatchSize": str(self.pull_batch_size), "brokerSuspendMaxTimeMillis": str(self.suspend_ms),
                "pullThresholdForQueue": str(self.pull_threshold_for_queue),
                "persistConsumerOffsetInterval": str(int(self.persist_interval * 1000)),
                "instanceName": self.instance.instance_name}

    def running_info(self, *, jstack: bool = False) -> dict:
        """ConsumerRunningInfo: properties, subscriptionSet, mqTable (ProcessQueueInfo
        per queue, keyed by MessageQueue), statusTable (per topic), jstack."""
        now_ms = int(time.time() * 1000)
        now = trio.current_time()
        props = self.config_properties()
        props.update({"PROP_CONSUME_TYPE": self.consume_type, "PROP_CONSUMER_START_TIMESTAMP": str(self.started_ms),
                      "PROP_NAMESERVER_ADDR": ";".join(self.instance.namesrv_addrs)})
        mq_table = {}
        for mq, pq in sorted(self.pqs.items(), key=lambda kv: (kv[0].topic, kv[0].broker_name, kv[0].queue_id)):
            offsets = list(pq.msgs)
            mq_table[tuple(sorted(mq.to_json().items()))] = {
                "commitOffset": self.offsets.read(mq), "cachedMsgMinOffset": min(offsets, default=0),
                "cachedMsgMaxOffset": max(offsets, default=0), "cachedMsgCount": len(offsets),
                "cachedMsgSizeInMiB": sum(len(m.body) for m in pq.msgs.values()) // (1024 * 1024),
                "transactionMsgMinOffset": 0, "transactionMsgMaxOffset": 0, "transactionMsgCount": 0,
                "locked": pq.locked, "tryUnlockTimes": 0,
                "lastLockTimestamp": now_ms - int((now - pq.last_lock_time) * 1000) if pq.last_lock_time > 0 else 0,
                "droped": pq.dropped, "lastPullTimestamp": pq.last_pull_ms, "lastConsumeTimestamp": pq.last_consume_ms}
        info = {"properties": props, "subscriptionSet": [s.to_json() for _t, s in sorted(self.subscriptions.items())],
                "mqTable": mq_table, "statusTable": self.stats.status()}
        if jstack:
            info["jstack"] = python_stacks()
        return info

    # ---- pulling ----

    async def pull_once(self, mq: MessageQueue, offset: int, sub: Subscription, *, suspend: bool = True,
                        max_nums: int | None = None) -> tuple[int, int, list[MessageExt]]:
        """One PULL_MESSAGE: (pull status code, next offset, matching messages)."""
        addr = await self.instance.find_broker_addr_in_subscribe(mq.broker_name, mq.topic)
        commit = self.offsets.read(mq) if self.clustering else None
        try:
            resp = await self.instance.api.pull(
                addr, self.group, mq, offset, max_nums or self.pull_batch_size, subscription=sub.expression,
                expression_type=sub.expression_type, sub_version=sub.version, commit_offset=commit, suspend_ms=self.suspend_ms if suspend else 0,
                timeout=self.pull_timeout if suspend else self.instance.api.timeout,
            )
        except Exception as exc:
            if is_remoting_error(exc):  # the broker is gone: a slave, or a new master, may be in the route now
                await self.instance.broker_failed(mq.topic)
            raise
        msgs: list[MessageExt] = []
        if resp.code == PULL_FOUND and resp.body:
            rtopic = self.retry_topic
            for stored in decode_messages(resp.body):
                if not sub.matches(stored.properties.get("TAGS")):
                    continue
                m = MessageExt.from_stored(stored, mq.broker_name)
                m.properties["MIN_OFFSET"] = str(resp.min_offset)
                m.properties["MAX_OFFSET"] = str(resp.max_offset)
                m.restore_retry_topic(rtopic)
                msgs.append(m)
        return resp.code, resp.next_begin_offset, msgs
