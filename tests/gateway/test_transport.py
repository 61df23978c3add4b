"""Listeners over real sockets on 127.0.0.1: TCP, TLS, WebSocket, WSS.

The handler is an echo; clients are trio streams, Python's ssl and wsproto.
Certificates come from Debian's openssl, made once per session in a temp dir.
"""

import functools
import logging
import socket
import ssl
import subprocess
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from wsproto import ConnectionType, WSConnection
from wsproto.events import (AcceptConnection, BytesMessage, CloseConnection, Ping, Pong,
                            RejectConnection, RejectData, Request, TextMessage)

from gateway.config import ConfigError
from gateway.listeners import (CertIdentity, ListenerSpec, ListenerStats, TlsConfig,
                               listener_specs_from_dict, serve_listeners)
from gateway.listeners._serve import ACCEPT_BATCH


# --- certificates -------------------------------------------------------------

@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=Test CA")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, subj, ext in (("server", "/CN=localhost", ["-extfile", "server.ext"]),
                            ("client", "/C=DE/O=Acme, Inc./CN=dev1", [])):
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subj)
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", *ext)
    # a client certificate from a CA the server does not trust
    run("req", "-x509", *ec, "-keyout", "rogue.key", "-out", "rogue.crt", "-days", "2",
        "-subj", "/CN=rogue")
    return d


def server_tls(certs, **kw):
    return TlsConfig(certfile=str(certs / "server.crt"), keyfile=str(certs / "server.key"),
                     cafile=str(certs / "ca.crt"), **kw)


def client_context(certs, cert="client"):
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(certs / f"{cert}.crt"), str(certs / f"{cert}.key"))
    return ctx


# --- server and clients ---------------------------------------------------------

class Echo:
    def __init__(self):
        self.infos = []
        self.nodelay = []

    async def __call__(self, stream, info):
        self.infos.append(info)
        sock = getattr(stream, "socket", None) or getattr(getattr(stream, "transport_stream", None),
                                                           "socket", None)
        if sock is not None:
            self.nodelay.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        while data := await stream.receive_some():
            await stream.send_all(data)


@asynccontextmanager
async def serving(specs, handler, **kw):
    async with trio.open_nursery() as nursery:
        ports = await nursery.start(functools.partial(serve_listeners, specs, handler, **kw))
        yield ports
        nursery.cancel_scope.cancel()


async def receive_exactly(stream, n):
    out = bytearray()
    while len(out) < n:
        data = await stream.receive_some()
        if not data:
            break
        out += data
    return bytes(out)


async def closed_by_server(stream):
    """True once the server has closed (EOF, reset, or TLS alert)."""
    try:
        return await stream.receive_some() == b""
    except (trio.BrokenResourceError, ConnectionError):
        return True


class WsClient:
    def __init__(self, stream):
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.events = []

    @classmethod
    async def connect(cls, port, *, path="/mqtt", subprotocols=("mqtt",), tls=None, first=b""):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        if tls is not None:
            stream = trio.SSLStream(stream, tls, server_hostname="localhost")
        self = cls(stream)
        request = self.ws.send(Request(host="localhost", target=path, subprotocols=list(subprotocols)))
        await stream.send_all(request + first)
        self.answer = await self.next_event((AcceptConnection, RejectConnection))
        return self

    async def next_event(self, kinds):
        while True:
            while self.events:
                event = self.events.pop(0)
                if isinstance(event, kinds):
                    return event
            data = await self.stream.receive_some()
            self.ws.receive_data(data or None)
            self.events.extend(self.ws.events())

    async def send(self, data, *, finished=True):
        await self.stream.send_all(self.ws.send(BytesMessage(data=data, message_finished=finished)))

    async def read(self, n):
        out = bytearray()
        while len(out) < n:
            event = await self.next_event((BytesMessage, CloseConnection))
            if isinstance(event, CloseConnection):
                break
            out += event.data
        return bytes(out)


def client_frame(payload, opcode=0x2):
    """One final, masked client frame (RFC 6455 section 5.2), small payloads."""
    mask = b"\x01\x02\x03\x04"
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked


def spec(transport, **kw):
    return ListenerSpec(transport=transport, ephemeral=True, **kw)


# --- TCP ------------------------------------------------------------------------

