"""MQTT and RocketMQ 5.x (gRPC) on one broker: an MQTT publish reaches a 5.x
SimpleConsumer, a 5.x send reaches an MQTT subscriber (paho). Real
`mqgate serve`, real clients, each in its own process or thread."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from serve_process import ServeProcess, free_port

DRIVER = Path(__file__).with_name("rmq5_client.py")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    grpc_port, mqtt_port = free_port(), free_port()
    with ServeProcess(tmp_path_factory.mktemp("rmq5mqtt") / "data", "--namesrv-port", "0", "--broker-port", "0",
                      "--mqtt-port", str(mqtt_port), "--ws-port", "0", "--grpc-port", str(grpc_port)) as s:
        yield s


def drive(server, *args: str) -> dict:
    r = subprocess.run([sys.executable, str(DRIVER), f"127.0.0.1:{server.ports['grpc']}", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{args} failed:\n{r.stderr[-3000:]}\nserver log:\n{server.output()[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def paho_client(server, name: str) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name)
    c.connect("127.0.0.1", server.ports["mqtt-tcp"])
    c.loop_start()
    return c


def test_an_mqtt_publish_is_received_by_a_5x_simple_consumer(server):
    level = f"plant{uuid.uuid4().hex[:6]}"
    c = paho_client(server, "pub-" + level)
    try:
        info = c.publish(f"{level}/line1/temp", b"21.5", qos=1)
        info.wait_for_publish(10)
        assert info.is_published()
    finally:
        c.loop_stop()
        c.disconnect()
    (m,) = drive(server, "receive", level, f"g_{level}", "1")["got"]
    assert m["body"] == "21.5" and m["properties"]["mqttTopic"] == f"{level}/line1/temp"


def test_a_5x_send_reaches_an_mqtt_subscriber_on_its_mqtt_topic(server):
    level = f"plant{uuid.uuid4().hex[:6]}"
    got: queue.Queue = queue.Queue()
    c = paho_client(server, "sub-" + level)
    c.on_message = lambda client, userdata, msg: got.put((msg.topic, msg.payload))
    try:
        subscribed = queue.Queue()
        c.on_subscribe = lambda *a: subscribed.put(True)
        c.subscribe(f"{level}/#", qos=1)
        subscribed.get(timeout=10)
        drive(server, "send", level, "from 5.x", json.dumps({"mqttTopic": f"{level}/line2/cmd"}))
        drive(server, "send", level, "plain")
        assert got.get(timeout=10) == (f"{level}/line2/cmd", b"from 5.x")
        assert got.get(timeout=10) == (level, b"plain")
    finally:
        c.loop_stop()
        c.disconnect()
