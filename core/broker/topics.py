"""Topics: their configs, the table that holds them, and name rules.

Rules kept here:
- A topic name matches ``^[%|a-zA-Z0-9_-]+$`` and has at most 127
  characters (RocketMQ's ``TopicValidator``); `validate_topic` says why not.
- Every change to the table (create, update, delete) bumps the data
  version (counter + timestamp), which the name-server registration sends
  so that peers can tell a stale route table from a fresh one.
- An unknown topic is created on first send only from a default topic
  (``TBW102``) that carries ``PERM_INHERIT``; that permission is present
  when ``autoCreateTopicEnable`` is on. The new topic gets
  ``min(requested, default's write queues)`` queues and the default's
  permission without INHERIT. Retry topics (``%RETRY%<group>``) get one
  queue with read+write whatever the setting, like RocketMQ.
- The table's serialised form is RocketMQ's ``topics.json``:
  ``{"dataVersion": {...}, "topicConfigTable": {name: TopicConfig}}``.
  The table itself does no I/O; the broker persists `to_json` output.
"""

from __future__ import annotations

import enum
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

from core.store.message import TIMER_TOPIC

from .config import PERM_INHERIT, PERM_READ, PERM_WRITE

TOPIC_MAX_LENGTH = 127
_VALID_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]+$")

# System topics (TopicValidator / MixAll)
DEFAULT_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
SCHEDULE_QUEUE_NUMS = 18  # one queue per 4.x delay level

SYSTEM_TOPICS = frozenset({
    DEFAULT_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT, SCHEDULE_TOPIC, TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TRACE_TOPIC, BENCHMARK_TOPIC,
})
# Producers may not send to these (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET, and
# the timer wheel's topic: an entry there names its own real topic and due time);
# the broker's own services write them through ``send(..., internal=True)``.
NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC,
                                     TIMER_TOPIC})


def validate_topic(name: str) -> str | None:
    """None if ``name`` is a valid broker topic, else the reason it is not."""
    if not name:
        return "the topic name is empty"
    if len(name) > TOPIC_MAX_LENGTH:
        return f"the topic name is longer than {TOPIC_MAX_LENGTH} characters"
    if not _VALID_TOPIC.match(name):
        return f"the topic name {name!r} contains characters outside [%|a-zA-Z0-9_-]"
    return None


def is_system_topic(name: str) -> bool:
    return name in SYSTEM_TOPICS or name.startswith(SYSTEM_TOPIC_PREFIX)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


