"""A connection's reads from its socket, and the discarding read of its end.

A plain TCP socket is read with one non-blocking ``os.read`` (`read_now`),
not through trio's ``receive_some``: a read costs no trio step of its own,
and the wait for input is the caller's (the gateway's epoll,
gateway/readiness.py). TLS and WebSocket streams are read with
``receive_some`` (`recv`). Every read counts its bytes in the gateway's
stats and notes a closed peer (``peer_closed``) on the connection.
`linger` is how a connection we end drains its input before the close.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from gateway.connection import Connection

__all__ = ["LINGER", "STREAM_ERRORS", "linger", "read_now", "recv", "recv_plain"]

STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
LINGER = 2.0  # seconds a connection we close keeps draining input (`linger`)


def read_now(conn: Connection, fd: int) -> bytes | None:
    """One non-blocking read of a plain TCP socket (what receive_some does
    without waiting, minus its trio step); None: nothing to read yet."""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return None
    except OSError:  # reset, closed: what receive_some would have met
        data = b""
    if not data:
        conn.peer_closed = True
    conn.gw.stats.bytes_in += len(data)
    return data


async def recv_plain(conn: Connection, fd: int, at_once: bool) -> bytes:
    """The next read of a plain TCP socket, after waiting for input in the
    gateway's epoll; ``at_once``: first without waiting, when the caller
    has just been through a checkpoint (else a client streaming a large
    CONNECT would hold the event loop for all of its reads)."""
    data = read_now(conn, fd) if at_once else None
    while data is None:
        try:
            waiter = conn.gw.readiness.arm(fd)
            if waiter is None:
                await trio.lowlevel.wait_readable(fd)
            else:
                await waiter
        except STREAM_ERRORS:
            return await recv(conn)
        data = read_now(conn, fd)
    return data


async def recv(conn: Connection) -> bytes:
    """The next read of the connection's stream (b"" once it is closed or broken)."""
    try:
        data = await conn.stream.receive_some(65536)
    except STREAM_ERRORS:
        data = b""
    if not data:
        conn.peer_closed = True
    conn.gw.stats.bytes_in += len(data)
    return data


async def linger(stream: trio.abc.Stream) -> None:
    """We end the connection: half-close, then read and discard until the
    client closes (at most ``LINGER`` s). Closing a socket with unread input
    makes the kernel reset the connection: the client's next write fails
    and it may never read our last packet (the DISCONNECT with its reason)."""
    with trio.move_on_after(LINGER):
        try:
            if isinstance(stream, trio.abc.HalfCloseableStream):
                await stream.send_eof()
            while await stream.receive_some(65536):
                pass
        except (*STREAM_ERRORS, trio.BusyResourceError):
            pass
