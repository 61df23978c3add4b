"""Accept loops: one task per listening socket, one task per connection."""

from __future__ import annotations

import errno
import itertools
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import trio

from gateway.config import ConfigError
from gateway.listeners._spec import ConnectionInfo, ListenerSpec, ListenerStats
from gateway.listeners._tls import identity_from_peercert
from gateway.listeners._websocket import HandshakeError, accept_websocket
from gateway.quota import PublishQuota

log = logging.getLogger("mqgate.gateway")

Handler = Callable[[trio.abc.Stream, ConnectionInfo], Awaitable[None]]
# serve_listeners(plain=...): (stream, info, leave) -> the coroutine run as the connection's task itself
PlainStarter = Callable[[trio.SocketStream, ConnectionInfo, Callable[[], None]], Coroutine[Any, Any, None]]

DEFAULT_MAX_CONNECTIONS = 100_000
CLOSE_TIMEOUT = 2.0
ACCEPT_BATCH = 64  # sockets accepted in one go from a listen backlog (then the others get a turn)
# accept() failing for want of a file descriptor or memory: wait, go on.
_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
# accept() failing for this one connection only (trio's SocketListener ignores the same): go on.
_IGNORED_ACCEPT_ERRNOS = {getattr(errno, name) for name in (
    "EPERM", "ECONNABORTED", "EPROTO", "ENETDOWN", "ENOPROTOOPT", "EHOSTDOWN", "ENONET", "EHOSTUNREACH",
    "EOPNOTSUPP", "ENETUNREACH", "ENOSR", "ESOCKTNOSUPPORT", "EPROTONOSUPPORT", "ETIMEDOUT", "ECONNRESET",
) if hasattr(errno, name)}
_HANDSHAKE_ERRORS = (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError,
                     HandshakeError, ssl.SSLError, OSError)
_connection_ids = itertools.count(1)
# One string for every connection's task, a plain starter's too (trio would make a new one per task,
# ~85 bytes each).
_TASK_NAME = f"{__name__}._connection"


class _Gate:
    """The connection count shared by every listener of one serve_listeners."""

    def __init__(self, max_connections: int, stats: ListenerStats, max_rate: int = 0) -> None:
        self.max_connections = max_connections
        self.rate = PublishQuota(max_rate) if max_rate else None  # accepts per second (maxConnectionRate)
        self.stats = stats
        self.on_leave = self.leave  # one bound method, handed to every plain connection
        self._last_refusal_log = -1e9
        self._unlogged = 0

    def try_enter(self) -> bool:
        self.stats.accepted += 1
        if self.stats.active >= self.max_connections:
            self.stats.refused += 1
            return False
        self.stats.active += 1
        return True

    def leave(self) -> None:
        self.stats.active -= 1

    def log_refusal(self, spec: ListenerSpec) -> None:
        # One line a second at most: a flood must not become a log flood.
        now = trio.current_time()
        self._unlogged += 1
        if now - self._last_refusal_log >= 1.0:
            log.warning("%s listener: maxConnections (%d) reached, refused %d connection(s) "
                        "(%d refused in all)", spec.name, self.max_connections, self._unlogged,
                        self.stats.refused)
            self._last_refusal_log = now
            self._unlogged = 0


