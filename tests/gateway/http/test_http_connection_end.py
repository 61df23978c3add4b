"""An HTTP connection is freed when its peer is gone, not ``keep_alive_timeout`` later (issue 17).

The fault campaign's fuzzer (~1,000 HTTP connections a second, each reset
at once) took the server's RSS up by ~100 MiB: Hypercorn's trio worker kept
each ended connection's tasks, h11 state and socket objects until its
keep-alive timer ran out (5 s), so ~5,000 dead connections were alive at any
time (``gateway.http.connection_guard``). Here the real HTTP server of
``mqgate`` (Hypercorn's trio worker with our ``GuardedTCPServer``, a socket
bound by ``gateway.http.server``) runs in this trio run with a 60 s
keep-alive, and real sockets end connections in four ways; every
connection's tasks must be gone well before the keep-alive would have
ended them. On the old tree they stay the full 60 s.
"""

from __future__ import annotations

import socket
import struct

import trio
import trio.testing

from gateway.http.server import bind, hypercorn_config, serve_app

KEEP_ALIVE = 60.0  # Hypercorn's default is 5 s: long enough here that a lingering connection cannot pass
FREED_WITHIN = 10.0
PER_KIND = 10
REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
BODY = b"ok\n"


async def _app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})


def _tasks_under(nursery: trio.Nursery) -> int:
    n = 0
    for task in nursery.child_tasks:
        n += 1
        for child in task.child_nurseries:
            n += _tasks_under(child)
    return n


async def _read_response(stream: trio.SocketStream) -> bytes:
    got = b""
    with trio.fail_after(10):
        while not got.endswith(BODY):
            data = await stream.receive_some(4096)
            assert data, f"the server closed before answering: {got!r}"
            got += data
    return got


async def _reset(stream: trio.SocketStream) -> None:
    # SO_LINGER 0: close sends RST, as the fuzzer's connections do
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


async def _answered_then_closed(port: int) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(REQUEST)
    assert (await _read_response(stream)).startswith(b"HTTP/1.1 200")
    await stream.aclose()


async def _answered_then_reset(port: int) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(REQUEST)
    await _read_response(stream)
    await _reset(stream)


async def _reset_at_once(port: int) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(REQUEST + REQUEST[:10])  # a request and the start of the next one
    await _reset(stream)


async def _bad_request(port: int) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"\x00\xffGET nonsense\r\n\r\n")
    with trio.fail_after(10):
        while await stream.receive_some(4096):  # a 400, then the server closes
            pass
    await stream.aclose()


async def test_ended_http_connections_are_freed_before_the_keep_alive_timeout():
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = hypercorn_config(sock)
    config.keep_alive_timeout = KEEP_ALIVE
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_app, _app, config)
        await trio.testing.wait_all_tasks_blocked()  # the server's own tasks are all started
        idle = _tasks_under(nursery)
        for end in (_answered_then_closed, _answered_then_reset, _reset_at_once, _bad_request):
            async with trio.open_nursery() as clients:
                for _ in range(PER_KIND):
                    clients.start_soon(end, port)
        deadline = trio.current_time() + FREED_WITHIN
        while _tasks_under(nursery) > idle and trio.current_time() < deadline:
            await trio.sleep(0.02)  # polling a condition, bounded by the deadline
        left = _tasks_under(nursery) - idle
        nursery.cancel_scope.cancel()
    assert left == 0, (f"{left} tasks of the {4 * PER_KIND} ended HTTP connections still alive after "
                       f"{FREED_WITHIN} s (keep-alive timeout {KEEP_ALIVE} s)")
