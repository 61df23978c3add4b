"""Messages of one queue pulled but not yet acknowledged (Java ``ProcessQueue``).

Rules kept here:

- The offset a consumer may commit is the smallest offset still held (a
  message in the listener or waiting for it), or, when none is left, the
  next offset to pull (``pulled_to``: everything below it was delivered or
  filtered out by tag); so a crash re-delivers at most what was
  unacknowledged, never skips a message.
- `put` ignores offsets already held (a re-pull after an offset reset).
- Orderly consumption `take`s the lowest offsets first and either
  `commit`s them or `give_back`s them to be consumed again.
- ``dropped`` is set when the queue leaves this consumer; every loop on it
  stops and nothing more is committed from it.
- ``changed`` fires whenever messages arrive or leave, for flow control and
  for the orderly loop.
- ``bytes`` is the body size of the messages held, and `span` the distance
  from the lowest to the highest offset held (Java's ``msgSize`` and
  ``getMaxSpan``): the push consumer stops pulling on either.
"""

from __future__ import annotations

import heapq

import trio

from core.client.model import MessageExt

__all__ = ["ProcessQueue"]

LOCK_VALID_S = 30.0  # Java REBALANCE_LOCK_MAX_LIVE_TIME


class ProcessQueue:
    def __init__(self) -> None:
        self.msgs: dict[int, MessageExt] = {}
        self.bytes = 0  # body bytes of the messages held
        self._heap: list[int] = []
        self._consuming: dict[int, MessageExt] = {}  # orderly: taken, not yet committed
        self.max_offset = -1
        self.pulled_to = 0  # next offset to pull: everything below was delivered or filtered out
        self.dropped = False
        self.locked = False
        self.last_lock_time = -1e9
        self.changed = trio.Event()
        self.last_pull_ms = 0  # epoch ms, for GET_CONSUMER_RUNNING_INFO
        self.last_consume_ms = 0

    def __len__(self) -> int:
        return len(self.msgs)

    def _fire(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def put(self, msgs: list[MessageExt]) -> list[MessageExt]:
        added = []
        for m in msgs:
            if m.queue_offset not in self.msgs:
                self.msgs[m.queue_offset] = m
                self.bytes += len(m.body)
                heapq.heappush(self._heap, m.queue_offset)
                added.append(m)
                if m.queue_offset > self.max_offset:
                    self.max_offset = m.queue_offset
        if added:
            self._fire()
        return added

    def committable(self) -> int:
        heap = self._heap
        while heap and heap[0] not in self.msgs:
            heapq.heappop(heap)
        return heap[0] if heap else max(self.max_offset + 1, self.pulled_to)

    def remove(self, msgs: list[MessageExt]) -> int:
        """Drop acknowledged messages; answer the offset that may now be committed."""
        for m in msgs:
            if self.msgs.pop(m.queue_offset, None) is not None:
                self.bytes -= len(m.body)
        self._fire()
        return self.committable()

    def span(self) -> int:
        """Highest offset held minus the lowest (0 with fewer than two held)."""
        if len(self.msgs) < 2:
            return 0
        heap = self._heap
        while heap and heap[0] not in self.msgs:
            heapq.heappop(heap)
        return max(self.msgs) - heap[0] if heap else 0

    # ---- orderly ----

    def take(self, n: int) -> list[MessageExt]:
        out = []
        for off in sorted(k for k in self.msgs if k not in self._consuming)[:n]:
            m = self.msgs[off]
            self._consuming[off] = m
            out.append(m)
        return out

    def available(self) -> int:
        return len(self.msgs) - len(self._consuming)

    def commit(self, msgs: list[MessageExt]) -> int:
        for m in msgs:
            self._consuming.pop(m.queue_offset, None)
        return self.remove(msgs)

    def give_back(self, msgs: list[MessageExt]) -> None:
        for m in msgs:
            self._consuming.pop(m.queue_offset, None)
            m.reconsume_times += 1
        self._fire()

    def lock_valid(self) -> bool:
        return self.locked and trio.current_time() - self.last_lock_time < LOCK_VALID_S

    def drop(self) -> None:
        self.dropped = True
        self._fire()
