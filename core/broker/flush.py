"""Commit-log flushing at the trio level: group commit and the periodic flusher.

One `CommitLogFlusher` task owns every fsync of the commit log. Appends
happen in the trio thread (a page-cache write); a SYNC_FLUSH sender then
calls `wait_flushed(end_offset)`, which parks it until a flush covers that
offset. The flusher loop runs a flush in a worker thread and, when it
returns, wakes every waiter whose offset is covered, so N concurrent
senders share one fsync instead of N (group commit). While a flush runs,
new waiters queue up for the next one.

Two kinds of flush (RocketMQ's GroupCommitService and FlushRealTimeService):
- for waiters, ``flush_log`` when given: the commit log alone, one
  fdatasync. An ack needs nothing else: consume queues, index and
  checkpoint are rebuilt from the log by recovery.
- every ``interval`` seconds, when something was written since the last
  one, the full ``flush`` (log, consume queues, index, checkpoint); without
  ``flush_log`` waiters get the full flush too.

Rules kept here:
- At most one flush runs at a time, and only this task calls them.
- A waiter is woken exactly when ``flushed_offset >= its offset``; a waiter
  past its deadline gets False (FLUSH_DISK_TIMEOUT), never a hang.
- ``flush_count`` counts the flushes that made new log bytes durable.
- ``flush_started`` is the trio time the running flush began (None between
  flushes): a flush that runs long means the disk cannot keep up, which the
  send path answers with SYSTEM_BUSY (`Broker.page_cache_busy_ms`).
- A flush that raises (disk gone) is logged and re-raised: the broker's
  nursery fails loudly rather than acknowledging unflushed data.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from typing import Callable

import trio

from core.store import LatencyHistogram

log = logging.getLogger(__name__)


class CommitLogFlusher:
    def __init__(self, flush: Callable[[], int], written: Callable[[], int], *, interval_s: float | None, flushed: int = 0,
                 flush_log: Callable[[], int] | None = None):
        """``flush`` is the blocking full flush returning the flushed offset;
        ``written`` returns the current end of the log (cheap, trio thread);
        ``flush_log`` (optional) the blocking commit-log-only flush for waiters."""
        self._flush = flush
        self._flush_log = flush_log
        self._written = written
        self._interval_s = interval_s
        self.flushed_offset = flushed
        self._fully_flushed = flushed  # offset covered by the last full flush
        self.flush_count = 0
        self.latency = LatencyHistogram()  # per flush that synced something, not per message
        self._waiters: list[tuple[int, int, trio.Event]] = []  # heap of (offset, seq, event)
        self._seq = itertools.count()
        self._kick = trio.Event()
        self.flush_started: float | None = None

    async def wait_flushed(self, offset: int, deadline: float) -> bool:
        """True once the log is durable up to ``offset`` (an end offset); False at ``deadline``."""
        if offset <= self.flushed_offset:
            return True
        event = trio.Event()
        heapq.heappush(self._waiters, (offset, next(self._seq), event))
        self._kick.set()
        with trio.move_on_at(deadline):
            await event.wait()
        return offset <= self.flushed_offset

    def request_flush(self) -> None:
        """Ask for a flush soon without waiting for it (e.g. before shutdown)."""
        self._kick.set()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        interval = self._interval_s
        next_full = trio.current_time() + interval if interval is not None else float("inf")
        while True:
            with trio.move_on_at(next_full):
                await self._kick.wait()
            self._kick = trio.Event()
            written = self._written()
            full = trio.current_time() >= next_full
            if full:
                next_full = trio.current_time() + interval
                full = written > self._fully_flushed
            if not full and (not self._waiters or written <= self.flushed_offset):
                self._covered(self.flushed_offset)
                continue
            fn = self._flush if full or self._flush_log is None else self._flush_log
            started = time.perf_counter()
            self.flush_started = trio.current_time()
            try:
                flushed = await trio.to_thread.run_sync(fn)
            except BaseException:
                log.exception("commit log flush failed")
                raise
            finally:
                self.flush_started = None
            if fn is self._flush:
                self._fully_flushed = max(self._fully_flushed, flushed)
            before = self.flushed_offset
            if flushed > before:
                self.flush_count += 1
                self.latency.observe(time.perf_counter() - started)
            self._covered(flushed)
            if self._waiters and self.flushed_offset > before:
                self._kick.set()  # waiters that arrived during that flush need another

    def _covered(self, flushed: int) -> None:
        if flushed > self.flushed_offset:
            self.flushed_offset = flushed
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.flushed_offset:
            heapq.heappop(waiters)[2].set()
        # Waiters that gave up (deadline) stay in the heap until covered; their
        # events are set harmlessly. Drop them early if the heap grows large.
        if len(waiters) > 4096:
            self._waiters = [w for w in waiters if not w[2].is_set()]
            heapq.heapify(self._waiters)
