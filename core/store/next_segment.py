"""`NextSegment`: the commit log's next segment, made ahead by a thread.

RocketMQ's AllocateMappedFileService in small: a warm segment (zeros
written over all of it and synced, see `MappedFile`) takes as long as
writing the whole file, so the one after the segment being written is made
in a thread, outside the store lock, and the roll only takes it.

Rules kept:
- At most one segment is made or held at a time, for one start offset (the
  last `request`); it is not in the log's segment list until `take`.
- `take(start)` returns the segment made for ``start``, waiting if it is
  being made; or None (nothing made for it, or making it failed: the
  caller makes it itself, so a full disk is answered by the put that needs
  the segment, and space coming back is seen at the next roll).  A segment
  made for another offset (the log was cut or moved) is deleted, never
  handed out.
- Nothing here holds ``CommitLog.lock``; `take` and `request` are called
  with it held, and the thread never takes it, so there is no cycle.
- `close` stops the thread and deletes a segment made and not taken (a
  crash can leave one behind: recovery deletes segments past the log's end).

Who makes it: by default a thread of its own, started at the first
`request` and joined by `close`, for users of the store outside a server
(tools, benchmarks, tests): ``core.store`` knows no trio.  A server hands
the work to trio instead (decision 6: no bare threads there): it sets
`on_request`, a thread-safe callback that schedules `make_one` through
``trio.to_thread`` (the broker's `_segment_ahead_loop`), and no thread of
the store's own ever starts.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from .mapped_file import MappedFile

log = logging.getLogger(__name__)


class NextSegment:
    def __init__(self, make: Callable[[int], MappedFile]):
        """``make(start)`` creates the segment starting at ``start`` (blocking; ``OSError``)."""
        self._make = make
        self._cond = threading.Condition(threading.Lock())
        self._wanted: int | None = None  # start offset asked for, not being made yet
        self._making: int | None = None
        self._ready: MappedFile | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        # set by a server before the first request: called (under CommitLog.lock,
        # from any thread; it must not block) instead of starting a thread
        self.on_request: Callable[[], None] | None = None
        self.made = 0  # segments made ahead (tests, bench)
        self.failed = 0  # attempts that failed (a full disk)

    def request(self, start: int) -> None:
        """Make the segment starting at ``start`` in the thread (if not made or being made)."""
        with self._cond:
            if self._closed or self._making == start or (self._ready is not None and self._ready.start == start):
                return
            self._wanted = start
            if self.on_request is not None:
                self.on_request()
            elif self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mqgate-next-segment", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def take(self, start: int) -> MappedFile | None:
        """The segment made for ``start`` (waiting for it if being made), or None."""
        with self._cond:
            while self._making is not None:
                self._cond.wait()
            if self._wanted == start:
                self._wanted = None  # the caller makes it now
            seg, self._ready = self._ready, None
        if seg is not None and seg.start != start:
            seg.delete()
            seg = None
        return seg

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._wanted = None
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._cond:
            seg, self._ready = self._ready, None
        if seg is not None:
            seg.delete()

    def _run(self) -> None:
        while self.make_one(wait=True):
            pass

    def make_one(self, wait: bool = False) -> bool:
        """Make the segment asked for last, if any (blocking: writes a whole
        segment); with ``wait``, wait for a request first.  False once closed."""
        with self._cond:
            while wait and self._wanted is None and not self._closed:
                self._cond.wait()
            if self._closed:
                return False
            if self._wanted is None:
                return True
            start, self._wanted = self._wanted, None
            self._making = start
            stale, self._ready = self._ready, None
        if stale is not None:
            stale.delete()
        seg = None
        try:
            seg = self._make(start)
        except OSError as e:
            self.failed += 1
            log.warning("next commit-log segment not made ahead (the roll will try again): %s", e)
        with self._cond:
            self._making = None
            if seg is not None:
                self.made += 1
                if self._closed:
                    seg.delete()
                else:
                    self._ready = seg
            self._cond.notify_all()
        return True
