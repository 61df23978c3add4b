"""Message trace end to end, against a real ``mqgate serve`` process: our traced producer and
consumer, paho-mqtt subscribers and publisher, then ``mqgate admin trace`` (a real subprocess)
prints each message's path: produced, delivered over MQTT, retried, dead-lettered."""

import json
import queue
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import paho.mqtt.client as paho
import pytest
import trio

from core.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, open_producer, open_push_consumer
from core.client.pull_consumer import open_pull_consumer
from core.trace import TRACE_TOPIC
from serve_process import ServeProcess, free_port

sys.path.insert(0, str(Path(__file__).parents[1] / "core" / "trace"))
import reference_layout as ref  # noqa: E402

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
TRACE = {"enable_msg_trace": True, "trace_flush_interval": 0.05}


@pytest.fixture
def server(tmp_path):
    cfg = tmp_path / "mqgate.toml"
    cfg.write_text(textwrap.dedent("""\
        [broker]
        traceTopicEnable = true
        [mqtt]
        sysInterval = 0
        traceMqttTopics = ["devices/#"]
        maxQueuedMessages = 1
        queueOverflow = "dropNew"
    """))
    with ServeProcess(tmp_path / "data", "--config", str(cfg), "--mqtt-port", str(free_port()), "--ws-port", "0",
                      "--namesrv-port", str(free_port()), "--broker-port", str(free_port())) as proc:
        proc.namesrv = f"127.0.0.1:{proc.ports['namesrv']}"
        yield proc
        assert "Traceback" not in proc.output(), proc.output()


def subscriber(port: int, client_id: str, *, clean: bool, got: queue.Queue | None = None) -> paho.Client:
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean)
    if got is not None:
        c.on_message = lambda _c, _u, m: got.put((client_id, m.topic, m.payload))
    subscribed = queue.Queue()
    c.on_subscribe = lambda *a: subscribed.put(True)
    c.connect("127.0.0.1", port, keepalive=30)
    c.loop_start()
    c.subscribe("devices/#", qos=1)
    subscribed.get(timeout=10)
    return c


def admin(server, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", "admin", "--namesrv", server.namesrv, *args],
                          capture_output=True, text=True, timeout=60)


def admin_until(server, args, wanted, timeout=20.0) -> str:
    """The admin output once it contains every string of ``wanted`` (records arrive in batches)."""
    deadline = time.monotonic() + timeout
    while True:
        r = admin(server, *args)
        if r.returncode == 0 and all(w in r.stdout for w in wanted):
            return r.stdout
        if time.monotonic() > deadline:
            raise AssertionError(f"admin {args} never printed {wanted}:\n{r.stdout}\n{r.stderr}")
        time.sleep(0.3)


async def test_admin_trace_shows_produce_mqtt_delivery_retry_and_dead_letter(server):
    port = server.ports["mqtt-tcp"]
    got = queue.Queue()
    live = subscriber(port, "app-live", clean=True, got=got)          # in-memory deliveries
    queued = subscriber(port, "app-queued", clean=False, got=got)     # session-queue deliveries
    attempts = []

    def failing(msgs, ctx):
        attempts.append((msgs[0].msg_id, msgs[0].reconsume_times))
        ctx.delay_level_when_next_consume = 1  # 1 s, then the DLQ (max_reconsume_times=1)
        return ConsumeConcurrentlyStatus.RECONSUME_LATER

    try:
        async with open_push_consumer(server.namesrv, "CG-e2e", {"devices": "*"}, failing, consume_from=FIRST,
                                      max_reconsume_times=1, **TRACE):
            async with open_producer(server.namesrv, "PG-e2e", **TRACE) as producer:
                sent = await producer.send(Message("devices", b"native hello", tags="TagA", keys=["order-42"]))
            with trio.fail_after(30):
                while sum(1 for a in attempts if a[0] == sent.msg_id) < 2:
                    await trio.sleep(0.1)
            await trio.sleep(0.5)  # the second failure's send-back moves it to the DLQ
        deliveries = {got.get(timeout=10)[0], got.get(timeout=10)[0]}
        assert deliveries == {"app-live", "app-queued"}
    finally:
        for c in (live, queued):
            c.disconnect()
            c.loop_stop()

    wanted = ["produced", "PG-e2e", "delivered over MQTT", "to app-live QoS 1", "to app-queued QoS 1",
              "consumed", "retried", "CG-e2e", "dead-lettered", "%DLQ%CG-e2e"]
    text = admin_until(server, ["trace", sent.msg_id], wanted)
    assert f"message {sent.msg_id}" in text and "acked" in text and "stored in devices" in text
    lines = text.splitlines()
    order = [next(i for i, l in enumerate(lines) if step in l) for step in ("produced", "consumed", "retried",
                                                                             "dead-lettered")]
    assert order == sorted(order), text  # the path is told in time order
    result = json.loads(admin(server, "--json", "trace", "--key", "order-42", "--topic", "devices").stdout)
    (m,) = result["messages"]
    assert m["msgId"] == sent.msg_id and m["consumerGroups"] == ["CG-e2e"]
    assert m["mqttClients"] == ["app-live", "app-queued"]
    assert [d["topic"] for d in m["deadLettered"]] == ["%DLQ%CG-e2e"]
    steps = {(s["step"], s.get("retryTimes")): s for s in m["steps"]}
    assert steps[("consumed", 0)]["status"] == "FAILED" and steps[("retried", 1)]["status"] == "FAILED"
    assert steps[("produced", None)]["storeHost"] == f"127.0.0.1:{server.ports['broker']}"


