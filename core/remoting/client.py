"""The trio remoting client: requests matched to responses by opaque.

Rules kept here:

- One connection per address, opened on first use and again after it
  breaks (reconnect is lazy: the next call reconnects). Connecting has a
  timeout (``connect_timeout``); every call has one (``timeout``), so no wait
  on a peer is unbounded.
- Opaques come from one counter per client, masked to a non-negative int32;
  a response is delivered to the caller waiting on its opaque, a late one
  (after its caller timed out) is dropped.
- A request that arrives from the server (NOTIFY_CONSUMER_IDS_CHANGED,
  CHECK_TRANSACTION_STATE, ...) goes to ``handlers[code]``; the handler's
  result, if any and if the request is not oneway, is sent back. Unknown
  codes are answered REQUEST_CODE_NOT_SUPPORTED like the server does.
- When a connection breaks, every caller waiting on it gets
  `RemotingConnectionError` at once, not at its timeout.
- All tasks live in the nursery given to the client (`open_remoting_client`
  makes one); closing the client closes every connection.
"""

from __future__ import annotations

import itertools
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

import trio

from ._codes import LanguageCode, RemotingFlag, ResponseCode
from ._command import RemotingCommand, RemotingProtocolError
from ._frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame_parts

__all__ = [
    "RemotingClient",
    "RemotingConnectionError",
    "RemotingTimeoutError",
    "open_remoting_client",
    "split_addr",
]

log = logging.getLogger("mqgate.remoting.client")

_RESPONSE = int(RemotingFlag.RESPONSE)
_ONEWAY = int(RemotingFlag.ONEWAY)

ClientHandler = Callable[[str, RemotingCommand], Awaitable[RemotingCommand | None]]


class RemotingConnectionError(ConnectionError):
    """Could not connect, or the connection broke before the response came."""


class RemotingTimeoutError(TimeoutError):
    """No response within the call's timeout."""


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be host:port, not {addr!r}")
    return host.strip("[]"), int(port)


class _Connection:
    def __init__(self, addr: str, stream: trio.SocketStream, client: "RemotingClient") -> None:
        self.addr = addr
        self.stream = stream
        self.client = client
        self.pending: dict[int, list[Any]] = {}
        self.out: list[bytes] = []
        self.wake = trio.Event()
        self.closed = False
        self.scope = trio.CancelScope()
        self.writing = False

    def send(self, cmd: RemotingCommand, *, wake: bool = True) -> None:
        if self.closed:
            raise RemotingConnectionError(f"connection to {self.addr} is closed")
        prefix, body = encode_frame_parts(cmd)
        self.out.append(prefix)
        if body:
            self.out.append(body)
        if wake:
            self.wake.set()

    async def flush(self) -> None:
        """Send what is queued now, in the caller's task (one send in flight at a time)."""
        if self.writing or self.closed:
            return
        self.writing = True
        try:
            while self.out and not self.closed:
                data = b"".join(self.out)
                self.out.clear()
                with trio.fail_after(self.client.write_timeout):
                    await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError) as exc:
            self.close()
            raise RemotingConnectionError(f"write to {self.addr} failed: {type(exc).__name__}") from exc
        except trio.Cancelled:
            self.close()  # a frame may be half written: this stream is unusable
            raise
        finally:
            self.writing = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.scope.cancel()
        for slot in self.pending.values():
            slot[0].set()
        self.wake.set()
        if self.client._conns.get(self.addr) is self:
            del self.client._conns[self.addr]

    async def run(self) -> None:
        with self.scope:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer)
                    await self._reader(nursery)
                    nursery.cancel_scope.cancel()
            # trio wraps errors of a nursery's body and tasks in an ExceptionGroup: a reset by the peer
            # must end this connection only, never the client's nursery
            except* (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError,
                     RemotingConnectionError) as group:
                log.info("connection to %s broke: %s", self.addr, type(group.exceptions[0]).__name__)
            except* RemotingProtocolError as group:
                log.warning("bad frame from %s (%s); closing", self.addr, group.exceptions[0])
        self.close()
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await self.stream.aclose()

    async def _writer(self) -> None:
        while not self.closed:
            await self.wake.wait()
            self.wake = trio.Event()
            await self.flush()

    async def _reader(self, nursery: trio.Nursery) -> None:
        decoder = FrameDecoder(max_frame_size=self.client.max_frame_size)
        while True:
            data = await self.stream.receive_some(256 * 1024)
            if not data:
                return
            decoder.receive_data(data)
            for cmd in decoder.frames():
                if cmd.flag & _RESPONSE:
                    slot = self.pending.get(cmd.opaque)
                    if slot is not None:
                        slot[1] = cmd
                        slot[0].set()
                else:
                    nursery.start_soon(self._serve_request, cmd)

    async def _serve_request(self, cmd: RemotingCommand) -> None:
        handler = self.client.handlers.get(cmd.code)
        if handler is None:
            resp: RemotingCommand | None = cmd.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
            )
        else:
            try:
                resp = await handler(self.addr, cmd)
            except Exception as exc:
                log.exception("client handler for code %d failed", cmd.code)
                resp = cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
            if cmd.flag & _ONEWAY:
                resp = None
        if resp is not None and not self.closed:
            resp.opaque = cmd.opaque
            resp.flag |= _RESPONSE
            self.send(resp)


