"""MQTT over WebSocket: the server handshake and a byte stream over frames.

Rules kept here:
- The stream carries MQTT bytes exactly like TCP: the payload of binary
  frames is concatenated, whatever the frame (and fragment) boundaries; a
  packet may span frames and a frame may hold several packets. Payload is
  handed on as it arrives, so no frame is buffered whole.
- Each ``send_all`` is one binary frame.
- A text frame, or a frame wsproto cannot parse, is a peer error: we send a
  Close (1003 or the parser's code) and the stream is broken
  (``trio.BrokenResourceError``), as MQTT 5.0 section 6 asks.
- Pings are answered; a Close from the peer is answered and reads as EOF.
- Control frames we send from ``receive_some`` share one lock with
  ``send_all``, so the transport never sees two writers.
"""

from __future__ import annotations

from http import HTTPStatus

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (AcceptConnection, BytesMessage, CloseConnection, Ping, RejectConnection,
                            Request, TextMessage)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import ProtocolError as WsProtocolError

RECEIVE_SIZE = 65536
MAX_REQUEST_HEAD = 16384
CLOSE_TIMEOUT = 2.0


class HandshakeError(Exception):
    """The peer's handshake was wrong or incomplete; the message says how."""


async def accept_websocket(transport: trio.abc.Stream, path: str,
                           subprotocols: tuple[str, ...]) -> WebSocketStream:
    """Read the HTTP upgrade, answer it, return the stream (no timeout here:
    the caller bounds the whole handshake). Wrong path: 404; no subprotocol
    of ours offered: 400; both answered before ``HandshakeError``."""
    ws = WSConnection(ConnectionType.SERVER)
    # wsproto's server side drops bytes that follow the request in the same
    # read (a client may send its first frame at once), so only the header
    # block is fed to it and the rest is fed after the accept.
    head = bytearray()
    while (end := head.find(b"\r\n\r\n")) < 0:
        if len(head) > MAX_REQUEST_HEAD:
            await _reject(transport, 431, "request header block too large")
            raise HandshakeError(f"request header block over {MAX_REQUEST_HEAD} bytes")
        data = await transport.receive_some(RECEIVE_SIZE)
        if not data:
            raise HandshakeError("peer closed during the WebSocket handshake")
        head += data
    rest = bytes(head[end + 4:])
    request = None
    try:
        ws.receive_data(bytes(head[:end + 4]))
        request = next((e for e in ws.events() if isinstance(e, Request)), None)
    except WsProtocolError as e:
        hint = getattr(e, "event_hint", None)
        status = hint.status_code if isinstance(hint, RejectConnection) else 400
        await _reject(transport, status, str(e))
        raise HandshakeError(f"bad WebSocket upgrade: {e}") from None
    if request is None:
        raise HandshakeError("no WebSocket upgrade request")
    target = request.target.split("?", 1)[0]
    if target != path:
        await _reject(transport, 404, f"no WebSocket endpoint at {target}; MQTT is at {path}")
        raise HandshakeError(f"wrong path {request.target!r}")
    chosen = next((p for p in subprotocols if p in request.subprotocols), None)
    if chosen is None:
        await _reject(transport, 400, "MQTT over WebSocket needs the subprotocol "
                      + " or ".join(repr(p) for p in subprotocols))
        raise HandshakeError(f"no MQTT subprotocol offered ({request.subprotocols})")
    await transport.send_all(ws.send(AcceptConnection(subprotocol=chosen)))
    if rest:
        ws.receive_data(rest)
    return WebSocketStream(transport, ws, subprotocol=chosen)


async def _reject(transport: trio.abc.Stream, status: int, why: str) -> None:
    """A plain HTTP error answer (written by hand: wsproto cannot answer a
    request it failed to parse)."""
    body = (why + "\n").encode()
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            f"content-type: text/plain; charset=utf-8\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode()
    await transport.send_all(head + body)


class WebSocketStream(trio.abc.Stream):
    def __init__(self, transport: trio.abc.Stream, ws: WSConnection, *, subprotocol: str) -> None:
        self.transport = transport
        self.subprotocol = subprotocol
        self._ws = ws
        self._buffer = bytearray()
        self._eof = False
        self._broken: str | None = None
        self._closed = False
        self._sending = False
        self._receiving = False
        self._send_lock = trio.Lock()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this WebSocket")
        self._sending = True
        try:
            if self._closed:
                raise trio.ClosedResourceError("WebSocket closed")
            if self._broken or self._ws.state is not ConnectionState.OPEN:
                raise trio.BrokenResourceError(self._broken or "WebSocket closing")
            if not data:
                await trio.lowlevel.checkpoint()
                return
            frame = self._ws.send(BytesMessage(data=bytes(data)))
            async with self._send_lock:
                await self.transport.send_all(frame)
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this WebSocket")
        self._receiving = True
        try:
            while True:
                if self._closed:
                    raise trio.ClosedResourceError("WebSocket closed")
                await self._handle_events()
                if self._buffer:
                    n = len(self._buffer) if max_bytes is None else min(max_bytes, len(self._buffer))
                    chunk = bytes(self._buffer[:n])
                    del self._buffer[:n]
                    return chunk
                if self._broken:
                    raise trio.BrokenResourceError(self._broken)
                if self._eof:
                    await trio.lowlevel.checkpoint()
                    return b""
                data = await self.transport.receive_some(RECEIVE_SIZE)
                self._ws.receive_data(data or None)  # None: the TCP side ended
        finally:
            self._receiving = False

    async def _handle_events(self) -> None:
        for event in self._ws.events():
            if isinstance(event, BytesMessage):
                self._buffer += event.data
            elif isinstance(event, Ping):
                await self._send_control(self._ws.send(event.response()))
            elif isinstance(event, TextMessage):
                self._fail("text frame (MQTT needs binary frames)")
                await self._send_close(CloseReason.UNSUPPORTED_DATA, "binary frames only")
                return
            elif isinstance(event, CloseConnection):
                if self._ws.state is ConnectionState.REMOTE_CLOSING:
                    await self._send_control(self._ws.send(event.response()))
                if self._ws.state is ConnectionState.OPEN:  # a parse failure, not a peer Close
                    self._fail(f"WebSocket protocol error: {event.reason}")
                    await self._send_close(event.code, event.reason)
                    return
                self._eof = True

    def _fail(self, why: str) -> None:
        self._broken = why
        self._buffer.clear()

    async def _send_close(self, code: int, reason: str | None) -> None:
        if self._ws.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            await self._send_control(self._ws.send(CloseConnection(code=code, reason=reason)))

    async def _send_control(self, data: bytes) -> None:
        try:
            async with self._send_lock:
                await self.transport.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._eof = True  # the next read finds the end

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            if (self._ws.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING)
                    and not self._send_lock.locked()):
                data = self._ws.send(CloseConnection(code=CloseReason.NORMAL_CLOSURE))
                with trio.move_on_after(CLOSE_TIMEOUT):
                    async with self._send_lock:
                        await self.transport.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await self.transport.aclose()
