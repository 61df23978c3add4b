"""Keepalive for all of a gateway's connections, in one task.

MQTT closes a connection that sends nothing for one and a half times its
keepalive. A deadline on each reader's cancel scope, moved past every read,
moved trio's deadline heap twice a read (about 3 us of a lone message's
CPU). Here a read only notes when it ended (``Connection.read_at``), and
one task (``Keepalive.run``) looks at a connection when its deadline as
last noted comes: one that has read since goes back at its new deadline,
one that has not is closed (``Connection.keepalive_expired``). A
connection is looked at about once per period however many packets it
sends, and it expires when a deadline moved at every read would have
fired: ``period`` after the end of its last read. A reader acting on a
read (or writing its output) is never expired; it is looked at again a
period later.

An entry is a list ``[due, order, connection]`` (about 130 bytes with its
numbers, as much as the entry a deadline kept in trio's heap); a connection
that ends lets go of its own (``forget``), so the heap holds no ended
connection.
"""

from __future__ import annotations

import heapq
import itertools
import math

import trio

__all__ = ["Keepalive"]


class Keepalive:
    """The heap of watched connections; ``run`` is its task."""

    __slots__ = ("_heap", "_order", "_sleep")

    def __init__(self) -> None:
        self._heap: list[list] = []
        self._order = itertools.count()
        self._sleep: trio.CancelScope | None = None  # the task's sleep, while it sleeps

    def __len__(self) -> int:
        """Entries in the heap, ended connections' included until they come up."""
        return len(self._heap)

    @property
    def watching(self) -> int:
        """Connections watched (counted: for tests and diagnostics)."""
        return sum(1 for entry in self._heap if entry[2] is not None)

    def watch(self, conn) -> list:
        """Expire ``conn`` when it has not read for 1.5 x its keepalive (from
        now on; while it reads, it sets ``read_at``); the entry, for ``forget``."""
        due = trio.current_time() + conn.keepalive * 1.5
        entry = [due, next(self._order), conn]
        heapq.heappush(self._heap, entry)
        sleep = self._sleep
        if sleep is not None and due < sleep.deadline:
            sleep.deadline = due
        return entry

    @staticmethod
    def forget(entry: list) -> None:
        """The connection ended: its entry no longer holds it (the task drops
        the entry when it comes up)."""
        entry[2] = None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        heap = self._heap
        task_status.started()
        try:
            while True:
                with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as sleep:
                    self._sleep = sleep
                    await trio.sleep_forever()
                self._sleep = None
                self._expire(trio.current_time())
        finally:
            self._sleep = None

    def _expire(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            entry = heap[0]
            conn = entry[2]
            if conn is None:
                heapq.heappop(heap)
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
                entry[2] = None
                conn.keepalive_expired()