async def serve_listeners(specs: Sequence[ListenerSpec], handler: Handler, *,
                          max_connections: int = DEFAULT_MAX_CONNECTIONS,
                          max_connection_rate: int = 0,
                          stats: ListenerStats | None = None,
                          plain: PlainStarter | None = None,
                          task_status: trio.TaskStatus[dict[str, int]] = trio.TASK_STATUS_IGNORED,
                          ) -> None:
    """Run the enabled listeners until cancelled; ``task_status.started`` gets
    ``{spec.name: bound port}``. A listener that cannot start (port in use,
    bad certificate) makes this raise before ``started``.

    ``plain``, when given, serves the plain TCP connections instead of
    ``handler``: ``plain(stream, info, leave)`` returns the coroutine that is
    the connection's task itself (no frame of the listener's under it: about
    280 bytes less per idle connection). That coroutine must close the
    stream, call ``leave()`` once when it ends, however it ends, and raise
    nothing (it counts and logs its own failure in ``stats.handler_errors``)."""
    enabled = [s for s in specs if s.enabled]
    names = [s.name for s in enabled]
    if len(set(names)) != len(names):
        raise ConfigError(f"listener names must be unique, got {names}")
    gate = _Gate(max_connections, stats if stats is not None else ListenerStats(), max_connection_rate)
    for spec in specs:
        if not spec.enabled:
            log.info("MQTT %s listener off (port 0)", spec.name)
    # Bind everything first, so a bad port or certificate is one plain error
    # before started(), not an exception group from a half-started nursery.
    opened: list[tuple[ListenerSpec, ssl.SSLContext | None, list[trio.SocketListener]]] = []
    try:
        for spec in enabled:
            ctx = spec.tls.server_context() if spec.tls is not None and spec.is_tls else None
            opened.append((spec, ctx, await _open(spec)))
    except BaseException:
        for _, _, listeners in opened:
            for listener in listeners:
                listener.socket.close()
        raise
    bound: dict[str, int] = {}
    async with trio.open_nursery() as nursery:
        for spec, ctx, listeners in opened:
            for listener in listeners:
                host, port = listener.socket.getsockname()[:2]
                log.info("MQTT %s listener on %s://%s:%d%s", spec.name, spec.transport, host, port,
                         spec.ws_path if spec.is_websocket else "")
                nursery.start_soon(_accept_loop, listener, spec, ctx, handler, gate, nursery,
                                   plain if ctx is None and not spec.is_websocket else None)
            bound[spec.name] = listeners[0].socket.getsockname()[1]
        task_status.started(bound)


async def _open(spec: ListenerSpec) -> list[trio.SocketListener]:
    port = 0 if spec.ephemeral else spec.port
    try:
        return await trio.open_tcp_listeners(port, host=spec.host, backlog=spec.backlog)
    except OSError as e:
        raise OSError(e.errno, f"MQTT {spec.name} listener cannot listen on "
                               f"{spec.host}:{port}: {e.strerror}") from None


async def _accept_loop(listener: trio.SocketListener, spec: ListenerSpec, ctx: ssl.SSLContext | None,
                       handler: Handler, gate: _Gate, nursery: trio.Nursery, plain: PlainStarter | None) -> None:
    # Accepts from the listening socket once more (a dup of its descriptor,
    # non-blocking): a wake-up accepts every socket of the listen backlog (up
    # to ACCEPT_BATCH before the others get a turn), not one trio step each,
    # and the one accept that finds the backlog empty is followed by a wait,
    # not by another try (a connect storm's cost).
    spare = socket.socket(fileno=os.dup(listener.socket.fileno()))
    try:
        spare.setblocking(False)
        async with listener:
            accepted = 0
            while True:
                if gate.rate is not None:  # over maxConnectionRate: leave the next one in the listen backlog
                    await gate.rate.wait(1)
                elif accepted == ACCEPT_BATCH:
                    accepted = 0
                    await trio.lowlevel.checkpoint()
                sock = None
                while sock is None:
                    try:
                        sock, _addr = spare.accept()
                    except BlockingIOError:
                        accepted = 0
                        await trio.lowlevel.wait_readable(spare)
                    except OSError as e:
                        if e.errno in _IGNORED_ACCEPT_ERRNOS:  # the peer went before we took it
                            continue
                        if e.errno not in _CAPACITY_ERRNOS:
                            raise
                        log.error("%s listener: accept failed (%s), retrying in 0.1 s", spec.name, e)
                        await trio.sleep(0.1)
                accepted += 1
                stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
                if gate.try_enter():
                    if plain is None:
                        nursery.start_soon(_connection, stream, spec, ctx, handler, gate, name=_TASK_NAME)
                    else:
                        _start_plain(nursery, plain, stream, spec, gate)
                else:
                    gate.log_refusal(spec)
                    await trio.aclose_forcefully(stream)
    finally:
        trio.lowlevel.notify_closing(spare)
        spare.close()


