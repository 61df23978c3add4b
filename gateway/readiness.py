"""Waiting for many sockets to become readable through one registration in trio.

An idle MQTT connection spends its life waiting for its next packet. trio's
``wait_readable`` keeps, per waiting socket, four coroutine frames, an abort
closure and an ``EpollWaiters`` (about 1.7 KB on CPython 3.11): 170 MB for
100,000 idle devices. ``Readiness`` keeps an epoll of its own, and trio waits
on that one descriptor: a waiting connection holds one ``Waiter`` (about 60
bytes), which is at once what its task awaits, the abort function trio keeps
for it and the entry of the watcher's dict, and no frame of trio's
(``wait_task_rescheduled`` would keep two frames and a closure, about 0.7 KB).

Sockets are armed one-shot (``EPOLLIN | EPOLLONESHOT``), so a socket that
becomes readable wakes its task once and stays quiet until it is armed again.
A socket closed while registered leaves the epoll by itself (the kernel drops
it with its last reference), and a descriptor number used again is registered
again. Where epoll is missing, or once the watcher has stopped, ``arm``
answers None and the caller waits with trio's ``wait_readable``.

A reader woken through the watcher acts one loop pass after trio found its
socket (the watcher's step, then its own): about 30,000 instructions of
trio's loop, a tenth of a lone message's cost. So a *hot* connection (the
caller's choice: its input came in quick succession) waits in trio's own
epoll instead (``wait_hot``), paying trio's frames while it waits, and at
most ``hot_limit`` do. The ordering the watcher gives its readers (those
woken together act in one pass; the publishes of one not alone in its poll
are routed a checkpoint later) is kept for hot ones by counting: an
instrument (``_IoWoken``) notes how many tasks each of trio's I/O waits
woke, and ``lined_up`` how many woken readers have not acted yet; a hot
reader that is not the only task its wait woke, or that wakes while
another reader is lined up, steps once more before it acts; and a reader
the watcher found alone in its poll is alone only if no hot reader woken
with it is still lined up (its ``Waiter`` counts itself off as it resumes).

A ``Waiter`` speaks trio's lowest-level protocol itself (it yields trio's
``WaitTaskRescheduled`` message and unwraps the outcome trio sends back), as
``trio.lowlevel.wait_task_rescheduled`` does; should a trio release not have
that message class where it is looked for, or give it other fields than the
one abort function, it awaits ``wait_task_rescheduled`` instead (same
behaviour, the frames again; tests/gateway/test_readiness.py runs both).
"""

from __future__ import annotations

import collections
import select

import trio
from outcome import Value

try:  # the message trio's run loop reads when a task parks itself (see the module docstring)
    from trio._core._traps import WaitTaskRescheduled as _PARK

    if [f.name for f in getattr(_PARK, "__attrs_attrs__", ())] != ["abort_func"]:  # pragma: no cover - reshaped
        _PARK = None
except ImportError:  # pragma: no cover - a trio that moved it: the public call instead
    _PARK = None

__all__ = ["HOT_GAP_S", "HOT_LIMIT", "Readiness", "Waiter"]

try:  # where the run loop's queue of runnable tasks is found (`_IoWoken`)
    from trio._core import _run
except ImportError:  # pragma: no cover
    _run = None

# Connections that may wait in trio's own epoll at once (`Readiness.wait_hot`):
# each holds trio's frames (~1.7 KB) until its next input, active or not.
HOT_LIMIT = 1024
# A connection is hot when its input came this soon (s) after the one before.
HOT_GAP_S = 0.05

_IN_ONESHOT = getattr(select, "EPOLLIN", 0) | getattr(select, "EPOLLONESHOT", 0)
_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED


class Waiter:
    """One task parked until ``fd`` is readable (``await`` it once: True
    when ``fd`` was the only socket of its epoll poll and no hot reader
    woken with it is still to act, so no other reader acts with it; else
    False, or None when the watcher stopped). It is its own iterator for
    ``await`` and its own abort function: a cancelled wait leaves the
    watcher's dict, and a later event for ``fd`` finds nobody."""

    __slots__ = ("task", "fd", "_readiness")

    def __init__(self, task: trio.lowlevel.Task, fd: int, readiness: "Readiness") -> None:
        self.task = task
        self.fd = fd
        self._readiness = readiness

    def __await__(self):
        if _PARK is None:  # pragma: no cover
            return self._rescheduled().__await__()
        return self

    async def _rescheduled(self):  # pragma: no cover - a trio without the park message
        return self._readiness._acted(await trio.lowlevel.wait_task_rescheduled(self))

    def __next__(self):
        return _PARK(self)  # to trio's run loop: park this task, with self as its abort function

    def send(self, outcome):
        """trio resumes the task with the outcome of the wait (an aborted
        wait's Cancelled raises here: the watcher never counted it)."""
        raise StopIteration(self._readiness._acted(outcome.unwrap()))

    def __call__(self, _raise_cancel) -> trio.lowlevel.Abort:
        """trio's abort function: the wait is cancelled."""
        waiting = self._readiness._waiting
        if waiting.get(self.fd) is self:  # still armed: a later event finds nobody waiting and is dropped
            del waiting[self.fd]
        return _SUCCEEDED