async def test_tcp_echo_info_and_nodelay(caplog):
    caplog.set_level(logging.INFO, logger="mqgate.gateway")
    echo = Echo()
    async with serving([spec("tcp")], echo) as ports:
        assert set(ports) == {"tcp"} and ports["tcp"] > 0
        with trio.fail_after(5):
            client = await trio.open_tcp_stream("127.0.0.1", ports["tcp"])
            await client.send_all(b"\x10\x00hello")
            assert await receive_exactly(client, 7) == b"\x10\x00hello"
            await client.aclose()
    (info,) = echo.infos
    assert info.transport == "tcp" and info.listener == "tcp" and info.local_port == ports["tcp"]
    assert info.peer[0] == "127.0.0.1" and info.certificate is None
    assert echo.nodelay == [1]
    assert f"MQTT tcp listener on tcp://127.0.0.1:{ports['tcp']}" in caplog.text


async def test_port_zero_is_off_and_names_must_be_unique(caplog):
    caplog.set_level(logging.INFO, logger="mqgate.gateway")
    specs = [ListenerSpec(transport="tcp", port=0), spec("ws")]
    async with serving(specs, Echo()) as ports:
        assert set(ports) == {"ws"}
    assert "MQTT tcp listener off" in caplog.text
    with pytest.raises(ConfigError, match="unique"):
        await serve_listeners([spec("tcp"), spec("tcp")], Echo())
    two = [spec("tcp"), spec("tcp", name="tcp2")]
    async with serving(two, Echo()) as ports:
        assert set(ports) == {"tcp", "tcp2"} and ports["tcp"] != ports["tcp2"]


async def test_port_in_use_fails_at_start():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            await serve_listeners([ListenerSpec(transport="tcp", port=port)], Echo())


async def test_failing_handler_does_not_stop_the_listener():
    stats = ListenerStats()

    async def handler(stream, info):
        if await stream.receive_some() == b"boom":
            raise RuntimeError("handler bug")
        await stream.send_all(b"fine")

    async with serving([spec("tcp")], handler, stats=stats) as ports:
        with trio.fail_after(5):
            bad = await trio.open_tcp_stream("127.0.0.1", ports["tcp"])
            await bad.send_all(b"boom")
            assert await closed_by_server(bad)
            good = await trio.open_tcp_stream("127.0.0.1", ports["tcp"])
            await good.send_all(b"hi")
            assert await receive_exactly(good, 4) == b"fine"
    assert stats.handler_errors == 1 and stats.accepted == 2


# --- TLS ------------------------------------------------------------------------

async def tls_echo(port, ctx, payload=b"\xc0\x00"):
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    client = trio.SSLStream(tcp, ctx, server_hostname="localhost")
    await client.send_all(payload)
    got = await receive_exactly(client, len(payload))
    await client.aclose()
    return got


async def test_tls_echo_with_and_without_client_certificate(certs):
    echo = Echo()
    async with serving([spec("tls", tls=server_tls(certs))], echo) as ports:
        with trio.fail_after(5):
            assert await tls_echo(ports["tls"], client_context(certs, cert=None)) == b"\xc0\x00"
            assert await tls_echo(ports["tls"], client_context(certs)) == b"\xc0\x00"
    anonymous, known = echo.infos
    assert anonymous.transport == "tls" and anonymous.certificate is None
    assert known.certificate == CertIdentity(common_name="dev1", subject="CN=dev1,O=Acme\\, Inc.,C=DE")
    assert echo.nodelay == [1, 1]


async def test_tls_required_certificate_missing_or_untrusted_is_refused(certs):
    echo = Echo()
    stats = ListenerStats()
    tls = server_tls(certs, require_certificate=True)
    async with serving([spec("tls", tls=tls)], echo, stats=stats) as ports:
        with trio.fail_after(5):
            for ctx in (client_context(certs, cert=None), client_context(certs, cert="rogue")):
                tcp = await trio.open_tcp_stream("127.0.0.1", ports["tls"])
                client = trio.SSLStream(tcp, ctx, server_hostname="localhost")
                try:
                    # TLS 1.3: the client finishes first and hears the alert on its next read
                    await client.send_all(b"\xc0\x00")
                    assert await closed_by_server(client)
                except trio.BrokenResourceError:
                    pass
            assert await tls_echo(ports["tls"], client_context(certs)) == b"\xc0\x00"
    assert [i.certificate.common_name for i in echo.infos] == ["dev1"]
    assert stats.handshake_failures == 2


def test_tls_config_errors(certs, tmp_path):
    with pytest.raises(ConfigError, match="caFile"):
        TlsConfig(certfile=str(certs / "server.crt"), require_certificate=True)
    with pytest.raises(ConfigError, match="cannot be loaded"):
        TlsConfig(certfile=str(tmp_path / "missing.crt")).server_context()
    with pytest.raises(ConfigError, match="TlsConfig"):
        ListenerSpec(transport="tls", port=8883)