def _start_plain(nursery: trio.Nursery, plain: PlainStarter, stream: trio.SocketStream, spec: ListenerSpec,
                 gate: _Gate) -> None:
    info = _plain_info(stream, spec, gate)
    if info is not None:
        try:
            nursery.start_soon(plain, stream, info, gate.on_leave, name=_TASK_NAME)
            return
        except Exception:  # the starter failed before its coroutine existed: a bug, not the listener's end
            gate.stats.handler_errors += 1
            log.exception("%s connection %d from %s: handler failed", spec.name, info.connection_id, info.peer)
    stream.socket.close()
    gate.leave()


async def _connection(sock: trio.SocketStream, spec: ListenerSpec, ctx: ssl.SSLContext | None,
                      handler: Handler, gate: _Gate) -> None:
    # This frame lasts as long as the connection, so the handshake's locals
    # live in _handshake's frame, gone once it returns.
    stream: trio.abc.Stream = sock
    try:
        if ctx is None and not spec.is_websocket:
            info = _plain_info(sock, spec, gate)  # no handshake: nothing to wait for
        else:
            stream, info = await _handshake(sock, spec, ctx, gate)
        if info is None:
            return
        try:
            await handler(stream, info)
        except Exception:
            gate.stats.handler_errors += 1
            log.exception("%s connection %d from %s: handler failed", spec.name, info.connection_id, info.peer)
    finally:
        try:
            await _close(stream)
        finally:
            gate.leave()


def _plain_info(sock: trio.SocketStream, spec: ListenerSpec, gate: _Gate) -> ConnectionInfo | None:
    """A plain TCP connection's ConnectionInfo; None when its peer is gone
    already (logged and counted as a failed handshake)."""
    conn_id = next(_connection_ids)
    try:
        peer = sock.socket.getpeername()[:2]
        local_port = sock.socket.getsockname()[1]
    except OSError as e:
        gate.stats.handshake_failures += 1
        log.info("%s connection %d: handshake failed: %s", spec.name, conn_id, e)
        return None
    return ConnectionInfo(transport=spec.transport, listener=spec.name, peer=peer, local_port=local_port,
                          connection_id=conn_id)


async def _handshake(sock: trio.SocketStream, spec: ListenerSpec, ctx: ssl.SSLContext | None,
                     gate: _Gate) -> tuple[trio.abc.Stream, ConnectionInfo | None]:
    """(the stream that carries MQTT bytes, its ConnectionInfo); the info is
    None when the TLS or WebSocket handshake failed (logged and counted)."""
    conn_id = next(_connection_ids)
    stream: trio.abc.Stream = sock
    try:
        peer = sock.socket.getpeername()[:2]
        local_port = sock.socket.getsockname()[1]
        identity = subprotocol = None
        with trio.fail_after(spec.handshake_timeout):
            if ctx is not None:
                tls = trio.SSLStream(sock, ctx, server_side=True)
                stream = tls
                await tls.do_handshake()
                identity = identity_from_peercert(tls.getpeercert())
            if spec.is_websocket:
                stream = await accept_websocket(stream, spec.ws_path, spec.ws_subprotocols)
                subprotocol = stream.subprotocol
    except _HANDSHAKE_ERRORS as e:
        gate.stats.handshake_failures += 1
        cause = e.__cause__ or e
        log.info("%s connection %d: handshake failed: %s", spec.name, conn_id,
                 "timed out" if isinstance(e, trio.TooSlowError) else cause)
        return stream, None
    except Exception:
        gate.stats.handshake_failures += 1
        log.exception("%s connection %d: handshake failed", spec.name, conn_id)
        return stream, None
    return stream, ConnectionInfo(transport=spec.transport, listener=spec.name, peer=peer,
                                  local_port=local_port, connection_id=conn_id,
                                  certificate=identity, ws_subprotocol=subprotocol)


async def _close(stream: trio.abc.Stream) -> None:
    if type(stream) is trio.SocketStream:
        stream.socket.close()  # its aclose minus a trio step (and a handler's own close makes this a no-op)
        return
    with trio.move_on_after(CLOSE_TIMEOUT) as scope:
        try:
            await stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await trio.aclose_forcefully(stream)
    if scope.cancelled_caught:
        await trio.aclose_forcefully(stream)