class _IoWoken(trio.abc.Instrument):
    """How many tasks the last I/O wait of trio's loop woke (``woken``): its
    run queue's growth over the wait. Tasks runnable before it (a checkpoint
    taken in the pass before) are not counted, as the watcher's poll does
    not count them either."""

    __slots__ = ("woken", "_before", "_runq")

    def __init__(self, runq) -> None:
        self.woken = 0
        self._before = 0
        self._runq = runq

    def before_io_wait(self, timeout: float) -> None:
        self._before = len(self._runq)

    def after_io_wait(self, timeout: float) -> None:
        self.woken = len(self._runq) - self._before


class Readiness:
    """One epoll for the sockets of waiting connections; ``run`` is its watcher task."""

    __slots__ = ("_epoll", "_waiting", "_io_woken", "hot", "hot_limit", "lined_up")

    def __init__(self, hot_limit: int = HOT_LIMIT) -> None:
        self._epoll = None  # set while ``run`` watches it
        self._waiting: dict[int, Waiter] = {}
        self._io_woken: _IoWoken | None = None  # while ``run`` watches: hot waits are possible
        self.hot = 0  # connections waiting in trio's own wait_readable (`wait_hot`)
        self.hot_limit = hot_limit
        # Readers woken for a later pass that have not acted yet: those the watcher
        # woke (counted off as their Waiter resumes) and those `wait_hot` lines up.
        self.lined_up = 0

    def _acted(self, alone):
        """A reader the watcher woke resumes with ``alone`` (its poll's
        verdict): that, unless another woken reader is still to act. The
        watcher's poll does not see hot readers woken by the same I/O wait."""
        self.lined_up -= 1
        return alone if not self.lined_up else False

    def can_wait_hot(self) -> bool:
        return self._io_woken is not None and self.hot < self.hot_limit

    async def wait_hot(self, fd: int) -> bool:
        """Wait for ``fd`` in trio's own epoll (one loop pass sooner than
        through the watcher, at trio's ~1.7 KB per waiting socket): True when
        the I/O wait that woke it woke no other task and no reader woken
        earlier is still to act. Else the task steps once more before it
        returns: it then acts in the pass where the readers the watcher woke
        with it act, and after those woken before it (their order holds as
        for readers woken through ``arm``)."""
        self.hot += 1
        try:
            await trio.lowlevel.wait_readable(fd)
        finally:
            self.hot -= 1
        io_woken = self._io_woken
        if io_woken is not None and io_woken.woken == 1 and not self.lined_up:
            return True
        self.lined_up += 1
        try:
            await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            self.lined_up -= 1
        return False

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled. Whoever still waits then is woken: their
        next read goes through trio's own waiting."""
        if not hasattr(select, "epoll"):
            task_status.started()
            return
        epoll = select.epoll()
        self._epoll = epoll
        waiting = self._waiting
        reschedule = trio.lowlevel.reschedule
        io_woken = None
        runner = getattr(getattr(_run, "GLOBAL_RUN_CONTEXT", None), "runner", None) if _run else None
        if runner is not None and isinstance(getattr(runner, "runq", None), collections.deque):
            io_woken = _IoWoken(runner.runq)
            trio.lowlevel.add_instrument(io_woken)
            self._io_woken = io_woken
        try:
            task_status.started()
            while True:
                await trio.lowlevel.wait_readable(epoll.fileno())
                ready = epoll.poll(0)
                alone = len(ready) == 1
                for fd, _events in ready:
                    waiter = waiting.pop(fd, None)
                    if waiter is not None:
                        reschedule(waiter.task, Value(alone))
                        self.lined_up += 1
        finally:
            self._epoll = None
            if io_woken is not None:
                self._io_woken = None
                trio.lowlevel.remove_instrument(io_woken)
            epoll.close()
            for waiter in waiting.values():
                reschedule(waiter.task)
                self.lined_up += 1
            waiting.clear()

    def arm(self, fd: int) -> Waiter | None:
        """Register the current task as waiting for ``fd`` to be readable: the
        ``Waiter`` to await (at once, once); None when the watcher does not
        run (wait with trio's ``wait_readable``). OSError when ``fd`` is no
        open socket."""
        epoll = self._epoll
        if epoll is None:
            return None
        try:
            epoll.modify(fd, _IN_ONESHOT)
        except FileNotFoundError:
            epoll.register(fd, _IN_ONESHOT)
        waiter = self._waiting[fd] = Waiter(trio.lowlevel.current_task(), fd, self)
        return waiter
