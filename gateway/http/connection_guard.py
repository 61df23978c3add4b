"""One HTTP connection's failure and memory stay that connection's (Hypercorn 0.18 under trio).

Rules kept here (both found by the fault campaign's fuzzer, issue 17):

- A stream error ends one connection, never the server. Hypercorn's trio
  `TCPServer._close` sends EOF outside the lock its `protocol_send` takes,
  so a peer that half-closes while a response is being written makes
  ``send_all`` raise ``trio.BusyResourceError``; nothing in Hypercorn
  catches it, and it ended the server's nursery: the whole `mqgate` process
  exited on a fuzzed request. `GuardedTCPServer` closes under that lock, and
  turns the same stream errors if they still come (busy, broken, closed;
  bare or in an exception group) into one INFO line; anything else still
  propagates.
- A connection ends when its peer is gone, not ``keep_alive_timeout`` (5 s)
  later. Hypercorn's trio worker leaves the keep-alive timer task running
  after the read loop ends (its asyncio worker stops it on close), and the
  connection's task group waits for it: every ended connection kept its
  tasks, h11 state and socket objects (about 20 KB) for 5 s. Under a flood
  of short connections (the fuzzer's ~1,000 a second) that was ~5,000 dead
  connections, ~100 MiB, and the allocator kept the peak. Once reading ends
  the timer is stopped and not started again.

`install` makes Hypercorn's trio worker build `GuardedTCPServer` for every
accepted connection.
"""

from __future__ import annotations

import logging

import trio
import hypercorn.trio.run as _hypercorn_run
from hypercorn.events import Updated
from hypercorn.trio.tcp_server import TCPServer

log = logging.getLogger("mqgate.http.server")

_STREAM_ERRORS = (trio.BusyResourceError, trio.BrokenResourceError, trio.ClosedResourceError)


class GuardedTCPServer(TCPServer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reading_over = False  # the peer is gone (EOF, reset, closed by us): no keep-alive wait

    async def _read_data(self) -> None:
        try:
            await super()._read_data()
        finally:
            self._reading_over = True
            with trio.CancelScope(shield=True):  # a short lock; done even when the server stops
                await self.idle_task.stop()

    async def protocol_send(self, event) -> None:
        # A response finished after the peer left would start the keep-alive
        # timer again (h11 sees no EOF after a reset): the connection is over.
        if self._reading_over and isinstance(event, Updated):
            return
        await super().protocol_send(event)

    async def _close(self) -> None:
        # EOF and close under the send lock, like every other write (the race's source);
        # not when this task holds it already (a failed write closing the connection)
        if self.send_lock.statistics().owner is trio.lowlevel.current_task():
            await super()._close()
            return
        async with self.send_lock:
            await super()._close()

    async def run(self) -> None:
        try:
            await super().run()
        except _STREAM_ERRORS as e:
            log.info("HTTP connection dropped while writing to it: %s", type(e).__name__)
        except BaseExceptionGroup as group:
            matched, rest = group.split(_STREAM_ERRORS)
            if matched is not None:
                log.info("HTTP connection dropped while writing to it: %s",
                         type(matched.exceptions[0]).__name__)
            if rest is not None:
                raise rest


def install() -> None:
    """Hypercorn's worker looks `TCPServer` up in its module at each serve."""
    _hypercorn_run.TCPServer = GuardedTCPServer
