"""Consumer offsets per (group, topic, queue) and subscription groups.

Rules kept here:
- An offset is the next queue offset the group will consume; committing a
  smaller one than stored is allowed (a reset or rewind), as in RocketMQ.
- Serialised forms are RocketMQ's: ``consumerOffset.json`` is
  ``{"offsetTable": {"<topic>@<group>": {"<queueId>": offset}}}`` and
  ``subscriptionGroup.json`` is ``{"dataVersion": ..., "subscriptionGroupTable":
  {group: SubscriptionGroupConfig}}``. Keys are written quoted (standard
  JSON); the reader also takes fastjson's bare numeric keys.
- ``dirty`` tells the periodic persister whether there is anything to write.
- A slave takes its master's tables whole (4.x ``SlaveSynchronize``):
  `ConsumerOffsetTable.put_all` replaces each ``topic@group`` the master
  has and keeps the others (``putAll``); `SubscriptionGroupTable.replace_all`
  replaces the table and its data version when the versions differ. Both
  read the whole body before changing anything: a bad one (ValueError)
  leaves the table as it was.
- No I/O here; the broker writes `to_json` output from a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator

from .topics import DataVersion

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetTable:
    def __init__(self) -> None:
        self._table: dict[tuple[str, str], dict[int, int]] = {}
        self.dirty = False

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        queues = self._table.get((topic, group))
        if queues is None:
            queues = self._table[(topic, group)] = {}
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        queues = self._table.get((topic, group))
        return None if queues is None else queues.get(queue_id)

    def queues(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._table.get((topic, group), {}))

    def topics_of(self, group: str) -> set[str]:
        return {t for (t, g) in self._table if g == group}

    def groups_of(self, topic: str) -> set[str]:
        return {g for (t, g) in self._table if t == topic}

    def items(self) -> Iterator[tuple[str, str, int, int]]:
        """(group, topic, queue_id, offset) for every stored offset."""
        for (topic, group), queues in self._table.items():
            for qid, off in queues.items():
                yield group, topic, qid, off

    def remove_group(self, group: str, topic: str | None = None) -> None:
        for key in [k for k in self._table if k[1] == group and (topic is None or k[0] == topic)]:
            del self._table[key]
            self.dirty = True

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self._table if k[0] == topic]:
            del self._table[key]
            self.dirty = True

    def to_json(self) -> dict[str, Any]:
        return {"offsetTable": {
            f"{topic}{TOPIC_GROUP_SEPARATOR}{group}": {str(q): o for q, o in sorted(queues.items())}
            for (topic, group), queues in self._table.items()
        }}

    def load_json(self, obj: dict[str, Any]) -> None:
        self._table.update(_parse_offsets(obj.get("offsetTable") or {}))

    def put_all(self, obj: dict[str, Any]) -> int:
        """Take a master's ``consumerOffset.json`` form: each of its ``topic@group``
        keys replaces ours, other keys stay. Returns how many keys it held;
        ValueError (nothing changed) if ``obj`` is not that form."""
        table = obj.get("offsetTable") if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            raise ValueError("the body has no offsetTable object")
        parsed = _parse_offsets(table)
        for key, queues in parsed.items():
            if self._table.get(key) != queues:
                self._table[key] = queues
                self.dirty = True
        return len(parsed)


def _parse_offsets(table: dict[Any, Any]) -> dict[tuple[str, str], dict[int, int]]:
    out: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in table.items():
        topic, sep, group = str(key).rpartition(TOPIC_GROUP_SEPARATOR)
        if not sep:
            continue
        if not isinstance(queues, dict):
            raise ValueError(f"offsets of {key!r} are not an object")
        try:
            out[(topic, group)] = {int(q): int(o) for q, o in queues.items()}
        except TypeError as e:
            raise ValueError(f"offsets of {key!r}: {e}") from None
    return out


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """RocketMQ ``SubscriptionGroupConfig`` with its defaults."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False  # RocketMQ 5: pop keeps each queue in order (FIFO groups)

    _JSON = (
        ("groupName", "group_name"), ("consumeEnable", "consume_enable"),
        ("consumeFromMinEnable", "consume_from_min_enable"), ("consumeBroadcastEnable", "consume_broadcast_enable"),
        ("retryQueueNums", "retry_queue_nums"), ("retryMaxTimes", "retry_max_times"), ("brokerId", "broker_id"),
        ("whichBrokerWhenConsumeSlowly", "which_broker_when_consume_slowly"),
        ("notifyConsumerIdsChangedEnable", "notify_consumer_ids_changed_enable"),
        ("consumeMessageOrderly", "consume_message_orderly"),
    )

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, a) for k, a in self._JSON}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SubscriptionGroupConfig:
        return cls(**{a: obj[k] for k, a in cls._JSON if k in obj})


class SubscriptionGroupTable:
    def __init__(self, *, auto_create: bool) -> None:
        self.auto_create = auto_create
        self._table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion().next()
        self.dirty = False

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self._table.get(group)

    def get_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """``findSubscriptionGroupConfig``: created when auto-creation is on."""
        cfg = self._table.get(group)
        if cfg is None and self.auto_create:
            cfg = self.put(SubscriptionGroupConfig(group))
        return cfg

    def put(self, cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        if self._table.get(cfg.group_name) != cfg:
            self._table[cfg.group_name] = cfg
            self._changed()
        return cfg

    def update(self, group: str, **changes: Any) -> SubscriptionGroupConfig:
        base = self._table.get(group) or SubscriptionGroupConfig(group)
        return self.put(replace(base, **changes))

    def delete(self, group: str) -> bool:
        if self._table.pop(group, None) is None:
            return False
        self._changed()
        return True

    def all(self) -> dict[str, SubscriptionGroupConfig]:
        return dict(self._table)

    def _changed(self) -> None:
        self.data_version = self.data_version.next()
        self.dirty = True

    def to_json(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "subscriptionGroupTable": {g: c.to_json() for g, c in sorted(self._table.items())},
        }

    def replace_all(self, obj: dict[str, Any], *, force: bool = False) -> bool:
        """Take a master's ``subscriptionGroup.json`` form, table and data version,
        unless its version is ours already (False) and not ``force``. ValueError
        (nothing changed) if ``obj`` is not that form."""
        table = obj.get("subscriptionGroupTable") if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            raise ValueError("the body has no subscriptionGroupTable object")
        try:
            version = DataVersion.from_json(obj.get("dataVersion"))
            configs = {}
            for name, item in table.items():
                cfg = SubscriptionGroupConfig.from_json({"groupName": str(name), **item})
                configs[cfg.group_name] = cfg
        except (TypeError, AttributeError) as e:
            raise ValueError(f"bad subscription group table: {e}") from None
        if version == self.data_version and not force:
            return False
        self._table = configs
        self.data_version = version
        self.dirty = True
        return True

    def load_json(self, obj: dict[str, Any]) -> None:
        for name, item in (obj.get("subscriptionGroupTable") or {}).items():
            cfg = SubscriptionGroupConfig.from_json({"groupName": name, **item})
            self._table[cfg.group_name] = cfg
        saved = DataVersion.from_json(obj.get("dataVersion"))
        self.data_version = DataVersion(max(saved.timestamp, self.data_version.timestamp), saved.counter)
