"""A real MQTT client (paho-mqtt) through every listener.

There is no MQTT server here yet, so the handler answers CONNECT with a bare
CONNACK by hand: what is tested is the transport (TCP, TLS with a client
certificate, WebSocket framing and subprotocol, WSS) as paho sees it.
"""

import functools
import ssl

import paho.mqtt.client as mqtt
import pytest
import trio

from gateway.listeners import ListenerSpec, serve_listeners

from .test_transport import certs, server_tls  # noqa: F401  (session fixture)


async def read_packet(stream, buffer):
    """One MQTT packet (type byte, remaining length, body) from the stream."""
    while True:
        if len(buffer) >= 2:
            length, shift, i = 0, 0, 1
            while i < len(buffer) and i < 5:
                length |= (buffer[i] & 0x7F) << shift
                shift += 7
                i += 1
                if not buffer[i - 1] & 0x80:
                    if len(buffer) >= i + length:
                        packet = bytes(buffer[:i + length])
                        del buffer[:i + length]
                        return packet
                    break
        data = await stream.receive_some()
        if not data:
            return b""
        buffer += data


class FakeBroker:
    def __init__(self):
        self.seen = []

    async def __call__(self, stream, info):
        buffer = bytearray()
        connect = await read_packet(stream, buffer)
        assert connect[0] == 0x10
        self.seen.append((info, connect))
        await stream.send_all(b"\x20\x02\x00\x00")  # CONNACK, accepted
        while packet := await read_packet(stream, buffer):
            if packet[0] == 0xE0:  # DISCONNECT
                return


def paho_connect(port, transport, tls_files):
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="paho-1",
                         transport="websockets" if transport in ("ws", "wss") else "tcp",
                         protocol=mqtt.MQTTv311)
    if transport in ("ws", "wss"):
        client.ws_set_options(path="/mqtt")
    if tls_files:
        ca, cert, key = tls_files
        client.tls_set(ca_certs=ca, certfile=cert, keyfile=key, cert_reqs=ssl.CERT_REQUIRED)
    codes = []
    client.on_connect = lambda c, userdata, flags, rc, props: codes.append(rc)
    client.connect("127.0.0.1" if not tls_files else "localhost", port, keepalive=30)
    for _ in range(50):
        client.loop(timeout=0.1)
        if codes:
            break
    client.disconnect()
    client.loop(timeout=0.1)
    return [str(rc) for rc in codes]


@pytest.mark.parametrize("transport", ["tcp", "tls", "ws", "wss"])
async def test_paho_connects_through_every_listener(transport, certs):  # noqa: F811
    broker = FakeBroker()
    tls = server_tls(certs) if transport in ("tls", "wss") else None
    files = (str(certs / "ca.crt"), str(certs / "client.crt"), str(certs / "client.key")) if tls else None
    specs = [ListenerSpec(transport=transport, ephemeral=True, tls=tls)]
    async with trio.open_nursery() as nursery:
        ports = await nursery.start(functools.partial(serve_listeners, specs, broker))
        with trio.fail_after(10):
            codes = await trio.to_thread.run_sync(paho_connect, ports[transport], transport, files)
        nursery.cancel_scope.cancel()
    assert codes == ["Success"]
    ((info, connect),) = broker.seen
    assert info.transport == transport and b"paho-1" in connect
    if tls:
        assert info.certificate.common_name == "dev1"
    if transport in ("ws", "wss"):
        assert info.ws_subprotocol == "mqtt"