class RemotingClient:
    """Calls remoting servers; see the module docstring."""

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        handlers: dict[int, ClientHandler] | None = None,
        language: LanguageCode = LanguageCode.PYTHON,
        version: int | None = None,
        connect_timeout: float = 3.0,
        write_timeout: float = 30.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self._nursery = nursery
        self.handlers: dict[int, ClientHandler] = dict(handlers or {})
        self.language = language
        self.version = version
        self.connect_timeout = connect_timeout
        self.write_timeout = write_timeout
        self.max_frame_size = max_frame_size
        self._conns: dict[str, _Connection] = {}
        self._connecting: dict[str, trio.Lock] = {}
        self._opaques = itertools.count(1)
        self.closed = False

    async def _connection(self, addr: str) -> _Connection:
        if self.closed:
            raise RemotingConnectionError("client is closed")
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connecting.setdefault(addr, trio.Lock())
        async with lock:
            conn = self._conns.get(addr)
            if conn is not None and not conn.closed:
                return conn
            host, port = split_addr(addr)
            try:
                with trio.fail_after(self.connect_timeout):
                    stream = await trio.open_tcp_stream(host, port)
            except (OSError, trio.TooSlowError) as exc:
                raise RemotingConnectionError(f"cannot connect to {addr}: {exc}") from exc
            conn = _Connection(addr, stream, self)
            self._conns[addr] = conn
            self._nursery.start_soon(conn.run)
            return conn

    def _prepare(self, cmd: RemotingCommand, oneway: bool) -> int:
        cmd.opaque = next(self._opaques) & 0x7FFFFFFF
        cmd.flag = (cmd.flag & ~(_RESPONSE | _ONEWAY)) | (_ONEWAY if oneway else 0)
        cmd.language = self.language
        if self.version is not None:
            cmd.version = self.version
        return cmd.opaque

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send a request and wait for its response (at most ``timeout`` s in all)."""
        with trio.move_on_after(timeout) as cs:
            conn = await self._connection(addr)
            opaque = self._prepare(cmd, oneway=False)
            slot: list[Any] = [trio.Event(), None]
            conn.pending[opaque] = slot
            try:
                conn.send(cmd, wake=conn.writing)
                await conn.flush()
                await slot[0].wait()
            finally:
                conn.pending.pop(opaque, None)
            if slot[1] is None:
                raise RemotingConnectionError(f"connection to {addr} closed before the response to code {cmd.code}")
            return slot[1]
        assert cs.cancelled_caught
        raise RemotingTimeoutError(f"no response from {addr} to code {cmd.code} within {timeout}s")

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> None:
        with trio.move_on_after(timeout) as cs:
            conn = await self._connection(addr)
            self._prepare(cmd, oneway=True)
            conn.send(cmd, wake=conn.writing)
            await conn.flush()
            return
        if cs.cancelled_caught:
            raise RemotingTimeoutError(f"could not send code {cmd.code} to {addr} within {timeout}s")

    def close_connection(self, addr: str) -> None:
        conn = self._conns.get(addr)
        if conn is not None:
            conn.close()

    def aclose_nowait(self) -> None:
        self.closed = True
        for conn in list(self._conns.values()):
            conn.close()


@asynccontextmanager
async def open_remoting_client(**kwargs: Any) -> AsyncIterator[RemotingClient]:
    """A client whose connections live in a nursery of their own."""
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery, **kwargs)
        try:
            yield client
        finally:
            client.aclose_nowait()
            nursery.cancel_scope.cancel()
