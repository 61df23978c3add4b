"""A native batch from the C++ client reaches MQTT subscribers like single sends do.

One ``mqgate serve`` subprocess (name server, broker and MQTT listener on
free ports). The PyPI `rocketmq` client (C++ 1.2.x; ``Producer.send_batch``,
flagged ``batch="1"``) sends one batch to a broker topic ``t``: items with an
``mqttTopic`` property go to that MQTT topic, an item without one to the
topic's own name. paho-mqtt subscribers to ``t/#`` see every item:
a QoS 0 and a QoS 1 subscriber that are connected (delivered from memory,
the stored hooks), and a persistent session (clean session off) that is
offline during the send and gets them when it reconnects (its session
queue, filled by the put hooks).
"""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as paho
import pytest
from rocketmq.client import Message, Producer, SendStatus
from serve_process import ServeProcess, free_port

TIMEOUT = 20.0  # bound on every wait for a peer; never an assertion about speed


class Subscriber:
    """A paho client in its own network thread that records (topic, payload, qos)."""

    def __init__(self, port: int, client_id: str, *, clean_session: bool = True):
        self.got: list[tuple[str, bytes, int]] = []
        self._lock = threading.Lock()
        self._subacked = threading.Event()
        self._connected = threading.Event()
        self.session_present: bool | None = None
        c = self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                                      clean_session=clean_session, protocol=paho.MQTTv311)
        c.on_connect = self._on_connect
        c.on_subscribe = lambda *_a: self._subacked.set()
        c.on_message = self._on_message
        c.connect("127.0.0.1", port, keepalive=30)
        c.loop_start()
        assert self._connected.wait(TIMEOUT), f"{client_id} got no CONNACK"

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        self.session_present = flags.session_present
        self._connected.set()

    def _on_message(self, client, userdata, msg) -> None:
        with self._lock:
            self.got.append((msg.topic, msg.payload, msg.qos))

    def subscribe(self, topic_filter: str, qos: int) -> None:
        self.client.subscribe(topic_filter, qos)
        assert self._subacked.wait(TIMEOUT), "no SUBACK"

    def wait_for(self, n: int) -> list[tuple[str, bytes, int]]:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.got) >= n:
                    break
            time.sleep(0.05)
        with self._lock:
            return sorted(self.got)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(the ``mqgate serve`` process, its MQTT port); a port flag of 0 turns that listener off."""
    port = free_port()
    data = tmp_path_factory.mktemp("cpp-batch") / "d"
    with ServeProcess(data, "--mqtt-port", str(port), "--ws-port", "0", "--namesrv-port", str(free_port()),
                      "--broker-port", str(free_port())) as srv:
        yield srv, port


def _send_batch(srv: ServeProcess, topic: str, n: int) -> list[tuple[str, bytes]]:
    """One C++ batch of ``n`` items to broker topic ``topic``; the (MQTT topic, payload) pairs
    a subscriber to ``topic/#`` must get, sorted. Item 0 has no ``mqttTopic``: it is on the MQTT
    topic named like its broker topic."""
    batch = []
    for i in range(n):
        m = Message(topic)
        m.set_body(f"item {i}")
        if i:
            m.set_property("mqttTopic", f"{topic}/dev/{i}")
        batch.append(m)
    producer = Producer(f"{topic}-pg")
    producer.set_namesrv_addr(f"127.0.0.1:{srv.ports['namesrv']}")
    producer.start()
    try:
        assert producer.send_batch(batch).status == SendStatus.OK
    finally:
        producer.shutdown()
    return sorted([(topic, b"item 0")] + [(f"{topic}/dev/{i}", f"item {i}".encode()) for i in range(1, n)])


def test_a_cpp_batch_reaches_connected_qos0_and_qos1_subscribers(server):
    srv, port = server
    qos0 = Subscriber(port, "batch-qos0")
    qos1 = Subscriber(port, "batch-qos1")
    try:
        qos0.subscribe("live/#", 0)
        qos1.subscribe("live/#", 1)
        expected = _send_batch(srv, "live", 8)
        assert [(t, p) for t, p, _q in qos0.wait_for(8)] == expected
        assert {q for *_tp, q in qos0.got} == {0}
        assert [(t, p) for t, p, _q in qos1.wait_for(8)] == expected
        assert {q for *_tp, q in qos1.got} == {1}  # native messages are QoS 1 unless mqttQos says otherwise
    finally:
        qos0.close()
        qos1.close()


def test_a_cpp_batch_waits_in_an_offline_persistent_session(server):
    srv, port = server
    offline = Subscriber(port, "batch-offline", clean_session=False)
    offline.subscribe("offline/#", 1)
    offline.close()
    expected = _send_batch(srv, "offline", 8)
    back = Subscriber(port, "batch-offline", clean_session=False)
    try:
        assert back.session_present
        assert back.wait_for(8) == [(t, p, 1) for t, p in expected]
    finally:
        back.close()
