"""Wake-ups when a consume queue grows: long polling and session delivery.

The store calls `QueueNotifier.on_dispatch(topic, queue_id, next_offset)`
synchronously after each consume-queue append (including the extra units
of multi-dispatch). Tasks that wait for a queue park on one `trio.Event`
per (topic, queue) that has waiters; a dispatch sets and drops it, and the
woken tasks re-read the queue. So a wake-up is exact (no polling) and costs
one dict lookup per dispatch when nobody waits.

Rules kept here:
- `wait_for_messages` returns True as soon as the queue's max offset is
  past the given offset, and False at the deadline or once the notifier is
  closed (broker shutdown); it re-checks after each wake-up, so spurious
  wake-ups are harmless.
- Dispatches that arrive on another thread (a store that dispatches from a
  worker, e.g. during recovery or replication) are handed to the trio
  thread with the run's token; trio objects are only touched in the trio
  thread.
- Extra listeners (`add_listener`) are called in the trio thread, in the
  order added, and must not block or raise.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import trio

log = logging.getLogger(__name__)

DispatchListener = Callable[[str, int, int], None]


class QueueNotifier:
    def __init__(self, max_offset: Callable[[str, int], int]):
        self._max_offset = max_offset
        self._events: dict[tuple[str, int], trio.Event] = {}
        self._listeners: list[DispatchListener] = []
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: int | None = None
        self.closed = False

    def bind(self) -> None:
        """Remember the trio run; call from the trio thread before dispatches start."""
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.get_ident()

    def add_listener(self, cb: DispatchListener) -> None:
        self._listeners.append(cb)

    def remove_listener(self, cb: DispatchListener) -> None:
        self._listeners.remove(cb)

    def on_dispatch(self, topic: str, queue_id: int, next_offset: int) -> None:
        if threading.get_ident() != self._thread:
            if self._token is None:
                return  # before the broker runs (store recovery): nobody can be waiting
            try:
                self._token.run_sync_soon(self._notify, topic, queue_id, next_offset)
            except trio.RunFinishedError:
                pass
            return
        self._notify(topic, queue_id, next_offset)

    def _notify(self, topic: str, queue_id: int, next_offset: int) -> None:
        if self._events:
            event = self._events.pop((topic, queue_id), None)
            if event is not None:
                event.set()
        for cb in self._listeners:
            try:
                cb(topic, queue_id, next_offset)
            except Exception:
                log.exception("dispatch listener %r failed", cb)

    def close(self) -> None:
        """Wake every waiter for good (broker shutdown): waits answer False from now on."""
        self.closed = True
        events, self._events = self._events, {}
        for event in events.values():
            event.set()

    def waiting(self, topic: str, queue_id: int) -> bool:
        return (topic, queue_id) in self._events

    def changed(self, topic: str, queue_id: int) -> trio.Event:
        """An event set at the next dispatch to (topic, queue_id)."""
        key = (topic, queue_id)
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = trio.Event()
        return event

    async def wait_for_messages(self, topic: str, queue_id: int, offset: int, deadline: float) -> bool:
        while True:
            if self.closed:
                await trio.lowlevel.checkpoint()
                return False
            if self._max_offset(topic, queue_id) > offset:
                await trio.lowlevel.checkpoint()
                return True
            if trio.current_time() >= deadline:
                await trio.lowlevel.checkpoint()
                return False
            with trio.move_on_at(deadline):
                await self.changed(topic, queue_id).wait()
