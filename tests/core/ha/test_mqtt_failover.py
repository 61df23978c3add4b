"""The MQTT gateway follows its broker's role (`mqgate serve` nodes of one
group, failover through etcd): a slave node has no MQTT listener; when the
master node is SIGKILLed, the promoted node's gateway restores persistent
sessions from the replicated records, and a paho-mqtt device reconnecting
there with its session receives every QoS 1 message acknowledged to the
publisher (on a SYNC_MASTER, PUBACK only after a slave holds the message).
The master compacts its meta records first (issue 17: small thresholds,
retained topics set again and again): the promoted node restores the same
state from the replicated snapshot and checkpoint, retained messages included."""

from __future__ import annotations

import socket
import threading
import time

import paho.mqtt.client as paho
import trio

from ha_group import is_master, is_master_with_slave, wait_until
from serve_process import free_port

V2 = paho.CallbackAPIVersion.VERSION2


def refuses(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def subscribe_persistent(port: int) -> None:
    c = paho.Client(client_id="dev-sub", clean_session=False, protocol=paho.MQTTv311, callback_api_version=V2)
    c.connect("127.0.0.1", port)
    c.loop_start()
    done = threading.Event()
    c.on_subscribe = lambda *a: done.set()
    c.subscribe("fleet/#", qos=1)
    assert done.wait(5)
    c.disconnect()
    c.loop_stop()


def publish(port: int, n: int) -> int:
    """QoS 1 publishes; how many were acknowledged (PUBACK)."""
    c = paho.Client(client_id="dev-pub", protocol=paho.MQTTv311, callback_api_version=V2)
    c.connect("127.0.0.1", port)
    c.loop_start()
    infos = [c.publish(f"fleet/t{i % 5}", b"m%d" % i, qos=1) for i in range(n)]
    for info in infos:
        info.wait_for_publish(10)
    acked = sum(1 for info in infos if info.is_published())
    c.disconnect()
    c.loop_stop()
    return acked


def churn_retained(port: int, topics: int, rounds: int) -> None:
    """Meta-record history: each retained topic set ``rounds`` times (QoS 1, acknowledged)."""
    c = paho.Client(client_id="dev-ret", protocol=paho.MQTTv311, callback_api_version=V2)
    c.connect("127.0.0.1", port)
    c.loop_start()
    infos = [c.publish(f"state/{t}", b"r%d" % r, qos=1, retain=True) for r in range(rounds) for t in range(topics)]
    for info in infos:
        info.wait_for_publish(10)
    assert all(info.is_published() for info in infos)
    c.disconnect()
    c.loop_stop()


def retained(port: int, want: int) -> dict[str, bytes]:
    got: dict[str, bytes] = {}
    c = paho.Client(client_id="dev-check", protocol=paho.MQTTv311, callback_api_version=V2)
    c.on_message = lambda c, u, m: got.__setitem__(m.topic, m.payload)
    c.connect("127.0.0.1", port)
    c.loop_start()
    c.subscribe("state/#", qos=0)
    deadline = time.time() + 10
    while len(got) < want and time.time() < deadline:
        time.sleep(0.05)
    c.disconnect()
    c.loop_stop()
    return got


def resume(port: int, want: int) -> list[bytes]:
    got: list[bytes] = []
    c = paho.Client(client_id="dev-sub", clean_session=False, protocol=paho.MQTTv311, callback_api_version=V2)
    c.on_message = lambda c, u, m: got.append(m.payload)
    c.connect("127.0.0.1", port)
    c.loop_start()
    deadline = time.time() + 15
    while len(set(got)) < want and time.time() < deadline:
        time.sleep(0.05)
    c.disconnect()
    c.loop_stop()
    return got


async def test_a_device_resumes_its_session_on_the_promoted_node(etcd_group, etcd):
    group = etcd_group
    mqtt = {"n0": free_port(), "n1": free_port()}
    for label, bid in (("n0", 0), ("n1", 1)):
        proc = group.broker(label, bid, "SYNC_MASTER" if bid == 0 else "SLAVE", serve=True, mqtt_port=mqtt[label],
                            etcdEndpoints=etcd.endpoint, haLeaseTtlMs=3000,
                            mqtt={"metaCompactionMinRecords": 40, "metaCompactionRatio": 1.5})
        await trio.to_thread.run_sync(proc.start)
    await wait_until(lambda: is_master_with_slave(group, "n0"), 30, "n0 leads with n1 in sync")
    assert refuses(mqtt["n1"])  # a slave node takes no MQTT connections
    await trio.to_thread.run_sync(subscribe_persistent, mqtt["n0"])
    acked = await trio.to_thread.run_sync(publish, mqtt["n0"], 200)
    assert acked == 200
    await trio.to_thread.run_sync(churn_retained, mqtt["n0"], 30, 4)
    n0 = group.brokers["n0"]
    await wait_until(lambda: _said(n0, "compacted gateway meta records"), 20, "n0 compacts its meta records")
    group.brokers["n0"].proc.kill()
    killed = time.monotonic()
    await wait_until(lambda: is_master(group, "n1"), 20, "n1 is elected")
    await wait_until(lambda: _accepts(mqtt["n1"]), 20, "n1 listens for MQTT")
    print(f"MQTT served by n1 {time.monotonic() - killed:.2f} s after the kill")
    got = await trio.to_thread.run_sync(resume, mqtt["n1"], 200)
    missing = {b"m%d" % i for i in range(200)} - set(got)
    assert not missing, (f"{len(missing)} of 200 acknowledged messages missing on the promoted node; its log:\n"
                         f"{group.brokers['n1'].output()[-6000:]}")
    state = await trio.to_thread.run_sync(retained, mqtt["n1"], 30)
    assert state == {f"state/{t}": b"r3" for t in range(30)}
    print([line for line in group.brokers["n1"].output().splitlines() if "gateway state restored" in line])


async def _said(proc, text: str) -> bool:
    await trio.lowlevel.checkpoint()
    return text in proc.output()



async def _accepts(port: int) -> bool:
    return not refuses(port)
