"""The trio remoting server and client over real sockets on 127.0.0.1."""

import struct

import pytest
import trio

from core.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode, encode_frame
from core.remoting.client import RemotingTimeoutError, open_remoting_client
from core.remoting.server import RemotingServer, Route


async def echo(channel, cmd):
    return cmd.make_response(ResponseCode.SUCCESS, ext={"echo": cmd.ext_fields.get("x", "")}, body=cmd.body)


async def slow(channel, cmd):
    await trio.sleep(float(cmd.ext_fields.get("sleep", "0")))
    return cmd.make_response(ResponseCode.SUCCESS, ext={"slept": cmd.ext_fields.get("sleep")})


async def start_server(nursery, **kw):
    server = RemotingServer({1000: echo, 1001: Route(slow, spawn=True)}, **kw)
    port = await nursery.start(server.serve, "127.0.0.1", 0)
    return server, f"127.0.0.1:{port}"


async def raw_connect(addr):
    host, port = addr.split(":")
    return await trio.open_tcp_stream(host, int(port))


async def read_frames(stream, n, timeout=5):
    dec = FrameDecoder()
    out = []
    with trio.fail_after(timeout):
        while len(out) < n:
            data = await stream.receive_some(65536)
            if not data:
                break
            dec.receive_data(data)
            out.extend(dec.frames())
    return out


async def test_request_response_and_pipelining(nursery):
    server, addr = await start_server(nursery)
    async with open_remoting_client() as client:
        resp = await client.invoke(addr, RemotingCommand.request(1000, {"x": "hi"}, b"body"))
        assert resp.code == 0 and resp.ext_fields["echo"] == "hi" and resp.body == b"body"
        results = {}

        async def one(i):
            r = await client.invoke(addr, RemotingCommand.request(1000, {"x": str(i)}))
            results[i] = r.ext_fields["echo"]

        async with trio.open_nursery() as n:
            for i in range(50):
                n.start_soon(one, i)
        assert results == {i: str(i) for i in range(50)}


async def test_spawned_route_does_not_block_the_connection(nursery):
    server, addr = await start_server(nursery)
    async with open_remoting_client() as client:
        order = []

        async def slow_call():
            r = await client.invoke(addr, RemotingCommand.request(1001, {"sleep": "0.5"}))
            order.append(("slow", r.ext_fields["slept"]))

        async with trio.open_nursery() as n:
            n.start_soon(slow_call)
            await trio.sleep(0.05)
            r = await client.invoke(addr, RemotingCommand.request(1000, {"x": "fast"}))
            order.append(("fast", r.ext_fields["echo"]))
        assert order == [("fast", "fast"), ("slow", "0.5")]


async def test_unknown_code_answered_even_oneway(nursery):
    server, addr = await start_server(nursery)
    stream = await raw_connect(addr)
    req = RemotingCommand.request(9999, opaque=7)
    oneway = RemotingCommand.request(9998, opaque=8, oneway=True)
    await stream.send_all(encode_frame(req) + encode_frame(oneway))
    frames = await read_frames(stream, 2)
    assert [(f.code, f.opaque, f.is_response) for f in frames] == [(3, 7, True), (3, 8, True)]
    assert frames[0].remark == " request type 9999 not supported"
    await stream.aclose()


async def test_client_timeout(nursery):
    server, addr = await start_server(nursery)
    async with open_remoting_client() as client:
        with pytest.raises(RemotingTimeoutError):
            await client.invoke(addr, RemotingCommand.request(1001, {"sleep": "2"}), timeout=0.2)
        # the connection still works afterwards and the late answer is dropped
        r = await client.invoke(addr, RemotingCommand.request(1000, {"x": "after"}))
        assert r.ext_fields["echo"] == "after"


BAD_FRAMES = {
    "length_lies": struct.pack(">ii", 2, 0),
    "header_longer_than_frame": struct.pack(">ii", 10, 100) + b"x" * 6,
    "bad_json": struct.pack(">ii", 4 + 5, 5) + b"{nope",
    "too_big": struct.pack(">ii", 16 * 1024 * 1024 + 10, 5),
}


async def test_bad_frames_close_only_that_connection(nursery):
    server, addr = await start_server(nursery)
    async with open_remoting_client() as client:
        assert (await client.invoke(addr, RemotingCommand.request(1000, {"x": "a"}))).code == 0
        for name, junk in BAD_FRAMES.items():
            stream = await raw_connect(addr)
            await stream.send_all(junk)
            with trio.fail_after(5):
                while await stream.receive_some(1024):
                    pass  # server closes: EOF
            await stream.aclose()
            r = await client.invoke(addr, RemotingCommand.request(1000, {"x": name}))
            assert r.ext_fields["echo"] == name


async def test_server_to_client_oneway_request(nursery):
    seen = trio.Event()
    got = []

    async def notify(addr, cmd):
        got.append(cmd.ext_fields)
        seen.set()

    channels = []

    async def hello(channel, cmd):
        channels.append(channel)
        return cmd.make_response(0)

    server = RemotingServer({1000: hello})
    port = await nursery.start(server.serve, "127.0.0.1", 0)
    async with open_remoting_client(handlers={int(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED): notify}) as client:
        await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(1000))
        channels[0].send_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "G"}))
        with trio.fail_after(5):
            await seen.wait()
        assert got == [{"consumerGroup": "G"}]


async def test_close_callback_runs(nursery):
    closed = []
    server, addr = await start_server(nursery)
    server.on_close(closed.append)
    async with open_remoting_client() as client:
        await client.invoke(addr, RemotingCommand.request(1000))
    with trio.fail_after(5):
        while not closed:
            await trio.sleep(0.01)
    assert len(closed) == 1 and closed[0].closed


async def test_client_reconnects_after_server_restart():
    async with open_remoting_client() as client:
        async with trio.open_nursery() as n1:
            server = RemotingServer({1000: echo})
            port = await n1.start(server.serve, "127.0.0.1", 0)
            addr = f"127.0.0.1:{port}"
            assert (await client.invoke(addr, RemotingCommand.request(1000, {"x": "1"}))).code == 0
            n1.cancel_scope.cancel()
        async with trio.open_nursery() as n2:
            server2 = RemotingServer({1000: echo})
            await n2.start(server2.serve, "127.0.0.1", port)
            with trio.fail_after(5):
                while True:
                    try:
                        r = await client.invoke(addr, RemotingCommand.request(1000, {"x": "2"}))
                        break
                    except ConnectionError:
                        await trio.sleep(0.01)  # the old connection's EOF may still be in flight
            assert r.ext_fields["echo"] == "2"
            n2.cancel_scope.cancel()


async def test_broker_to_client_request_with_response(nursery):
    channels = []

    async def hello(channel, cmd):
        channels.append(channel)
        return cmd.make_response(0)

    async def running_info(addr, cmd):
        return cmd.make_response(0, body=b"info")

    server = RemotingServer({1000: hello})
    port = await nursery.start(server.serve, "127.0.0.1", 0)
    async with open_remoting_client(handlers={int(RequestCode.GET_CONSUMER_RUNNING_INFO): running_info}) as client:
        await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(1000))
        resp = await channels[0].request(RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO), timeout=5)
        assert resp.body == b"info"
        r = await channels[0].request(RemotingCommand.request(4242), timeout=5)
        assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
