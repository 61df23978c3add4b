"""Queue locks for orderly consumption (LOCK_BATCH_MQ 41 / UNLOCK_BATCH_MQ 42).

Modelled on RocketMQ 4.9.x ``RebalanceLockManager``. Pure: time is passed in.

Invariants kept here:
- A message queue of a group is held by at most one client id at a time.
- A lock lasts ``lease_ms`` (60 s, ``rocketmq.broker.rebalance.lockMaxLiveTime``)
  from its last lock request; after that any client may take it. Asking
  again for a lock one already holds renews it.
- Unlock only releases locks the asking client holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

LOCK_LEASE_MS = 60_000


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "MessageQueue":
        return cls(str(d["topic"]), str(d.get("brokerName", "")), int(d["queueId"]))


@dataclass(slots=True)
class _Lock:
    client_id: str
    last_update_ms: int


class LockTable:
    def __init__(self, lease_ms: int = LOCK_LEASE_MS) -> None:
        self.lease_ms = lease_ms
        self._locks: dict[str, dict[MessageQueue, _Lock]] = {}

    def _live(self, lock: _Lock | None, now_ms: int) -> bool:
        return lock is not None and now_ms - lock.last_update_ms <= self.lease_ms

    def try_lock(self, group: str, mqs: Iterable[MessageQueue], client_id: str, now_ms: int) -> set[MessageQueue]:
        """Lock what can be locked for ``client_id``; the queues it now holds."""
        table = self._locks.setdefault(group, {})
        held = set()
        for mq in mqs:
            lock = table.get(mq)
            if lock is not None and lock.client_id == client_id:
                lock.last_update_ms = now_ms
                held.add(mq)
            elif not self._live(lock, now_ms):
                table[mq] = _Lock(client_id, now_ms)
                held.add(mq)
        return held

    def unlock(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        table = self._locks.get(group)
        if not table:
            return
        for mq in mqs:
            lock = table.get(mq)
            if lock is not None and lock.client_id == client_id:
                del table[mq]
        if not table:
            del self._locks[group]

    def holder(self, group: str, mq: MessageQueue, now_ms: int) -> str | None:
        lock = self._locks.get(group, {}).get(mq)
        return lock.client_id if self._live(lock, now_ms) else None
