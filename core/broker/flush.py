"""Commit-log flushing at the trio level: group commit and the periodic flusher.

One `CommitLogFlusher` (its ``run`` task, with a child task for the
periodic full flush when waiters have a flush of their own) owns every
fsync of the commit log. Appends
happen in the trio thread (a page-cache write); a SYNC_FLUSH sender then
calls `wait_flushed(end_offset)`, which parks it until a flush covers that
offset. The flusher loop runs a flush in a worker thread and, when it
returns, wakes every waiter whose offset is covered, so N concurrent
senders share one fsync instead of N (group commit). While a flush runs,
new waiters queue up for the next one.

Two kinds of flush (RocketMQ's GroupCommitService and FlushRealTimeService,
and its FlushConsumeQueueService):
- for waiters, ``flush_log`` when given: the commit log alone, one
  fdatasync. An ack needs nothing else: consume queues, index and
  checkpoint are rebuilt from the log by recovery. With ``log_interval_s``
  (ASYNC_FLUSH: there are no waiters), ``flush_log`` every that many
  seconds when something was written since the last one.
- every ``interval`` seconds, when something was written since the last
  one, the full ``flush`` (log, consume queues, index, checkpoint); without
  ``flush_log`` waiters get the full flush too. Its index sync alone writes
  a page of the slot table per message (the keys hash all over it), so it
  runs less often than the log's (flushIntervalConsumeQueue, 1 s, against
  flushIntervalCommitLog, 0.5 s, as in RocketMQ). Recovery rebuilds them
  from the log after a crash, from a checkpoint up to that much older.

With ``flush_log`` the two run in tasks of their own: the periodic full
flush (several fsyncs and the index build, tens of ms on a busy disk) never
holds up the waiters' log flushes, which go on while it runs. The store
lets them overlap (its commit log is a thread-safe group commit of its own,
and the rest of a full flush is serialised by the store).

Rules kept here:
- At most one waiters' flush and one periodic flush (the full one, or in
  ASYNC_FLUSH the log's) run at a time, and only this task's loops call them.
- A waiter is woken exactly when ``flushed_offset >= its offset``; a waiter
  past its deadline gets False (FLUSH_DISK_TIMEOUT), never a hang. Every
  waiter queued when a flush returns is woken by it (if covered) in one
  pass, and a flush for the rest starts at once.
- ``flush_count`` counts the flushes that made new log bytes durable.
- ``flush_started`` is the trio time the oldest running flush began (None
  when none runs): a flush that runs long means the disk cannot keep up,
  which the send path answers with SYSTEM_BUSY (`Broker.page_cache_busy_ms`).
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
                 flush_log: Callable[[], int] | None = None, log_interval_s: float | None = None):
        """``flush`` is the blocking full flush returning the flushed offset;
        ``written`` returns the current end of the log (cheap, trio thread);
        ``flush_log`` (optional) the blocking commit-log-only flush for
        waiters, and every ``log_interval_s`` when given."""
        self._flush = flush
        self._flush_log = flush_log
        self._written = written
        self._interval_s = interval_s
        self._log_interval_s = log_interval_s
        self.flushed_offset = flushed
        self._fully_flushed = flushed  # offset covered by the last full flush
        self.flush_count = 0
        self.latency = LatencyHistogram()  # per flush that synced something, not per message
        self._waiters: list[tuple[int, int, trio.Event]] = []  # heap of (offset, seq, event)
        self._seq = itertools.count()
        self._kick = trio.Event()
        self._started: list[float] = []  # trio start times of the running flushes

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

    @property
    def flush_started(self) -> float | None:
        started = self._started
        return min(started) if started else None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        if self._flush_log is None or self._interval_s is None:
            task_status.started()
            await self._serve_waiters(self._flush_log or self._flush, self._interval_s)
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._periodic, self._interval_s, self._log_interval_s)
            task_status.started()
            await self._serve_waiters(self._flush_log, None)

    async def _serve_waiters(self, fn: Callable[[], int], interval: float | None) -> None:
        """Flush for the waiters with ``fn``; with ``interval``, this loop also
        runs the periodic full flush (``fn`` is then the full flush)."""
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
            before = self.flushed_offset
            await self._run_flush(fn)
            if self._waiters and self.flushed_offset > before:
                self._kick.set()  # waiters that arrived during that flush need another

    async def _periodic(self, interval: float, log_interval: float | None) -> None:
        """The full flush every ``interval`` s when something was written since
        the last; with ``log_interval``, one period in ``interval /
        log_interval`` is the full flush's and the others the log's flush (one
        flush a period: each is a worker thread's round trip, which the event
        loop feels)."""
        period, every = (interval, 1) if log_interval is None else (log_interval, max(1, round(interval / log_interval)))
        tick = 0
        while True:
            await trio.sleep(period)  # a period, not a wait for an event
            tick += 1
            if tick % every:
                if self._written() > self.flushed_offset:
                    await self._run_flush(self._flush_log)
            elif self._written() > self._fully_flushed:
                await self._run_flush(self._flush)

    async def _run_flush(self, fn: Callable[[], int]) -> None:
        started = time.perf_counter()
        mark = trio.current_time()
        self._started.append(mark)
        try:
            flushed = await trio.to_thread.run_sync(fn)
        except BaseException:
            log.exception("commit log flush failed")
            raise
        finally:
            self._started.remove(mark)
        if fn is self._flush:
            self._fully_flushed = max(self._fully_flushed, flushed)
        if flushed > self.flushed_offset:
            self.flush_count += 1
            self.latency.observe(time.perf_counter() - started)
        self._covered(flushed)

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
