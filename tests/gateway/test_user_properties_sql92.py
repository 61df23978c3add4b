"""MQTT 5 user properties reach native consumers as message properties, so an SQL92
consumer filters device telemetry by them (issue 14). A real `mqgate serve` with
`enablePropertyFilter`, paho-mqtt publishing, our pull consumer filtering; an MQTT 5
subscriber still gets every pair, repeats and order included."""

from __future__ import annotations

import queue
import time

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from serve_process import ServeProcess, free_port

from core.client import ConsumeFromWhere, MessageSelector
from core.client.blocking import PullConsumer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("userprops")
    cfg = d / "mqgate.toml"
    cfg.write_text("[broker]\nenablePropertyFilter = true\n[mqtt]\nsysInterval = 0\n")
    proc = ServeProcess(d / "data", "--config", str(cfg), "--mqtt-port", str(free_port()), "--ws-port", "0",
                        "--namesrv-port", str(free_port()), "--broker-port", str(free_port()))
    with proc:
        yield proc


def _client(port: int, cid: str) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=mqtt.MQTTv5)
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def _props(*pairs) -> Properties:
    p = Properties(PacketTypes.PUBLISH)
    p.UserProperty = list(pairs)
    return p


def test_an_sql92_consumer_filters_mqtt_telemetry_by_user_properties(server):
    port = server.ports["mqtt-tcp"]
    got: queue.Queue = queue.Queue()
    sub = _client(port, "watcher")
    sub.on_message = lambda _c, _u, m: got.put(m)
    sub.subscribe("plant/#", qos=1)
    time.sleep(0.3)
    pub = _client(port, "sensor-7")
    readings = [("31.5", "lab"), ("12.0", "lab"), ("40.0", "farm"), ("30.0", "lab")]
    for i, (temp, site) in enumerate(readings):
        pub.publish("plant/line1/temp", f"r{i}".encode(), qos=1,
                    properties=_props(("temp", temp), ("site", site), ("site", "ignored-repeat"),
                                      ("mqttExpiry", "1"), ("TAGS", "not-a-tag"))).wait_for_publish(10)
    pub.loop_stop()
    pub.disconnect()

    consumer = PullConsumer(f"127.0.0.1:{server.ports['namesrv']}", "G-hot-lab",
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe("plant", MessageSelector.by_sql("temp >= 30.0 AND site = 'lab'")).start()
    try:
        hot = []
        deadline = time.monotonic() + 15
        while len(hot) < 2 and time.monotonic() < deadline:
            hot.extend(consumer.poll(1.0))
        assert sorted(m.body for m in hot) == [b"r0", b"r3"]
        assert consumer.poll(0.5) == []
        m = hot[0]
        assert m.properties["site"] == "lab"  # the first of a repeated name
        assert m.properties.get("mqttExpiry") is None and m.tags in (None, "")  # never ours or RocketMQ's
    finally:
        consumer.shutdown()

    # the MQTT 5 subscriber sees every pair, in order, repeats too; nothing expired
    first = got.get(timeout=10)
    assert first.properties.UserProperty == [("temp", "31.5"), ("site", "lab"), ("site", "ignored-repeat"),
                                             ("mqttExpiry", "1"), ("TAGS", "not-a-tag")]
    assert not hasattr(first.properties, "MessageExpiryInterval")
    sub.loop_stop()
    sub.disconnect()
