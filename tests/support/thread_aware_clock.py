"""`thread_aware_clock`: trio's autojump clock that never jumps while a
worker thread (``trio.to_thread``) is still working.

An autojump clock jumps to the next deadline once the run has been idle for
its threshold of real time; a task waiting on a worker thread counts as
idle.  On a loaded machine an fsync or a table write in a worker thread can
take longer than the threshold, so virtual time leapt past deadlines while
the broker was still working: timers measured late, checks early (the
flakes of tests/core/test_timers.py and the transaction check tests beside
other test workers).  This clock only jumps when no thread of trio's default
limiter is borrowed.  The broker's worker threads are all short (flushes,
table writes, queue deletes), so a jump is delayed, never lost.

``MockClock`` is final and the run loop calls its private ``_autojump``
when idle, so the check wraps that method on the instance.
"""

from __future__ import annotations

import trio
from trio.testing import MockClock


def thread_aware_clock(autojump_threshold: float) -> MockClock:
    clock = MockClock(autojump_threshold=autojump_threshold)
    jump = clock._autojump

    def _autojump() -> None:  # called by trio's run loop after the threshold of idleness
        if trio.to_thread.current_default_thread_limiter().borrowed_tokens:
            return  # a worker thread is busy: not idle; trio asks again after another threshold
        jump()

    clock._autojump = _autojump
    return clock
