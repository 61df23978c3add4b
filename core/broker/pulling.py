"""The pull path of `Broker` (mixed into it): checks, store reads, long polling.

Rules kept here:
- A pull maps the store's `GetMessageStatus` to the codes and
  ``nextBeginOffset`` of reference 2.5 (``_GET_TO_PULL``).
- A pull that finds nothing (19), or finds only entries its tag or SQL92
  filter rejects (SQL92: on the properties read from the commit log), and may suspend, parks on the queue's dispatch event until its
  deadline (``suspendTimeoutMillis``, or ``shortPollingTimeMills`` when
  long polling is off) and re-reads after each wake-up from where the last
  read stopped; at the deadline it answers its last result.
- Topics named ``%LMQ%...`` (light message queues) need no topic config and
  have queue 0 only, as in RocketMQ; `read_queue` skips every check.
- ``suggestWhichBrokerId`` follows 4.x ``PullMessageProcessor``: 0 (the
  master) unless ``slaveReadEnable``; with it, the group's
  ``whichBrokerWhenConsumeSlowly`` when the pull is slow (the commit log
  holds more than RAM * ``accessMessageInMemoryMaxRatio`` / 100 bytes after
  the last entry read: `pulling_from_slave_suggested`), else the group's
  ``brokerId``. Same rule on master and slave.
- On a slave (``offsetCheckInSlave`` off, as 4.x by default) an offset the
  slave cannot serve is never corrected: ``nextBeginOffset`` stays the
  requested one, and OFFSET_MOVED becomes PULL_RETRY_IMMEDIATELY pointing
  at the group's ``brokerId``: the slave may only be behind its master.
  A slave never stores a pull's COMMIT_OFFSET (4.x ``storeOffsetEnable``).
"""

from __future__ import annotations

import os

import trio

from core.store.errors import GetMessageStatus
from core.store.message import PHYSICALOFFSET_POS

from .config import PERM_READ, BrokerRole
from .notify import DispatchListener
from .results import PullResult, PullStatus
from .subscription import SubscriptionData, SubscriptionParseError, parse_subscription, property_filter_refusal

LMQ_TOPIC_PREFIX = "%LMQ%"  # light message queues: no topic config, queue 0 only

# Pull outcome per store status (reference 2.5); None = moved unless the offset is 0.
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
# Store outcomes whose nextBeginOffset a master corrects and a slave keeps (4.x ``nextOffsetCorrection``).
_CORRECTED = frozenset(s.name for s in (
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_TOO_SMALL,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY, GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_FOUND_NULL))
MASTER_ID = 0
DEFAULT_PHYSICAL_MEMORY = 24 * 1024**3  # what 4.x StoreUtil assumes when the OS will not say


