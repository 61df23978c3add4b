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

A ``Waiter`` speaks trio's lowest-level protocol itself (it yields trio's
``WaitTaskRescheduled`` message and unwraps the outcome trio sends back), as
``trio.lowlevel.wait_task_rescheduled`` does; should a trio release not have
that message class where it is looked for, or give it other fields than the
one abort function, it awaits ``wait_task_rescheduled`` instead (same
behaviour, the frames again; tests/gateway/test_readiness.py runs both).
"""

from __future__ import annotations

import select

import trio
from outcome import Value

try:  # the message trio's run loop reads when a task parks itself (see the module docstring)
    from trio._core._traps import WaitTaskRescheduled as _PARK

    if [f.name for f in getattr(_PARK, "__attrs_attrs__", ())] != ["abort_func"]:  # pragma: no cover - reshaped
        _PARK = None
except ImportError:  # pragma: no cover - a trio that moved it: the public call instead
    _PARK = None

__all__ = ["Readiness", "Waiter"]

_IN_ONESHOT = getattr(select, "EPOLLIN", 0) | getattr(select, "EPOLLONESHOT", 0)
_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED


class Waiter:
    """One task parked until ``fd`` is readable (``await`` it once: True
    when ``fd`` was the only socket of its epoll poll, so no other reader
    woke with it; else False, or None when the watcher stopped). It is
    its own iterator for ``await`` and its own abort function: a cancelled
    wait leaves the watcher's dict, and a later event for ``fd`` finds nobody."""

    __slots__ = ("task", "fd", "_waiting")

    def __init__(self, task: trio.lowlevel.Task, fd: int, waiting: dict) -> None:
        self.task = task
        self.fd = fd
        self._waiting = waiting

    def __await__(self):
        if _PARK is None:  # pragma: no cover
            return trio.lowlevel.wait_task_rescheduled(self).__await__()
        return self

    def __next__(self):
        return _PARK(self)  # to trio's run loop: park this task, with self as its abort function

    def send(self, outcome):
        """trio resumes the task with the outcome of the wait."""
        raise StopIteration(outcome.unwrap())

    def __call__(self, _raise_cancel) -> trio.lowlevel.Abort:
        """trio's abort function: the wait is cancelled."""
        waiting = self._waiting
        if waiting.get(self.fd) is self:  # still armed: a later event finds nobody waiting and is dropped
            del waiting[self.fd]
        return _SUCCEEDED


class Readiness:
    """One epoll for the sockets of waiting connections; ``run`` is its watcher task."""

    __slots__ = ("_epoll", "_waiting")

    def __init__(self) -> None:
        self._epoll = None  # set while ``run`` watches it
        self._waiting: dict[int, Waiter] = {}

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
        finally:
            self._epoll = None
            epoll.close()
            for waiter in waiting.values():
                reschedule(waiter.task)
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
        waiting = self._waiting
        waiter = waiting[fd] = Waiter(trio.lowlevel.current_task(), fd, waiting)
        return waiter
