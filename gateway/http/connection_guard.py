"""One HTTP connection's failure stays that connection's (Hypercorn 0.18 under trio).

Hypercorn's trio `TCPServer._close` sends EOF outside the lock its
`protocol_send` takes, so a peer that half-closes while a response is being
written makes ``send_all`` raise ``trio.BusyResourceError``; nothing in
Hypercorn catches it, and it ends the server's nursery: the whole `mqgate`
process exited on a fuzzed request (fault campaign, issue 17).

`GuardedTCPServer` closes under that lock, and turns the same
stream errors if they still come (busy, broken, closed; bare or in an
exception group) into one INFO line; anything else still propagates.  `install` makes Hypercorn's trio
worker build it for every accepted connection.
"""

from __future__ import annotations

import logging

import trio
import hypercorn.trio.run as _hypercorn_run
from hypercorn.trio.tcp_server import TCPServer

log = logging.getLogger("mqgate.http.server")

_STREAM_ERRORS = (trio.BusyResourceError, trio.BrokenResourceError, trio.ClosedResourceError)


class GuardedTCPServer(TCPServer):
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