async def test_stalled_handshakes_time_out_without_blocking_others(certs, autojump_clock):
    stats = ListenerStats()
    echo = Echo()
    specs = [spec("tls", tls=server_tls(certs), handshake_timeout=10), spec("ws", handshake_timeout=10)]
    async with serving(specs, echo, stats=stats) as ports:
        stalled_tls = await trio.open_tcp_stream("127.0.0.1", ports["tls"])
        stalled_ws = await trio.open_tcp_stream("127.0.0.1", ports["ws"])
        await stalled_ws.send_all(b"GET /mqtt HTTP/1.1\r\nHost: x\r\n")  # and then nothing
        start = trio.current_time()
        assert await tls_echo(ports["tls"], client_context(certs)) == b"\xc0\x00"
        ws = await WsClient.connect(ports["ws"])
        await ws.send(b"\xe0\x00")
        assert await ws.read(2) == b"\xe0\x00"
        assert trio.current_time() - start < 10
        assert await closed_by_server(stalled_tls)
        assert await closed_by_server(stalled_ws)
        assert trio.current_time() - start >= 10
    assert stats.handshake_failures == 2
    assert [i.transport for i in echo.infos] == ["tls", "ws"]


# --- WebSocket ------------------------------------------------------------------

async def test_websocket_subprotocol_and_frames_split_and_merged():
    echo = Echo()
    async with serving([spec("ws")], echo) as ports:
        with trio.fail_after(5):
            connect = b"\x10\x10\x00\x04MQTT\x04\x02\x00\x3c\x00\x04dev1"
            ws = await WsClient.connect(ports["ws"], subprotocols=("foo", "mqtt"))
            assert ws.answer.subprotocol == "mqtt"
            # one packet over three frames (a fragmented message and a second message)
            await ws.send(connect[:3], finished=False)
            await ws.send(connect[3:9])
            await ws.send(connect[9:])
            assert await ws.read(len(connect)) == connect
            # three packets in one frame
            three = b"\xc0\x00" * 3
            await ws.send(three)
            assert await ws.read(6) == three
            # a ping is answered, a close is answered and the handler sees EOF
            await ws.stream.send_all(ws.ws.send(Ping(b"p")))
            assert (await ws.next_event(Pong)).payload == b"p"
            await ws.stream.send_all(ws.ws.send(CloseConnection(code=1000)))
            assert (await ws.next_event(CloseConnection)).code == 1000
            assert await closed_by_server(ws.stream)
    (info,) = echo.infos
    assert info.transport == "ws" and info.ws_subprotocol == "mqtt"


async def test_websocket_pipelined_frame_and_legacy_subprotocol():
    async with serving([spec("ws")], Echo()) as ports:
        with trio.fail_after(5):
            # the first frame rides in the same TCP write as the upgrade request
            ws = await WsClient.connect(ports["ws"], subprotocols=("mqttv3.1",), path="/mqtt?x=1",
                                        first=client_frame(b"\xc0\x00\xc0"))
            assert ws.answer.subprotocol == "mqttv3.1"
            await ws.send(b"\x00")
            assert await ws.read(4) == b"\xc0\x00\xc0\x00"


@pytest.mark.parametrize("path, subprotocols, status", [
    ("/", ("mqtt",), 404), ("/mqtt/x", ("mqtt",), 404), ("/mqtt", (), 400), ("/mqtt", ("wamp",), 400),
])
async def test_websocket_wrong_path_or_subprotocol_refused(path, subprotocols, status):
    echo = Echo()
    stats = ListenerStats()
    async with serving([spec("ws")], echo, stats=stats) as ports:
        with trio.fail_after(5):
            ws = await WsClient.connect(ports["ws"], path=path, subprotocols=subprotocols)
            assert isinstance(ws.answer, RejectConnection) and ws.answer.status_code == status
            body = await ws.next_event(RejectData)
            assert body.data
    assert echo.infos == [] and stats.handshake_failures == 1


