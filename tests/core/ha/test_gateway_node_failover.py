"""A gateway node (`mqgate gateway`) follows its broker group's failover
(issue 20): a SYNC_MASTER and its slave (`mqgate broker`, failover through
etcd), one gateway node in front. A device's persistent session gets every
QoS 1 message acknowledged before the master is SIGKILLed, and messages
published after the promotion, through the same node."""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as paho
import trio

from ha_group import is_master, is_master_with_slave, wait_until
from serve_process import ServeProcess, free_port

V2 = paho.CallbackAPIVersion.VERSION2


def _client(port: int, cid: str, *, clean: bool) -> paho.Client:
    c = paho.Client(client_id=cid, clean_session=clean, protocol=paho.MQTTv311, callback_api_version=V2)
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def subscribe(port: int) -> None:
    c = _client(port, "fo-sub", clean=False)
    done = threading.Event()
    c.on_subscribe = lambda *a: done.set()
    c.subscribe("fo/#", qos=1)
    assert done.wait(10)
    c.disconnect()
    c.loop_stop()


def publish(port: int, first: int, n: int, timeout: float) -> set[int]:
    """QoS 1 publishes, one at a time; the ones acknowledged (a 3.1.1 client is
    closed when the broker is away: it reconnects and goes on until ``timeout``)."""
    acked: set[int] = set()
    deadline = time.monotonic() + timeout
    i = first
    while i < first + n and time.monotonic() < deadline:
        c = _client(port, "fo-pub", clean=True)
        while i < first + n and time.monotonic() < deadline:
            info = c.publish(f"fo/{i}", b"%d" % i, qos=1)
            try:
                info.wait_for_publish(2)
            except (RuntimeError, ValueError):
                break
            if not info.is_published():
                break
            acked.add(i)
            i += 1
        c.disconnect()
        c.loop_stop()
    return acked


def resume(port: int, want: set[int], timeout: float) -> set[int]:
    got: set[int] = set()
    c = paho.Client(client_id="fo-sub", clean_session=False, protocol=paho.MQTTv311, callback_api_version=V2)
    c.on_message = lambda c, u, m: got.add(int(m.payload))
    c.connect("127.0.0.1", port)
    c.loop_start()
    deadline = time.monotonic() + timeout
    while not got >= want and time.monotonic() < deadline:
        time.sleep(0.05)
    c.disconnect()
    c.loop_stop()
    return got


async def test_a_gateway_node_follows_the_failover_of_its_broker_group(etcd_group, etcd, tmp_path):
    group = etcd_group
    for label, bid in (("n0", 0), ("n1", 1)):
        # promoted as ASYNC_MASTER: alone, a SYNC_MASTER answers SLAVE_NOT_AVAILABLE (docs/HA.md),
        # which the gateway takes as not stored
        proc = group.broker(label, bid, "SYNC_MASTER" if bid == 0 else "SLAVE",
                            etcdEndpoints=etcd.endpoint, haLeaseTtlMs=3000, haPromoteRole="ASYNC_MASTER")
        await trio.to_thread.run_sync(proc.start)
    await wait_until(lambda: is_master_with_slave(group, "n0"), 30, "n0 leads with n1 in sync")
    node = ServeProcess(tmp_path / "gw", "--namesrv", group.namesrv, "--mqtt-port", str(free_port()),
                        "--ws-port", "0", role="gateway")
    await trio.to_thread.run_sync(node.start)
    try:
        port = node.ports["mqtt-tcp"]
        await trio.to_thread.run_sync(subscribe, port)
        acked = await trio.to_thread.run_sync(publish, port, 0, 50, 30)
        assert acked == set(range(50))
        group.brokers["n0"].proc.kill()
        await wait_until(lambda: is_master(group, "n1"), 20, "n1 is elected")
        acked |= await trio.to_thread.run_sync(publish, port, 50, 20, 30)
        assert acked >= set(range(50, 70))  # the node sends to the promoted master
        got = await trio.to_thread.run_sync(resume, port, acked, 20)
        assert got >= acked, sorted(acked - got)
    finally:
        node.kill()
