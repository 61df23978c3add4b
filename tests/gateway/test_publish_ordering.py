"""A SUBSCRIBE read in the same wake-up as another client's PUBLISH is in
force when that PUBLISH is routed, whatever the subscriber's transport
(gateway/connection.py, gateway/publishing.py).

A plain TCP read whose socket was the only one of its poll in the gateway's
epoll skips the ordering checkpoint before routing. A TLS reader may act on
its input one loop pass after its wake-up (a second TLS record of the same
TCP segment is decrypted in a step of its own), so while a TLS or WebSocket
connection is open the checkpoint is kept. Shown with a real TLS listener
(a certificate from Debian's openssl) and a TLS client built on ``ssl``'s
memory BIOs, which writes a SUBSCRIBE as two TLS records in one TCP write,
just before the plain client's PUBLISH; without the kept checkpoint the
PUBLISH overtook the SUBSCRIBE in about half of the rounds.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess

import trio

from core.broker import BrokerConfig, open_broker
from gateway.app import MQTTGateway
from gateway.listeners import ListenerSpec, TlsConfig
from gateway.mqtt import Connect, ConnAck, PubAck, Publish, SubAck, Subscribe, Subscription, encode
from gateway.settings import GatewaySettings

from .conftest import Client, small_store_config, subscribe_with_a_publish


class _TlsPipe:
    """A TLS client stream on ``ssl``'s memory BIOs over a trio socket: what
    goes out as one TLS record, and what goes out in one TCP write, is the
    test's choice (``records``)."""

    def __init__(self, stream: trio.SocketStream, ctx: ssl.SSLContext) -> None:
        self.stream = stream
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = ctx.wrap_bio(self._in, self._out, server_hostname="localhost")

    async def handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                data = await self.stream.receive_some(65536)
                assert data, "the server closed the connection during the handshake"
                self._in.write(data)
        await self._flush()

    async def _flush(self) -> None:
        data = self._out.read()
        if data:
            await self.stream.send_all(data)

    def records(self, *parts: bytes) -> bytes:
        """``parts`` as one TLS record each, ready for one TCP write."""
        for part in parts:
            self._tls.write(part)
        return self._out.read()

    async def send_all(self, data: bytes) -> None:
        self._tls.write(data)
        await self._flush()

    async def receive_some(self, max_bytes: int = 65536) -> bytes:
        while True:
            try:
                return self._tls.read(max_bytes)
            except ssl.SSLWantReadError:
                data = await self.stream.receive_some(65536)
                if not data:
                    return b""
                self._in.write(data)

    async def aclose(self) -> None:
        await self.stream.aclose()


async def test_a_tls_subscribe_read_with_a_plain_publish_takes_effect_first(tmp_path):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", "key.pem", "-out", "cert.pem", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], cwd=tmp_path, check=True, capture_output=True)
    tls = TlsConfig(certfile=str(tmp_path / "cert.pem"), keyfile=str(tmp_path / "key.pem"))
    cfg = BrokerConfig(default_topic_queue_nums=4, listen_port=0)
    async with open_broker(cfg, small_store_config(tmp_path / "store")) as broker:
        gw = MQTTGateway(broker, GatewaySettings.from_dict({"sysInterval": 0}))
        async with trio.open_nursery() as nursery:
            ports = await nursery.start(gw.run, [ListenerSpec(transport="tcp", ephemeral=True),
                                                 ListenerSpec(transport="tls", ephemeral=True, tls=tls)])
            pipe = _TlsPipe(await trio.open_tcp_stream("127.0.0.1", ports["tls"]),
                            ssl.create_default_context(cafile=str(tmp_path / "cert.pem")))
            await pipe.handshake()
            b = Client(pipe, 5)
            await b.send(Connect(protocol_version=5, client_id="tls-b", clean_start=True))
            assert isinstance(await b.recv(), ConnAck)
            a, _ = await Client.connect(ports["tcp"], "plain-a")
            overtaken = []
            fd = pipe.stream.socket.fileno()
            for i in range(1, 41):
                await trio.sleep(0.01)  # both readers parked, waiting for input
                # the SUBSCRIBE as two TLS records in one TCP write
                if not await subscribe_with_a_publish(b, lambda data: os.write(fd, pipe.records(data[:3], data[3:])),
                                                      a, i):
                    overtaken.append(i)
            assert overtaken == [], f"the PUBLISH overtook the earlier SUBSCRIBE in rounds {overtaken}"
            assert gw.unpolled_readers == 1  # the TLS connection; the plain one is past its CONNECT
            await b.close()
            await a.close()
            nursery.cancel_scope.cancel()


async def test_a_new_connections_subscribe_read_with_a_plain_publish_takes_effect_first(gateway_factory):
    """A new plain connection's first read is taken at once, in its task's
    first step, not after a wake-up from the gateway's epoll: a CONNECT and
    SUBSCRIBE sent together, accepted in the same loop pass as another
    client's PUBLISH is found alone, are in force when that PUBLISH is
    routed (the connection counts in ``unpolled_readers`` until its CONNECT
    is acted on). Without it the PUBLISH overtook the SUBSCRIBE in about
    half of the rounds."""
    async with gateway_factory() as (broker, gw, port):
        a, _ = await Client.connect(port, "plain-a")
        missed = []
        for i in range(1, 31):
            await trio.sleep(0.01)  # the publisher's reader parked, waiting for input
            # connected by the kernel (the listener's backlog), written, and the PUBLISH
            # after it, with no checkpoint between: one loop pass finds both
            x = socket.create_connection(("127.0.0.1", port))
            x.sendall(encode(Connect(protocol_version=5, client_id=f"new-{i}", clean_start=True), 5)
                      + encode(Subscribe(packet_id=1, subscriptions=[Subscription(topic_filter="race/t", qos=1)]), 5))
            os.write(a.stream.socket.fileno(), encode(Publish(topic="race/t", payload=b"%d" % i, qos=1,
                                                              packet_id=i), 5))
            b = Client(trio.SocketStream(trio.socket.from_stdlib_socket(x)), 5)
            assert isinstance(await b.recv(), ConnAck)
            await b.expect(SubAck)
            await a.expect(PubAck)
            await a.publish("race/t", b"after")
            if (await b.expect(Publish)).payload != b"%d" % i:
                missed.append(i)
            await b.close()
        assert missed == [], f"the PUBLISH overtook the new connection's SUBSCRIBE in rounds {missed}"
        assert gw.unpolled_readers == 0
        await a.close()
