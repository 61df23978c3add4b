"""The trio remoting server: frames in, processors called by code, responses out.

One nursery per connection, holding a reader (this function's body) and a
writer task. Rules kept here:

- All complete frames of one read are decoded and acted on before the next
  read; their responses are appended to the connection's output and sent
  with one ``send_all`` when the read's frames are done. Output of spawned
  handlers and broker-to-client requests goes through a writer task, also
  one ``send_all`` per wake-up. Only one send is in flight per connection.
- Requests are dispatched by code through a table ``code -> Route``. A route
  is *inline* (awaited by the reader, so requests of that code on one
  connection are handled in arrival order: sends keep their order) or
  *spawned* (a task in the connection's nursery: long-polling pulls must not
  hold up the connection).
- An unknown code is answered REQUEST_CODE_NOT_SUPPORTED, for oneway
  requests too (Java's ``processRequestCommand`` does the same). A processor
  that raises `HeaderFieldError` is answered SYSTEM_ERROR with the message;
  any other exception is logged and answered SYSTEM_ERROR; neither is
  answered for a oneway request.
- A frame the decoder rejects (`RemotingProtocolError`: length lies, header
  longer than the frame, bad JSON, over 16 MiB) closes that connection only,
  with one log line, after the good frames before it are served. Other
  connections are untouched.
- A run of consecutive requests with the same code in one read may be
  handed to the route's ``batch`` handler at once (same answers, fewer
  scheduler passes).
- Every wait on the peer has a timeout: reads (``idle_timeout``, Java's
  120 s channel idle), writes (``write_timeout``) and broker-to-client
  requests (``Channel.request``).
- ``Channel.read_at`` is the trio time of the read being dispatched: how
  long a request has waited in this process since it was read (the
  broker's fast failure answers sends that waited too long).
- ``request_hook(channel, cmd)`` (ACL) sees every request that has a route
  before it runs; a command it returns is the answer (not sent for oneway
  requests) and the request is dropped.
- Closing a connection runs the server's close callbacks once, with the
  `Channel`, so tables keyed by channel (consumer groups, namesrv brokers)
  forget it.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import trio

from ._codes import RemotingFlag, ResponseCode
from ._command import HeaderFieldError, RemotingCommand, RemotingProtocolError
from ._frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame_parts

__all__ = ["Channel", "Handler", "RemotingServer", "Route", "ChannelClosedError"]

log = logging.getLogger("mqgate.remoting.server")

Handler = Callable[["Channel", RemotingCommand], Awaitable[RemotingCommand | None]]
BatchHandler = Callable[["Channel", list[RemotingCommand]], Awaitable[list[RemotingCommand | None]]]

_RESPONSE = int(RemotingFlag.RESPONSE)
_ONEWAY = int(RemotingFlag.ONEWAY)
_channel_ids = itertools.count(1)


class ChannelClosedError(ConnectionError):
    """The connection went away before a broker-to-client request was answered."""


@dataclass(frozen=True, slots=True)
class Route:
    """How a code is served. ``batch``, for inline routes, takes a run of
    consecutive requests of this code from one read and answers each in
    order (e.g. one store append pass and one scheduler checkpoint for a
    burst of oneway sends); it must behave exactly like ``handler`` on each."""

    handler: Handler
    spawn: bool = False
    batch: BatchHandler | None = None


class Channel:
    """One accepted connection, as processors see it.

    Hashable by identity; ``send`` queues a command for the writer and never
    blocks; ``send_oneway`` and ``request`` are the broker-to-client calls
    (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE, ...).
    """

    def __init__(self, stream: trio.SocketStream, server: "RemotingServer") -> None:
        self.id = next(_channel_ids)
        self._stream = stream
        self._server = server
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._wake = trio.Event()
        self._pending: dict[int, list[Any]] = {}
        self._opaques = itertools.count(1)
        self.closed = False
        self.attrs: dict[str, Any] = {}
        try:
            peer = stream.socket.getpeername()
            self.remote_addr: tuple[str, int] = (peer[0], peer[1])
        except OSError:
            self.remote_addr = ("0.0.0.0", 0)
        sock = stream.socket.getsockname()
        self.local_addr: tuple[str, int] = (sock[0], sock[1])
        self._cancel: trio.CancelScope | None = None
        self._batching = False  # the reader is dispatching a read's frames; it flushes after
        self.read_at = 0.0  # trio time of the read whose frames are being dispatched (fast failure)
        self._writing = False

    def __repr__(self) -> str:
        return f"<Channel {self.id} {self.remote_addr[0]}:{self.remote_addr[1]}{' closed' if self.closed else ''}>"

    @property
    def remote(self) -> str:
        return f"{self.remote_addr[0]}:{self.remote_addr[1]}"

    # ---- output ----

    def send(self, cmd: RemotingCommand) -> None:
        """Queue ``cmd`` for this connection; silently dropped once closed."""
        if self.closed:
            return
        prefix, body = encode_frame_parts(cmd)
        self._out.append(prefix)
        if body:
            self._out.append(body)
        self._out_bytes += len(prefix) + len(body)
        if self._out_bytes > self._server.max_output_bytes:
            log.warning("%s: peer does not read (%d bytes queued); closing", self, self._out_bytes)
            self.close()
            return
        if not self._batching:
            self._wake.set()

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """A broker-to-client oneway request with our own opaque."""
        cmd.flag = (cmd.flag | _ONEWAY) & ~_RESPONSE
        cmd.opaque = next(self._opaques) & 0x7FFFFFFF
        self.send(cmd)

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """A broker-to-client request that waits for the response.

        Call it from a spawned task or for another connection: an inline
        handler of this same connection holds its reader, so the answer
        could not be read before the timeout.
        """
        if self.closed:
            raise ChannelClosedError(f"{self} is closed")
        cmd.flag &= ~(_ONEWAY | _RESPONSE)
        cmd.opaque = opaque = next(self._opaques) & 0x7FFFFFFF
        slot: list[Any] = [trio.Event(), None]
        self._pending[opaque] = slot
        try:
            self.send(cmd)
            with trio.fail_after(timeout):
                await slot[0].wait()
        finally:
            self._pending.pop(opaque, None)
        if slot[1] is None:
            raise ChannelClosedError(f"{self} closed before answering request {cmd.code}")
        return slot[1]

    def close(self) -> None:
        if self._cancel is not None:
            self._cancel.cancel()
        self._mark_closed()

    def _mark_closed(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._out.clear()
        for slot in self._pending.values():
            slot[0].set()
        self._wake.set()

    def _on_response(self, cmd: RemotingCommand) -> None:
        slot = self._pending.get(cmd.opaque)
        if slot is None:
            log.debug("%s: response to unknown opaque %d dropped", self, cmd.opaque)
            return
        slot[1] = cmd
        slot[0].set()

    async def _flush(self) -> None:
        """Send everything queued; one writer at a time, later data joins the running one."""
        if self._writing or self.closed:
            return
        self._writing = True
        try:
            while self._out and not self.closed:
                data = b"".join(self._out)
                self._out.clear()
                self._out_bytes = 0
                with trio.fail_after(self._server.write_timeout):
                    await self._stream.send_all(data)
        finally:
            self._writing = False

    async def _writer(self) -> None:
        while not self.closed:
            await self._wake.wait()
            self._wake = trio.Event()
            await self._flush()


class RemotingServer:
    """Accepts connections and dispatches their requests by code."""

    def __init__(
        self,
        routes: dict[int, Route | Handler] | None = None,
        *,
        name: str = "remoting",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        idle_timeout: float = 120.0,
        write_timeout: float = 30.0,
        max_output_bytes: int = 256 * 1024 * 1024,
        request_hook: Callable[[Channel, RemotingCommand], RemotingCommand | None] | None = None,
    ) -> None:
        self.name = name
        self.request_hook = request_hook
        self.routes: dict[int, Route] = {}
        for code, r in (routes or {}).items():
            self.register(code, r)
        self.max_frame_size = max_frame_size
        self.idle_timeout = idle_timeout
        self.write_timeout = write_timeout
        self.max_output_bytes = max_output_bytes
        self.channels: set[Channel] = set()
        self._close_callbacks: list[Callable[[Channel], None]] = []
        self.port: int | None = None

    def register(self, code: int, handler: Route | Handler, *, spawn: bool = False, batch: BatchHandler | None = None) -> None:
        self.routes[int(code)] = handler if isinstance(handler, Route) else Route(handler, spawn, batch)

    def on_close(self, callback: Callable[[Channel], None]) -> None:
        """``callback(channel)`` runs once when a connection ends (must not block)."""
        self._close_callbacks.append(callback)

    async def serve(self, host: str | None, port: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Listen on ``host:port`` (0 = any free port); ``task_status.started(bound_port)``."""
        try:
            listeners = await trio.open_tcp_listeners(port, host=host or None)
        except OSError as e:  # the port is what a person needs to read
            raise OSError(e.errno, f"{self.name} cannot listen on {host or '*'}:{port}: {e.strerror}") from None
        self.port = listeners[0].socket.getsockname()[1]
        log.info("%s listening on %s:%d", self.name, host or "*", self.port)
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            task_status.started(self.port)

    async def _handle(self, stream: trio.SocketStream) -> None:
        channel = Channel(stream, self)
        self.channels.add(channel)
        try:
            async with trio.open_nursery() as nursery:
                channel._cancel = nursery.cancel_scope
                nursery.start_soon(self._writer_guard, channel, nursery.cancel_scope)
                await self._read_loop(channel, stream, nursery)
                nursery.cancel_scope.cancel()
        finally:
            channel._mark_closed()
            self.channels.discard(channel)
            for cb in self._close_callbacks:
                try:
                    cb(channel)
                except Exception:
                    log.exception("%s: close callback failed for %s", self.name, channel)
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()

    async def _writer_guard(self, channel: Channel, scope: trio.CancelScope) -> None:
        try:
            await channel._writer()
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError) as exc:
            log.info("%s: %s: write failed (%s); closing", self.name, channel, type(exc).__name__)
        scope.cancel()

    async def _read_loop(self, channel: Channel, stream: trio.SocketStream, nursery: trio.Nursery) -> None:
        decoder = FrameDecoder(max_frame_size=self.max_frame_size)
        routes = self.routes
        idle = self.idle_timeout if self.idle_timeout and self.idle_timeout > 0 else math.inf
        while True:
            with trio.move_on_after(idle) as cs:
                try:
                    data = await stream.receive_some(256 * 1024)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return
            if cs.cancelled_caught:
                log.info("%s: %s idle for %ss; closing", self.name, channel, idle)
                return
            if not data:
                return
            decoder.receive_data(data)
            channel.read_at = trio.current_time()
            cmds: list[RemotingCommand] = []
            bad: RemotingProtocolError | None = None
            try:
                cmds.extend(decoder.frames())
            except RemotingProtocolError as exc:
                bad = exc  # serve the good frames before it, then close
            channel._batching = True
            try:
                await self._dispatch(channel, cmds, nursery)
            finally:
                channel._batching = False
            if bad is not None:
                await self._flush_quietly(channel)
                log.warning("%s: %s sent a bad frame (%s); closing that connection", self.name, channel, bad)
                return
            # one write for every response of this read (the writer task covers spawned handlers)
            try:
                await channel._flush()
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError) as exc:
                log.info("%s: %s: write failed (%s); closing", self.name, channel, type(exc).__name__)
                return

    async def _dispatch(self, channel: Channel, cmds: list[RemotingCommand], nursery: trio.Nursery) -> None:
        routes = self.routes
        i, n = 0, len(cmds)
        while i < n:
            cmd = cmds[i]
            i += 1
            if cmd.flag & _RESPONSE:
                channel._on_response(cmd)
                continue
            route = routes.get(cmd.code)
            if self.request_hook is not None and route is not None:
                refusal = self.request_hook(channel, cmd)
                if refusal is not None:
                    if not cmd.flag & _ONEWAY:
                        refusal.opaque = cmd.opaque
                        refusal.flag |= _RESPONSE
                        channel.send(refusal)
                    continue
            if route is None:
                channel.send(
                    cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
                )
            elif route.spawn:
                nursery.start_soon(self._run, route.handler, channel, cmd)
            elif route.batch is not None and self.request_hook is None and i < n and cmds[i].code == cmd.code and not cmds[i].flag & _RESPONSE:
                j = i
                while j < n and cmds[j].code == cmd.code and not cmds[j].flag & _RESPONSE:
                    j += 1
                await self._run_batch(route, channel, cmds[i - 1 : j])
                i = j
            else:
                await self._run(route.handler, channel, cmd)

    async def _run_batch(self, route: Route, channel: Channel, run: list[RemotingCommand]) -> None:
        assert route.batch is not None
        try:
            responses = await route.batch(channel, run)
        except Exception:
            log.exception("%s: batch processor for code %d failed; serving one by one", self.name, run[0].code)
            for cmd in run:
                await self._run(route.handler, channel, cmd)
            return
        for cmd, resp in zip(run, responses):
            if resp is not None and not cmd.flag & _ONEWAY:
                resp.opaque = cmd.opaque
                resp.flag |= _RESPONSE
                channel.send(resp)

    async def _flush_quietly(self, channel: Channel) -> None:
        try:
            await channel._flush()
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError):
            pass

    async def _run(self, handler: Handler, channel: Channel, cmd: RemotingCommand) -> None:
        try:
            resp = await handler(channel, cmd)
        except HeaderFieldError as exc:
            resp = cmd.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception as exc:
            log.exception("%s: processor for code %d failed", self.name, cmd.code)
            resp = cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if resp is not None and not cmd.flag & _ONEWAY:
            resp.opaque = cmd.opaque
            resp.flag |= _RESPONSE
            channel.send(resp)
