"""The unmodified PyPI ``rocketmq-python-client`` (5.x) against a cluster of real
processes: a name server, broker group g1 (master and slave) and broker group
g2 (a master), each master with its own gRPC port (issue 19).

The client is pointed at g2's gRPC endpoint only. Its routes name every
group's master (`core.proxy.routing`), so it sends to and receives from both;
after g1's master is killed and its slave promoted (`mqgate admin ha
promote`), the same client, still pointed at g2, reaches g1's new master on
its own gRPC port at its next route refresh (the Python client refreshes
10 s after start, then every 30 s), and a LiteSimpleConsumer of g2's
endpoint gets the lite messages the producer spreads over both groups
(g1's from its new master). The pop state follows too (snapshot
records, `core.proxy.pop_log`): a message in flight at the failover comes
back from the new master as its second delivery, acked ones never again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import trio

from core.client.api import open_client_api
from ha_group import Group, wait_in_sync, wait_until
from serve_process import free_port

DRIVER = Path(__file__).with_name("rmq5_client.py")


@pytest.fixture
def group(tmp_path):
    g = Group(tmp_path)
    g.start_namesrv()
    yield g
    g.stop_all()


async def _route_masters(namesrv: str, topic: str) -> dict[str, str | None]:
    async with open_client_api(3.0) as api:
        route = await api.get_route(namesrv, topic)
    return {b.broker_name: b.master_addr for b in route.broker_datas} if route else {}


async def _grpc_port(addr: str) -> int:
    try:
        async with open_client_api(3.0) as api:
            return int((await api.broker_runtime_info(addr)).get("grpcPort") or 0)
    except Exception:
        return 0


async def _line(proc: subprocess.Popen, seconds: float) -> dict:
    with trio.fail_after(seconds):
        line = await trio.to_thread.run_sync(proc.stdout.readline, abandon_on_cancel=True)
    assert line, f"the driver ended early:\n{proc.stderr.read()[-3000:]}"
    return json.loads(line)


async def test_a_5x_client_uses_every_broker_group_and_follows_a_failover(group):
    # pop state saved (popState.json and its snapshot record) every 0.5 s
    m1 = group.broker("m1", 0, "ASYNC_MASTER", grpc_port=free_port(), flushConsumerOffsetInterval=500)
    m2 = group.broker("m2", 0, "ASYNC_MASTER", brokerName="g2", grpc_port=free_port())
    async with trio.open_nursery() as starting:  # the masters side by side (each start waits for "ready")
        for proc in (m1, m2):
            starting.start_soon(trio.to_thread.run_sync, proc.start)
    # serves gRPC once promoted; ASYNC: a SYNC_MASTER without its slave refuses sends
    group.broker("s1", 1, "SLAVE", grpc_port=free_port(), haPromoteRole="ASYNC_MASTER").start()
    suffix = uuid.uuid4().hex[:8]
    topic, consumer_group = f"rmq5_cluster_{suffix}", f"rmq5_cluster_group_{suffix}"
    async with open_client_api() as api:
        for label in ("m1", "m2"):
            await api.create_topic(group.addr(label), topic, 2, 2)
    masters = await wait_until(lambda: _both_routed(group, topic), 20, "the name server routes both groups")
    assert masters == {"g1": group.addr("m1"), "g2": group.addr("m2")}
    old_port = await _grpc_port(group.addr("m1"))
    assert old_port and old_port != m2.ports["grpc"]

    proc = subprocess.Popen([sys.executable, str(DRIVER), f"127.0.0.1:{m2.ports['grpc']}", "cluster_failover",
                             topic, consumer_group, "g1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        one = await _line(proc, 60)
        # each group got some of the sends, and the consumer got them all from both
        assert set(one["sent"].values()) == {"g1", "g2"}, one
        assert sorted(one["got"]) == sorted([b, 1] for b in one["sent"])

        # the pop state with only "keep" in flight is saved, its record replicated to s1
        await wait_until(lambda: _in_flight(m1.data_dir, consumer_group, 1), 20, "m1 saves its pop state")
        await wait_in_sync(group.addr("m1"), group.addr("s1"))
        group.brokers["m1"].proc.send_signal(signal.SIGKILL)
        group.brokers["m1"].proc.wait()
        await wait_until(lambda: _no_master(group, topic), 20, "the name server drops g1's dead master")
        out = subprocess.run([sys.executable, "-m", "gateway", "admin", "--namesrv", group.namesrv,
                              "ha", "promote", "g1", "1"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        new_port = await wait_until(lambda: _grpc_port(group.addr("s1")), 20, "s1 serves gRPC as g1's master")
        await wait_until(lambda: _master_is(group, topic, group.addr("s1")), 20, "the name server routes s1")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        two = await _line(proc, 180)
    finally:
        proc.kill()
        proc.wait()
    assert new_port != old_port  # another endpoint: only the route could have told the client
    landed = [g for g in two["sent"].values() if g]
    assert "g1" in landed and "g2" in landed, two["sent"]
    got = {b for b, _ in two["got"]}
    assert {b for b, g in two["sent"].items() if g} <= got
    # the pop state followed to s1: "keep", out when g1 failed over, comes back as its
    # second delivery, and no message acked on m1 is delivered again
    assert [a for b, a in two["got"] if b == one["keep"]] == [2]
    assert not {b for b in got if b.startswith("one-")} - {one["keep"]}
    # lite messages in both groups, all received by a lite consumer of g2's endpoint (the light
    # queue of g1's new master read over remoting, core.proxy.remote), each once
    assert set(two["lite_sent"].values()) == {"g1", "g2"}, two
    assert sorted(two["lite_got"]) == sorted([b, 1] for b in two["lite_sent"])


async def _in_flight(data_dir, group_name: str, count: int) -> bool:
    path = Path(data_dir) / "config" / "popState.json"
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return sum(len(q["inflight"]) for q in obj["queues"] if q["group"] == group_name) == count


async def _both_routed(group: Group, topic: str):
    masters = await _route_masters(group.namesrv, topic)
    return masters if len(masters) == 2 and all(masters.values()) else None


async def _no_master(group: Group, topic: str) -> bool:
    return not (await _route_masters(group.namesrv, topic)).get("g1")


async def _master_is(group: Group, topic: str, addr: str) -> bool:
    return (await _route_masters(group.namesrv, topic)).get("g1") == addr
