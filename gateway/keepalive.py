"""Keepalive for all of a gateway's connections, in one task.

MQTT closes a connection that sends nothing for one and a half times its
keepalive. A deadline on each reader's cancel scope, moved past every read,
moved trio's deadline heap twice a read (about 3 us of a lone message's
CPU). Here a read only notes when it ended (``Connection.read_at``), and
one task (``Keepalive.run``) looks at a connection when its deadline as
last noted comes: one that has read since goes back at its new deadline,
one that has not is closed (``Connection.keepalive_expired``). A
connection is looked at about once per period however many packets it
sends. A reader acting on a read (or writing its output) is never
expired; it is looked at again a period later.

The task wakes on a grid of ``GRAIN`` s (the first point of it at or after
the earliest deadline), as Mosquitto checks keepalives once a second: a
connection expires at most ``GRAIN`` s after 1.5 x keepalive from the end of
its last read, and a fleet of idle clients costs the task at most one wake
per ``GRAIN`` however their deadlines spread.

An entry is a list ``[due, order, connection]`` (about 130 bytes with its
numbers, as much as the entry a deadline kept in trio's heap). A
connection that ends lets go of its entry (``forget``), and once ended
connections' entries outnumber the live ones (and 1,000) the heap is
rebuilt without them, as trio prunes its deadline heap: connections that
come and go do not pile up entries until their deadlines.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math

import trio

__all__ = ["GRAIN", "Keepalive"]

log = logging.getLogger("mqgate.gateway")

GRAIN = 0.5  # seconds: the grid the task wakes on


def _waking_at(due: float) -> float:
    return math.ceil(due / GRAIN) * GRAIN


class Keepalive:
    """The heap of watched connections; ``run`` is its task."""

    __slots__ = ("_heap", "_order", "_sleep", "_ended")

    def __init__(self) -> None:
        self._heap: list[list] = []
        self._order = itertools.count()
        self._sleep: trio.CancelScope | None = None  # the task's sleep, while it sleeps
        self._ended = 0  # entries in the heap whose connection has ended

    @property
    def entries(self) -> int:
        """Entries in the heap, ended connections' included until they come
        up or the heap is rebuilt."""
        return len(self._heap)

    @property
    def watching(self) -> int:
        """Connections watched."""
        return len(self._heap) - self._ended

    def watch(self, conn) -> list:
        """Expire ``conn`` when it has not read for 1.5 x its keepalive (from
        now on; while it reads, it sets ``read_at``); the entry, for ``forget``."""
        due = trio.current_time() + conn.keepalive * 1.5
        entry = [due, next(self._order), conn]
        heapq.heappush(self._heap, entry)
        sleep = self._sleep
        if sleep is not None:
            wake = _waking_at(due)
            if wake < sleep.deadline:
                sleep.deadline = wake
        return entry

    def forget(self, entry: list) -> None:
        """The connection ended: its entry no longer holds it (the task drops
        the entry when it comes up, or the heap is rebuilt without it)."""
        if entry[2] is None:
            return  # expired: already out of the heap
        entry[2] = None
        self._ended += 1
        heap = self._heap
        if self._ended > len(heap) - self._ended + 1000:
            heap[:] = [e for e in heap if e[2] is not None]
            heapq.heapify(heap)
            self._ended = 0

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        heap = self._heap
        task_status.started()
        try:
            while True:
                with trio.CancelScope(deadline=_waking_at(heap[0][0]) if heap else math.inf) as sleep:
                    self._sleep = sleep
                    await trio.sleep_forever()
                self._expire(trio.current_time())  # no await: nobody moves the ended sleep meanwhile
        finally:
            self._sleep = None

    def _expire(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            entry = heap[0]
            conn = entry[2]
            if conn is None:
                heapq.heappop(heap)
                self._ended -= 1
                continue
            if conn.busy_reading:
                due = now + conn.keepalive * 1.5  # acting on a read is never cut by the keepalive
            else:
                due = conn.read_at + conn.keepalive * 1.5
            if due > now:
                entry[0] = due
                heapq.heapreplace(heap, entry)  # the same entry, sifted to its new place
            else:
                heapq.heappop(heap)
                entry[2] = None  # out of the heap: the connection's forget has nothing to count
                try:
                    conn.keepalive_expired()
                except Exception:  # a bug there ends that connection, never this task (every keepalive)
                    log.exception("client %s: closing on keepalive failed", conn.client_id)