async def test_gateway_records_of_mqtt_publishes_and_deliveries_follow_the_reference_layout(server):
    port = server.ports["mqtt-tcp"]
    got = queue.Queue()
    live = subscriber(port, "sub-live", clean=True, got=got)
    offline = subscriber(port, "sub-offline", clean=False)
    offline.disconnect()
    offline.loop_stop()
    pub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="dev-7")
    pub.connect("127.0.0.1", port)
    pub.loop_start()
    try:
        pub.publish("devices/d7/telemetry", b'{"t": 1}', qos=1).wait_for_publish(10)
        pub.publish("devices/d7/telemetry", b'{"t": 2}', qos=1).wait_for_publish(10)  # sub-offline's queue is full
        pub.publish("other/untraced", b"x", qos=1).wait_for_publish(10)
        assert got.get(timeout=10)[2] == b'{"t": 1}' and got.get(timeout=10)[2] == b'{"t": 2}'
    finally:
        for c in (pub, live):
            c.disconnect()
            c.loop_stop()
    records = []
    async with open_pull_consumer(server.namesrv, "trace-reader", {TRACE_TOPIC: "*"}, consume_from=FIRST) as reader:
        with trio.fail_after(20):
            while sum(1 for r in records if r["type"] == "SubAfter") < 3:
                for m in await reader.poll(timeout=0.5):
                    records.extend(ref.read(m.body.decode()))
    pubs = [r for r in records if r["type"] == "Pub"]
    assert len(pubs) == 2 and {p["groupName"] for p in pubs} == {"%MQTT%dev-7"}   # not other/untraced
    assert all(p["topic"] == "devices" and p["clientHost"] == "dev-7" and p["success"] for p in pubs)
    assert all(p["storeHost"] == f"127.0.0.1:{server.ports['broker']}" and len(p["offsetMsgId"]) == 32 for p in pubs)
    afters = {(r["groupName"], r["msgId"]): r for r in records if r["type"] == "SubAfter"}
    first, second = (p["msgId"] for p in sorted(pubs, key=lambda p: p["timeStamp"]))
    assert afters[("%MQTT%sub-live", first)]["success"] and afters[("%MQTT%sub-live", second)]["contextCode"] == 0
    dropped = afters[("%MQTT%sub-offline", second)]
    assert (dropped["success"], dropped["contextCode"]) == (False, 4)   # dropped by the queue limit: FAILED
    assert ("%MQTT%sub-offline", first) not in afters                   # queued, never delivered (offline)
    # the extension fields after the reference ones: the gateway's own reader sees the outcome
    raw = admin(server, "--json", "trace", second)
    steps = json.loads(raw.stdout)["messages"][0]["steps"]
    assert {(s["client"], s["status"]) for s in steps if s["step"] == "delivered over MQTT"} == {
        ("sub-live", "acked"), ("sub-offline", "dropped")}


async def test_an_expired_message_is_traced_as_expired_when_its_subscriber_comes_back(server):
    from paho.mqtt.properties import Properties
    from paho.mqtt.packettypes import PacketTypes

    port = server.ports["mqtt-tcp"]

    def v5(client_id):
        c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 300
        c.connect("127.0.0.1", port, clean_start=False, properties=props)
        c.loop_start()
        return c

    sub = v5("late-sub")
    done = queue.Queue()
    sub.on_subscribe = lambda *a: done.put(True)
    sub.subscribe("devices/#", qos=1)
    done.get(timeout=10)
    sub.disconnect()
    sub.loop_stop()
    pub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="dev-exp", protocol=paho.MQTTv5)
    pub.connect("127.0.0.1", port)
    pub.loop_start()
    props = Properties(PacketTypes.PUBLISH)
    props.MessageExpiryInterval = 1
    pub.publish("devices/d9/state", b"soon stale", qos=1, properties=props).wait_for_publish(10)
    pub.disconnect()
    pub.loop_stop()
    time.sleep(2.2)  # the message expires while its subscriber is away
    got = queue.Queue()
    sub = v5("late-sub")
    sub.on_message = lambda _c, _u, m: got.put(m.payload)
    try:
        msg_id = None
        async with open_pull_consumer(server.namesrv, "expiry-reader", {TRACE_TOPIC: "*"}, consume_from=FIRST) as rd:
            with trio.fail_after(20):
                while msg_id is None:
                    for m in await rd.poll(timeout=0.5):
                        msg_id = next((r["msgId"] for r in ref.read(m.body.decode()) if r["type"] == "Pub"), msg_id)
        text = admin_until(server, ["trace", msg_id], ["to late-sub QoS 1: expired"])
        assert "published over MQTT" in text and "MQTT devices/d9/state QoS 1" in text
        assert got.empty()  # never delivered
    finally:
        sub.disconnect()
        sub.loop_stop()


def test_trace_settings_refuse_bad_values_with_one_line():
    from gateway.config import ConfigError
    from gateway.settings import GatewaySettings

    with pytest.raises(ConfigError, match=r"^\[mqtt\] traceMqttTopics must be a list"):
        GatewaySettings.from_dict({"traceMqttTopics": "sensors/#"})
    with pytest.raises(ConfigError, match=r"^\[mqtt\] traceMqttTopics: 'a/#/b' is not a topic filter"):
        GatewaySettings.from_dict({"traceMqttTopics": ["a/#/b"]})
    with pytest.raises(ConfigError, match=r"^\[mqtt\] traceTopicName must be a topic name"):
        GatewaySettings.from_dict({"traceTopicName": "no spaces please"})
    assert GatewaySettings.from_dict({"traceMqttTopics": ["sensors/#"]}).trace.mqtt_topics == ("sensors/#",)
    assert GatewaySettings.from_dict({}).trace.mqtt_topics == ()
