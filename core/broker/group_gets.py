"""Messages pulled per (consumer group, topic), as a rate: the ``consumeTps``
of GET_CONSUME_STATS (mqadmin ``consumerProgress``).

Rules kept here (RocketMQ's ``BrokerStatsManager`` GROUP_GET_NUMS, kept
simpler):
- Counts cover the current window, opened at most ``WINDOW_S`` ago; a
  window older than that is closed when a count arrives or a rate is asked
  for, and the next one opens. A rate is the window's count over its age (at
  least one second).
- One count per pull answer, never per message; light message queues
  (``%LMQ%``, one per MQTT session) are counted by the caller's choice.
"""

from __future__ import annotations

import time

WINDOW_S = 60.0


class GroupGetRates:
    __slots__ = ("_clock", "_opened", "_counts")

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._opened = clock()
        self._counts: dict[tuple[str, str], int] = {}

    def _roll(self) -> float:
        now = self._clock()
        if now - self._opened > WINDOW_S:
            self._opened = now
            self._counts.clear()
        return now

    def count(self, group: str, topic: str, messages: int) -> None:
        self._roll()
        key = (group, topic)
        self._counts[key] = self._counts.get(key, 0) + messages

    def tps(self, group: str, topic: str) -> float:
        """Messages per second ``group`` pulled from ``topic`` in the current window."""
        now = self._roll()
        return self._counts.get((group, topic), 0) / max(1.0, now - self._opened)