def total_physical_memory() -> int:
    """Bytes of RAM (4.x ``StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE``)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return DEFAULT_PHYSICAL_MEMORY
    return total if total > 0 else DEFAULT_PHYSICAL_MEMORY


def pulling_from_slave_suggested(max_phy_offset: int, pulling_phy_offset: int, physical_memory: int,
                                 ratio_percent: int) -> bool:
    """4.x ``suggestPullingFromSlave``: more than ``ratio_percent`` of RAM of commit log
    lies past the entry being pulled (so it is likely read from disk, not page cache)."""
    return max_phy_offset - pulling_phy_offset > int(physical_memory * (ratio_percent / 100.0))


def suggest_which_broker_id(slave_read_enable: bool, slow: bool, which_broker_when_consume_slowly: int,
                            group_broker_id: int) -> int:
    """The broker id a pull response points the consumer at (4.x ``PullMessageProcessor``)."""
    if not slave_read_enable:
        return MASTER_ID
    return which_broker_when_consume_slowly if slow else group_broker_id



class PullPath:
    """Pull and queue-wait methods of `Broker`; state set up in ``Broker.__init__``."""

    # RAM in bytes for the slow-pull rule; tests may set it on an instance to a small figure.
    physical_memory: int = total_physical_memory()

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
        codes, match = sub.code_filter(), sub.entry_filter()
        result = self._get(topic, queue_id, offset, max_count, codes, match)
        if suspend_timeout_ms is None or not self._parkable(result):
            await trio.lowlevel.checkpoint()
            return self._advise(group, offset, self._count_gets(group, topic, result))
        timeout_ms = suspend_timeout_ms if self.config.long_polling_enable else self.config.short_polling_time_mills
        deadline = trio.current_time() + max(0, timeout_ms) / 1000
        while self._parkable(result):
            offset = result.next_begin_offset if result.status is PullStatus.PULL_RETRY_IMMEDIATELY else offset
            if not await self._notifier.wait_for_messages(topic, queue_id, offset, deadline):
                break
            if not self._running:
                return PullResult(PullStatus.SERVICE_NOT_AVAILABLE, remark="the broker is shutting down")
            result = self._get(topic, queue_id, offset, max_count, codes, match)
        return self._advise(group, offset, self._count_gets(group, topic, result))

    def _count_gets(self, group: str, topic: str, result: PullResult) -> PullResult:
        """Messages handed to consumers, per topic of the topic table (``get_counts``,
        read by /metrics) and per (group, topic) (``group_gets``, GET_CONSUME_STATS);
        once per pull answer, never per message. Light message queues (one per
        MQTT session) are not counted: their names are per client."""
        if result.entries and not topic.startswith(LMQ_TOPIC_PREFIX):
            counts = self.get_counts
            n = len(result.entries)
            counts[topic] = counts.get(topic, 0) + n
            self.group_gets.count(group, topic, n)
        return result

    def _advise(self, group: str, offset: int, result: PullResult) -> PullResult:
        """Set ``suggestWhichBrokerId``, and on a slave leave ``offset`` (the one
        the result was read at) uncorrected (module docstring)."""
        config = self.config
        if config.broker_role is BrokerRole.SLAVE:
            if result.store_status in _CORRECTED:
                result.next_begin_offset = offset
            if result.status is PullStatus.PULL_OFFSET_MOVED:
                gcfg = self.groups.get(group)
                result.status = PullStatus.PULL_RETRY_IMMEDIATELY
                result.suggest_which_broker_id = gcfg.broker_id if gcfg is not None else MASTER_ID
                return result
        if not config.slave_read_enable:
            return result  # suggest_which_broker_id stays 0, the master
        gcfg = self.groups.get(group)
        if gcfg is None:
            return result
        slow = bool(result.entries) and pulling_from_slave_suggested(
            self.store.max_phy_offset, int.from_bytes(result.entries[-1][PHYSICALOFFSET_POS:PHYSICALOFFSET_POS + 8], "big"),
            self.physical_memory, config.access_message_in_memory_max_ratio)
        result.suggest_which_broker_id = suggest_which_broker_id(
            True, slow, gcfg.which_broker_when_consume_slowly, gcfg.broker_id)
        return result

    def queue_waited_on(self, topic: str, queue_id: int) -> bool:
        """Whether a parked pull (or a session) waits for the queue to grow."""
        return self._notifier.waiting(topic, queue_id)

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
            sub = subscription
        else:
            try:
                sub = parse_subscription(topic, subscription, expression_type)
            except SubscriptionParseError as e:
                return PullResult(PullStatus.SUBSCRIPTION_PARSE_FAILED, remark=str(e))
        if sub.is_sql92 and not self.config.enable_property_filter:  # after the parse, as 4.x
            return PullResult(PullStatus.SYSTEM_ERROR, remark=property_filter_refusal(sub.expression_type))
        return sub

    @staticmethod
    def _parkable(result: PullResult) -> bool:
        return result.status is PullStatus.PULL_NOT_FOUND or (
            result.status is PullStatus.PULL_RETRY_IMMEDIATELY and result.store_status == GetMessageStatus.NO_MATCHED_MESSAGE.name)

    def _get(self, topic: str, queue_id: int, offset: int, max_count: int, codes: frozenset[int] | None,
             match=None) -> PullResult:
        got = self.store.get_messages(topic, queue_id, offset, max_count, tag_codes=codes, entry_filter=match)
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
        """``cb(topic, queue_id, next_queue_offset)`` after consume-queue appends
        (once per queue per append call, with its newest offset), in the trio
        thread; it must not block (set an event, push to a channel)."""
        self._notifier.add_listener(cb)

    def remove_dispatch_listener(self, cb: DispatchListener) -> None:
        self._notifier.remove_listener(cb)