class TopicFilterType(enum.Enum):
    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """RocketMQ ``TopicConfig``; JSON field names as in topics.json."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: TopicFilterType = TopicFilterType.SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False

    def __post_init__(self) -> None:
        if self.read_queue_nums < 0 or self.write_queue_nums < 0:
            raise ValueError(f"queue counts must be >= 0: {self}")
        if not 0 <= self.perm <= 15:
            raise ValueError(f"perm must be 0..15: {self.perm}")

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def inherited(self) -> bool:
        return bool(self.perm & PERM_INHERIT)

    @property
    def queue_nums(self) -> int:
        """Queues that may hold data: max(read, write)."""
        return max(self.read_queue_nums, self.write_queue_nums)

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order, "perm": self.perm, "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type.value, "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicConfig:
        return cls(
            topic_name=str(obj["topicName"]), read_queue_nums=int(obj.get("readQueueNums", 16)),
            write_queue_nums=int(obj.get("writeQueueNums", 16)), perm=int(obj.get("perm", PERM_READ | PERM_WRITE)),
            topic_filter_type=TopicFilterType(obj.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=int(obj.get("topicSysFlag", 0)), order=bool(obj.get("order", False)),
        )


@dataclass(frozen=True, slots=True)
class DataVersion:
    """RocketMQ ``DataVersion``: compared as (timestamp, counter)."""

    timestamp: int = 0
    counter: int = 0

    def next(self) -> DataVersion:
        return DataVersion(int(time.time() * 1000), self.counter + 1)

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None) -> DataVersion:
        obj = obj or {}
        return cls(int(obj.get("timestamp", 0)), int(obj.get("counter", 0)))


TopicListener = Callable[[str, "TopicConfig | None"], None]


class TopicTable:
    """Topic name -> `TopicConfig`, with the data version and change listeners.

    Listeners are called as ``cb(name, config_or_None)`` after each change
    (None = deleted), in the caller's thread; they must not block.
    """

    def __init__(self, *, auto_create: bool, default_queue_nums: int, system_topics: dict[str, TopicConfig] | None = None):
        self._table: dict[str, TopicConfig] = {}
        self.get: Callable[[str], TopicConfig | None] = self._table.get  # name -> config or None (every send asks)
        self.data_version = DataVersion(int(time.time() * 1000), 0)
        self.auto_create = auto_create
        self._listeners: list[TopicListener] = []
        for cfg in (system_topics or {}).values():
            self._table[cfg.topic_name] = cfg
        if auto_create:
            self._table[DEFAULT_TOPIC] = TopicConfig(
                DEFAULT_TOPIC, default_queue_nums, default_queue_nums, PERM_INHERIT | PERM_READ | PERM_WRITE)

    def __contains__(self, name: str) -> bool:
        return name in self._table

    def __len__(self) -> int:
        return len(self._table)

    def all(self) -> dict[str, TopicConfig]:
        return dict(self._table)

    def add_listener(self, cb: TopicListener) -> None:
        self._listeners.append(cb)

    def remove_listener(self, cb: TopicListener) -> None:
        self._listeners.remove(cb)

    def put(self, cfg: TopicConfig) -> TopicConfig:
        """Create or replace a topic (admin UPDATE_AND_CREATE_TOPIC)."""
        reason = validate_topic(cfg.topic_name)
        if reason:
            raise ValueError(reason)
        old = self._table.get(cfg.topic_name)
        if old != cfg:
            self._table[cfg.topic_name] = cfg
            self._changed(cfg.topic_name, cfg)
        return cfg

    def delete(self, name: str) -> bool:
        if self._table.pop(name, None) is None:
            return False
        self._changed(name, None)
        return True

    def create_on_send(self, name: str, default_topic: str = DEFAULT_TOPIC, queue_nums: int | None = None,
                       topic_sys_flag: int = 0) -> TopicConfig | None:
        """``createTopicInSendMessageMethod``: the new config, or None if not allowed."""
        existing = self._table.get(name)
        if existing is not None:
            return existing
        default = self._table.get(default_topic)
        if default is None:
            return None
        perm = default.perm
        if default_topic == DEFAULT_TOPIC and not self.auto_create:
            perm = PERM_READ | PERM_WRITE  # TBW102 left from a run with auto-create on
        if not perm & PERM_INHERIT:
            return None
        n = default.write_queue_nums if queue_nums is None or queue_nums <= 0 else min(queue_nums, default.write_queue_nums)
        cfg = TopicConfig(name, n, n, perm & ~PERM_INHERIT, topic_sys_flag=topic_sys_flag)
        self._table[name] = cfg
        self._changed(name, cfg)
        return cfg

    def create_if_absent(self, name: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE,
                         topic_sys_flag: int = 0) -> TopicConfig:
        """Retry, DLQ and system topics the broker makes for itself."""
        existing = self._table.get(name)
        if existing is not None:
            return existing
        cfg = TopicConfig(name, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
        self._table[name] = cfg
        self._changed(name, cfg)
        return cfg

    def _changed(self, name: str, cfg: TopicConfig | None) -> None:
        self.data_version = self.data_version.next()
        for cb in list(self._listeners):
            cb(name, cfg)

    # ---- topics.json ----

    def to_json(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {n: c.to_json() for n, c in sorted(self._table.items())},
        }

    def load_json(self, obj: dict[str, Any]) -> None:
        """Merge a saved table over the built-in topics (saved wins, like RocketMQ)."""
        for name, item in (obj.get("topicConfigTable") or {}).items():
            cfg = TopicConfig.from_json(item)
            self._table[cfg.topic_name or name] = cfg
        if not self.auto_create and DEFAULT_TOPIC in self._table:
            # Auto-creation is off now: TBW102 must lose INHERIT so no topic is created from it.
            cfg = self._table[DEFAULT_TOPIC]
            self._table[DEFAULT_TOPIC] = TopicConfig(
                DEFAULT_TOPIC, cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm & ~PERM_INHERIT)
        saved = DataVersion.from_json(obj.get("dataVersion"))
        self.data_version = DataVersion(max(saved.timestamp, self.data_version.timestamp), saved.counter + 1)
