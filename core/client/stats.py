"""What a consumer reports of itself when an operator asks (GET_CONSUMER_RUNNING_INFO, 307).

Rules kept here (the Java client's ``ConsumerStatsManager`` and
``ConsumerRunningInfo``):

- Per topic: pull round trip (ms) and messages pulled per second; consume
  time per message (ms), messages consumed OK and failed per second; failed
  messages in all. Rates cover the current minute window: counts since the
  window opened, over its age (at least one second). A window older than 60 s
  is closed when a count arrives or a report is made, and the next one opens.
  ``consumeFailedMsgs`` counts since the consumer started (Java: the last
  hour).
- No clock is read per message: a pull or a listener call is one count.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback

__all__ = ["ConsumerStats", "TopicStats", "python_stacks"]

WINDOW_S = 60.0


class TopicStats:
    __slots__ = ("pulls", "pull_rt_ms", "pulled", "ok", "failed", "consume_rt_ms", "failed_total")

    def __init__(self) -> None:
        self.pulls = 0
        self.pull_rt_ms = 0.0
        self.pulled = 0
        self.ok = 0
        self.failed = 0
        self.consume_rt_ms = 0.0
        self.failed_total = 0


class ConsumerStats:
    """Counts per topic for `status`; `clock` is seconds (monotonic)."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._opened = clock()
        self._topics: dict[str, TopicStats] = {}

    def _roll(self) -> None:
        """Close the window once it is older than WINDOW_S (the totals stay)."""
        now = self._clock()
        if now - self._opened > WINDOW_S:
            self._opened = now
            for t in self._topics.values():
                t.pulls = t.pulled = t.ok = t.failed = 0
                t.pull_rt_ms = t.consume_rt_ms = 0.0

    def _topic(self, topic: str) -> TopicStats:
        self._roll()
        t = self._topics.get(topic)
        if t is None:
            t = self._topics[topic] = TopicStats()
        return t

    def pulled(self, topic: str, messages: int, rt_ms: float) -> None:
        t = self._topic(topic)
        t.pulls += 1
        t.pull_rt_ms += rt_ms
        t.pulled += messages

    def consumed(self, topic: str, messages: int, ok: bool, rt_ms: float) -> None:
        t = self._topic(topic)
        t.consume_rt_ms += rt_ms
        if ok:
            t.ok += messages
        else:
            t.failed += messages
            t.failed_total += messages

    def status(self) -> dict[str, dict]:
        """topic -> ConsumeStatus (pullRT, pullTPS, consumeRT, consumeOKTPS, consumeFailedTPS, consumeFailedMsgs)."""
        self._roll()
        age = max(1.0, self._clock() - self._opened)
        out = {}
        for topic, t in sorted(self._topics.items()):
            consumed = t.ok + t.failed
            out[topic] = {"pullRT": t.pull_rt_ms / t.pulls if t.pulls else 0.0, "pullTPS": t.pulled / age,
                          "consumeRT": t.consume_rt_ms / consumed if consumed else 0.0,
                          "consumeOKTPS": t.ok / age, "consumeFailedTPS": t.failed / age,
                          "consumeFailedMsgs": t.failed_total}
        return out


def python_stacks() -> str:
    """Every thread's Python stack, as ``jstack`` output stands in Java's report."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sorted(sys._current_frames().items()):
        parts.append(f'"{names.get(ident, ident)}"\n' + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)
