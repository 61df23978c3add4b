"""Real clients against the gateway: paho-mqtt 2.x (3.1.1 and 5.0, in a worker
thread), Debian's mosquitto_pub/mosquitto_sub and amqtt's client (subprocesses)."""

from __future__ import annotations

import sys
import threading

import pytest
import trio

import paho.mqtt.client as paho


def _paho_roundtrip(port: int, protocol, n: int) -> list[tuple[str, bytes, int]]:
    """Subscribe, publish n QoS 1 messages and n QoS 2, return what came back."""
    got = []
    done = threading.Event()
    kw = {"protocol": protocol, "callback_api_version": paho.CallbackAPIVersion.VERSION2}
    sub = paho.Client(client_id=f"paho-sub-{protocol}", **kw)

    def on_message(c, u, msg):
        got.append((msg.topic, msg.payload, msg.qos))
        if len(got) == 2 * n:
            done.set()

    sub.on_message = on_message
    sub.connect("127.0.0.1", port)
    sub.loop_start()
    r = sub.subscribe("paho/#", qos=2)
    assert r[0] == 0
    pub = paho.Client(client_id=f"paho-pub-{protocol}", **kw)
    pub.connect("127.0.0.1", port)
    pub.loop_start()
    import time

    time.sleep(0.2)
    infos = [pub.publish(f"paho/{q}/{i}", b"%d" % i, qos=q) for q in (1, 2) for i in range(n)]
    for info in infos:
        info.wait_for_publish(5)
        assert info.is_published()
    done.wait(10)
    for c in (pub, sub):
        c.disconnect()
        c.loop_stop()
    return got


@pytest.mark.parametrize("version", ["MQTTv311", "MQTTv5"])
async def test_paho(gateway_factory, version):
    async with gateway_factory() as (broker, gw, port):
        got = await trio.to_thread.run_sync(_paho_roundtrip, port, getattr(paho, version), 10)
        assert sorted(got) == sorted([(f"paho/{q}/{i}", b"%d" % i, q) for q in (1, 2) for i in range(10)])


def _paho_persistent(port: int, phase: str) -> list[bytes]:
    got = []
    c = paho.Client(client_id="paho-persist", clean_session=False, protocol=paho.MQTTv311,
                    callback_api_version=paho.CallbackAPIVersion.VERSION2)
    c.on_message = lambda c, u, m: got.append(m.payload)
    c.connect("127.0.0.1", port)
    c.loop_start()
    import time

    if phase == "subscribe":
        c.subscribe("persist/#", qos=1)
        time.sleep(0.2)
    else:
        deadline = time.time() + 5
        while len(got) < 3 and time.time() < deadline:
            time.sleep(0.05)
    c.disconnect()
    c.loop_stop()
    return got


async def test_paho_persistent_session_survives_restart(gateway_factory, client_cls):
    from gateway.mqtt import PubAck

    async with gateway_factory() as (broker, gw, port):
        await trio.to_thread.run_sync(_paho_persistent, port, "subscribe")
        p, _ = await client_cls.connect(port, "p", version=4)
        for i in range(3):
            await p.publish("persist/x", b"%d" % i, qos=1)
            await p.expect(PubAck)
    async with gateway_factory() as (broker, gw, port):
        got = await trio.to_thread.run_sync(_paho_persistent, port, "receive")
        assert got == [b"0", b"1", b"2"]


@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
async def test_mosquitto_pub_sub(gateway_factory, version):
    async with gateway_factory() as (broker, gw, port):
        async with trio.open_nursery() as nursery:
            result = {}

            async def sub():
                result["sub"] = await trio.run_process(
                    ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-V", version, "-t", "mosq/#",
                     "-q", "1", "-C", "3", "-v", "-W", "10"], capture_stdout=True)

            nursery.start_soon(sub)
            while gw.stats.connected < 1:
                await trio.sleep(0.02)
            while len(gw.router.trie) < 1:
                await trio.sleep(0.02)
            for i in range(3):
                await trio.run_process(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-V", version,
                                        "-t", f"mosq/{i}", "-m", f"hello {i}", "-q", str(i % 3)])
        lines = result["sub"].stdout.decode().splitlines()
        assert sorted(lines) == [f"mosq/{i} hello {i}" for i in range(3)]  # separate publishers: any order


async def test_mosquitto_retained(gateway_factory):
    async with gateway_factory() as (broker, gw, port):
        await trio.run_process(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-t", "ret/a", "-m", "kept",
                                "-r", "-q", "1"])
        out = await trio.run_process(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-t", "ret/#",
                                      "-C", "1", "-v", "-W", "5"], capture_stdout=True)
        assert out.stdout.decode().strip() == "ret/a kept"


AMQTT_SCRIPT = r"""
import asyncio, sys
from amqtt.client import MQTTClient
from amqtt.mqtt.constants import QOS_1

async def main(port):
    sub = MQTTClient(client_id="amqtt-sub")
    await sub.connect(f"mqtt://127.0.0.1:{port}/")
    await sub.subscribe([("am/#", QOS_1)])
    pub = MQTTClient(client_id="amqtt-pub")
    await pub.connect(f"mqtt://127.0.0.1:{port}/")
    for i in range(3):
        await pub.publish(f"am/{i}", b"v%d" % i, qos=QOS_1)
    for i in range(3):
        msg = await asyncio.wait_for(sub.deliver_message(), 10)
        print(msg.publish_packet.variable_header.topic_name, msg.publish_packet.payload.data.decode())
    await pub.disconnect()
    await sub.disconnect()

asyncio.run(main(int(sys.argv[1])))
"""


async def test_amqtt_client(gateway_factory):
    async with gateway_factory() as (broker, gw, port):
        with trio.fail_after(30):
            out = await trio.run_process([sys.executable, "-c", AMQTT_SCRIPT, str(port)], capture_stdout=True,
                                         capture_stderr=True)
        assert out.stdout.decode().splitlines() == [f"am/{i} v{i}" for i in range(3)]
