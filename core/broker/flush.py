"""Commit-log flushing at the trio level: group commit and the periodic flusher.

One `CommitLogFlusher` task owns every fsync of the commit log. Appends
happen in the trio thread (a page-cache write); a SYNC_FLUSH sender then
calls `wait_flushed(end_offset)`, which parks it until a flush covers that
offset. The flusher loop runs ``store.flush()`` in a worker thread and, when
it returns, wakes every waiter whose offset is covered, so N concurrent
senders share one fsync instead of N (group commit). While a flush runs,
new waiters queue up for the next one.

Rules kept here:
- At most one ``store.flush()`` runs at a time, and only this task calls it.
- A waiter is woken exactly when ``flushed_offset >= its offset``; a waiter
  past its deadline gets False (FLUSH_DISK_TIMEOUT), never a hang.
- In ASYNC_FLUSH mode (``interval`` set) the loop also flushes every
  ``interval`` seconds when something was written since the last flush.
- A flush that raises (disk gone) is logged and re-raised: the broker's
  nursery fails loudly rather than acknowledging unflushed data.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from typing import Callable

import trio

log = logging.getLogger(__name__)


class CommitLogFlusher:
    def __init__(self, flush: Callable[[], int], written: Callable[[], int], *, interval_s: float | None, flushed: int = 0):
        """``flush`` is the blocking fsync returning the flushed offset;
        ``written`` returns the current end of the log (cheap, trio thread)."""
        self._flush = flush
        self._written = written
        self._interval_s = interval_s
        self.flushed_offset = flushed
        self.flush_count = 0
        self._waiters: list[tuple[int, int, trio.Event]] = []  # heap of (offset, seq, event)
        self._seq = itertools.count()
        self._kick = trio.Event()

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
        while True:
            if self._interval_s is None:
                await self._kick.wait()
            else:
                with trio.move_on_after(self._interval_s):
                    await self._kick.wait()
            self._kick = trio.Event()
            if self._written() <= self.flushed_offset:
                self._covered(self.flushed_offset)
                continue
            try:
                flushed = await trio.to_thread.run_sync(self._flush)
            except BaseException:
                log.exception("commit log flush failed")
                raise
            self.flush_count += 1
            before = self.flushed_offset
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