async def test_plain_http_request_is_refused():
    stats = ListenerStats()
    async with serving([spec("ws")], Echo(), stats=stats) as ports:
        with trio.fail_after(5):
            client = await trio.open_tcp_stream("127.0.0.1", ports["ws"])
            await client.send_all(b"GET /mqtt HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = await receive_exactly(client, 12)
            assert answer.startswith(b"HTTP/1.1 4")
    assert stats.handshake_failures == 1


@pytest.mark.parametrize("garbage", [
    b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00\r\n\r\n",  # MQTT on the WebSocket port
    b"GET /mqtt HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n",  # header block too big
    b"GET /mqtt HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n",  # no Connection: Upgrade
])
async def test_garbage_on_the_websocket_port_gets_an_http_error(garbage):
    stats = ListenerStats()
    echo = Echo()
    async with serving([spec("ws")], echo, stats=stats) as ports:
        with trio.fail_after(5):
            client = await trio.open_tcp_stream("127.0.0.1", ports["ws"])
            await client.send_all(garbage)
            try:
                answer = await receive_exactly(client, 100000)  # up to the close
                assert answer.startswith(b"HTTP/1.1 4"), answer
            except trio.BrokenResourceError:
                # closing with unread input resets the connection, which may
                # overtake our answer; only the oversized request leaves input
                assert len(garbage) > 16384
            ws = await WsClient.connect(ports["ws"])  # the listener still serves
            await ws.send(b"\xc0\x00")
            assert await ws.read(2) == b"\xc0\x00"
    assert stats.handshake_failures == 1 and len(echo.infos) == 1


async def test_websocket_text_frame_breaks_the_connection():
    seen = []

    async def handler(stream, info):
        try:
            await stream.receive_some()
        except trio.BrokenResourceError as e:
            seen.append(str(e))

    async with serving([spec("ws")], handler) as ports:
        with trio.fail_after(5):
            ws = await WsClient.connect(ports["ws"])
            await ws.stream.send_all(ws.ws.send(TextMessage(data="hello")))
            assert (await ws.next_event(CloseConnection)).code == 1003
    assert seen and "text frame" in seen[0]


async def test_wss_echo_with_certificate(certs):
    echo = Echo()
    async with serving([spec("wss", tls=server_tls(certs))], echo) as ports:
        with trio.fail_after(5):
            ws = await WsClient.connect(ports["wss"], tls=client_context(certs))
            await ws.send(b"\xc0\x00")
            assert await ws.read(2) == b"\xc0\x00"
    (info,) = echo.infos
    assert info.transport == "wss" and info.certificate.common_name == "dev1"
    assert info.ws_subprotocol == "mqtt"


# --- connection limit -------------------------------------------------------------

async def test_connection_limit_refuses_extra_sockets(caplog):
    stats = ListenerStats()
    release = {}

    async def handler(stream, info):
        release[info.connection_id] = done = trio.Event()
        await stream.send_all(b"hi")
        await done.wait()

    specs = [spec("tcp"), spec("ws")]
    async with serving(specs, handler, max_connections=2, stats=stats) as ports:
        with trio.fail_after(5):
            a = await trio.open_tcp_stream("127.0.0.1", ports["tcp"])
            assert await receive_exactly(a, 2) == b"hi"
            b = await WsClient.connect(ports["ws"])
            assert await b.read(2) == b"hi"
            assert stats.active == 2
            # over the limit, on either listener: closed at once
            c = await trio.open_tcp_stream("127.0.0.1", ports["tcp"])
            assert await closed_by_server(c)
            d = await trio.open_tcp_stream("127.0.0.1", ports["ws"])
            assert await closed_by_server(d)
            assert stats.refused == 2
            # one leaves, one more fits
            release.pop(min(release)).set()
            assert await closed_by_server(a)
            await trio.testing.wait_all_tasks_blocked()
            assert stats.active == 1
            e = await trio.open_tcp_stream("127.0.0.1", ports["tcp"])
            assert await receive_exactly(e, 2) == b"hi"
            assert stats.active == 2 and stats.refused == 2 and stats.accepted == 5
            for done in release.values():
                done.set()
    assert "maxConnections (2) reached" in caplog.text


async def test_a_burst_in_the_listen_backlog_is_taken_at_once_within_the_limit():
    """Sockets already waiting in the listen backlog (connected while the
    listener could not run: no trio step between the connects) are all
    accepted in one go, ACCEPT_BATCH at a time; over maxConnections the rest
    are closed and counted, as one by one."""
    stats = ListenerStats()
    served = []

    async def handler(stream, info):
        served.append(info.connection_id)
        await stream.send_all(b"hi")
        await trio.sleep_forever()

    limit, n = ACCEPT_BATCH + 2, ACCEPT_BATCH + 6
    async with serving([spec("tcp")], handler, max_connections=limit, stats=stats) as ports:
        socks = [socket.create_connection(("127.0.0.1", ports["tcp"]), timeout=5) for _ in range(n)]
        try:
            with trio.fail_after(10):
                while stats.accepted < n or len(served) < limit:
                    await trio.sleep(0.01)
            assert stats.refused == n - limit and stats.active == limit
            assert len(set(served)) == limit
            answers = [await trio.to_thread.run_sync(s.recv, 2) for s in socks]
            assert answers.count(b"hi") == limit and answers.count(b"") == n - limit
        finally:
            for s in socks:
                s.close()


async def test_a_plain_starter_runs_as_the_connection_task_and_leaves_itself():
    """``plain``: a plain TCP connection's task is the starter's coroutine
    itself (it closes the stream and calls ``leave``); a starter that fails
    is counted as a handler error and the listener goes on."""
    stats = ListenerStats()
    tasks = []

    async def served(stream, info, leave):
        try:
            tasks.append(trio.lowlevel.current_task())
            await stream.send_all(b"hi %d" % info.local_port)
        finally:
            stream.socket.close()
            leave()

    def plain(stream, info, leave):
        if len(tasks) == 1 and stats.handler_errors == 0:
            raise RuntimeError("starter bug")
        return served(stream, info, leave)

    async with serving([spec("tcp")], Echo(), plain=plain, stats=stats) as ports:
        port = ports["tcp"]
        hello = b"hi %d" % port
        with trio.fail_after(10):
            first = await trio.open_tcp_stream("127.0.0.1", port)
            assert await receive_exactly(first, len(hello)) == hello
            broken = await trio.open_tcp_stream("127.0.0.1", port)
            assert await closed_by_server(broken)
            last = await trio.open_tcp_stream("127.0.0.1", port)
            assert await receive_exactly(last, len(hello)) == hello
            while stats.active:
                await trio.sleep(0.01)
    assert stats.accepted == 3 and stats.handler_errors == 1
    assert [t.coro.cr_code.co_name for t in tasks] == ["served", "served"]


async def test_connection_rate_leaves_the_rest_in_the_backlog(autojump_clock):
    """maxConnectionRate 4: a burst of 4 is accepted at once, then 4 a second;
    the others wait unaccepted (their TCP connect has succeeded: the kernel's
    backlog holds them). Virtual time: the waits cost no real time."""
    stats = ListenerStats()
    times = []

    async def handler(stream, info):
        times.append(trio.current_time())
        await stream.send_all(b"hi")

    async with serving([spec("tcp")], handler, max_connection_rate=4, stats=stats) as ports:
        t0 = trio.current_time()
        clients = [await trio.open_tcp_stream("127.0.0.1", ports["tcp"]) for _ in range(12)]
        with trio.fail_after(30):
            for c in clients:
                assert await receive_exactly(c, 2) == b"hi"
    assert stats.accepted == 12 and stats.refused == 0
    waited = sorted(t - t0 for t in times)
    assert waited[3] < 0.1  # the burst
    for k in range(4, 12):  # then one every 1/4 s at the earliest
        assert waited[k] >= (k - 3) / 4 - 1e-6, waited


# --- configuration ----------------------------------------------------------------

def test_listener_specs_from_dict(certs):
    specs = listener_specs_from_dict({})
    assert [(s.transport, s.port, s.host) for s in specs] == [("tcp", 1883, "127.0.0.1"),
                                                             ("ws", 8083, "127.0.0.1")]
    table = {"port": 0, "wsPort": 9001, "tlsPort": 8883, "wssPort": 0, "wsPath": "/ws",
             "certFile": str(certs / "server.crt"), "keyFile": str(certs / "server.key"),
             "caFile": str(certs / "ca.crt"), "requireCertificate": True, "handshakeTimeout": 3,
             "maxConnections": 10}
    specs = listener_specs_from_dict(table, host="0.0.0.0", ws_port=9002)
    assert [(s.transport, s.port) for s in specs] == [("tls", 8883), ("ws", 9002)]
    tls, ws = specs
    assert tls.tls.require_certificate and tls.handshake_timeout == 3.0 and ws.ws_path == "/ws"
    assert all(s.host == "0.0.0.0" for s in specs)
    with pytest.raises(ConfigError, match="tlsPort"):
        listener_specs_from_dict({"tlsPort": "8883"})
    with pytest.raises(ConfigError, match="requireCertificate"):
        listener_specs_from_dict({"certFile": "x", "requireCertificate": 1})
    with pytest.raises(ConfigError, match="wsPath"):
        listener_specs_from_dict({"wsPath": "mqtt"})
    with pytest.raises(ConfigError, match="port"):
        listener_specs_from_dict({"port": 70000})
