"""Compaction of the meta records on gateway nodes (``gateway.node_meta_log``, issue 20).

Real processes: ``mqgate serve`` with its MQTT edge off (name server and
broker), two ``mqgate gateway`` nodes with small compaction thresholds and
one-record snapshot batches (so a snapshot takes long enough for a change
to land in the middle of it), a third node started after the compaction
(never compacting, and started again until it is not the leader), a fourth
started after a half-written snapshot, and paho-mqtt clients. The tests run
in order on one cluster: the last one kills the first two nodes.

Each rule of ``gateway.node_meta_log`` fails a test when removed: without
the as-of rule the late node has the retained value from before the change
made during the snapshot; without the tails skipping snapshot records a
connected client of the other node is kicked.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.gateway.test_gateway_nodes import WAIT, Mqtt
from serve_process import ServeProcess, free_port

N_RET = 100  # retained topics: live keys of the snapshot; cmp/ret/99 is the last one written by it
RACE = f"cmp/ret/{N_RET - 1}"
CONFIG = "[mqtt]\nmetaCompactionMinRecords = 150\nmetaCompactionRatio = 2.0\nmetaCompactionBatch = 1\n"


def start_node(cl, name, config="node.toml"):
    root = cl.root
    return ServeProcess(root / name, "--namesrv", cl.namesrv, "--mqtt-port", str(free_port()), "--ws-port", "0",
                        "--http-port", "0", "--config", str(root / config), role="gateway").start()


def wait_for(what, deadline_s=WAIT):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.005)
    return what()


class State:
    """What the tests share: the processes, the clients that stay, what the retained topics hold."""


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    root = tmp_path_factory.mktemp("nodecompact")
    broker = ServeProcess(root / "broker", "--mqtt-port", "0", "--ws-port", "0", "--namesrv-port", str(free_port()),
                          "--broker-port", str(free_port())).start()
    (root / "node.toml").write_text(CONFIG)
    (root / "late.toml").write_text("[mqtt]\nmetaCompactionMinRecords = 100000\n")  # nodes that never compact
    s = State()
    s.root, s.procs, s.clients = root, [broker], []
    s.namesrv = f"127.0.0.1:{broker.ports['namesrv']}"
    try:
        s.a = start_node(s, "node-a")
        s.procs.append(s.a)
        s.b = start_node(s, "node-b")
        s.procs.append(s.b)
        yield s
    finally:
        for c in s.clients:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - its node may be killed already
                pass
        for p in reversed(s.procs):
            p.kill()


def node_id(proc):
    return re.search(r"gateway node (gw[0-9a-f]+)", proc.output()).group(1)


def port(node):
    return node.ports["mqtt-tcp"]


def test_leader_compacts_while_both_nodes_change_and_connected_clients_stay(cl):
    a, b = port(cl.a), port(cl.b)
    dev = Mqtt(a, "cmp-dev", clean=False)
    dev.subscribe("cmp/dev/#", 1)
    dev.close()
    cl.stay_a = Mqtt(a, "cmp-stay-a", clean=False)
    cl.stay_a.subscribe("cmp/stay", 1)
    cl.stay_b = Mqtt(b, "cmp-stay-b")
    cl.stay_b.subscribe("cmp/stay", 1)
    # a client with a will on each node: the node that is killed last has its will published by a late node
    cl.wills = {n: Mqtt(p, f"cmp-will-{n}", will=(f"cmp/will/{n}", b"gone-" + n.encode(), 0))
                for n, p in (("a", a), ("b", b))}
    cl.clients += [cl.stay_a, cl.stay_b, *cl.wills.values()]
    pub_a, pub_b = Mqtt(a, "cmp-pub-a"), Mqtt(b, "cmp-pub-b")
    cl.clients += [pub_a, pub_b]
    cl.retained = {}
    for i in range(N_RET):  # RACE is the image's last key: its snapshot record is written last
        (pub_a, pub_b)[i % 2].publish(f"cmp/ret/{i}", b"v0-%d" % i, retain=True)
        cl.retained[f"cmp/ret/{i}"] = b"v0-%d" % i

    def compacting():
        for node, other in ((cl.a, pub_b), (cl.b, pub_a)):
            if "compacting gateway meta records" in node.output():
                return node, other
        return None

    started = None
    for i in range(600):  # changes on both nodes until the leader starts a snapshot
        topic = f"cmp/ret/{i % 50}"
        (pub_a, pub_b)[i % 2].publish(topic, b"u%d" % i, retain=True)
        cl.retained[topic] = b"u%d" % i
        started = compacting()
        if started:
            break
    assert started, "no compaction started"
    leader, other = started
    cl.leader, cl.pub_other = leader, other
    other.publish(RACE, b"new", retain=True)  # on the other node, while the leader writes its snapshot
    cl.retained[RACE] = b"new"
    m = wait_for(lambda: re.search(r"compacted gateway meta records: (\d+) live as of offset (\d+)", leader.output()))
    assert m, leader.output()[-3000:]
    cl.checkpoint = int(m.group(2))
    assert int(m.group(1)) >= N_RET
    for i in range(5):  # offline messages of cmp-dev, after the snapshot
        pub_a.publish(f"cmp/dev/{i}", b"%d" % i)
    pub_b.publish("cmp/stay", b"still here")
    for c in (cl.stay_a, cl.stay_b):  # rule 3: the snapshot's "sess"/"live" records kicked nobody
        assert [p for _t, p, *_ in c.receive(1)] == [b"still here"]
        assert c.disconnects.empty()
        assert c.messages.empty()


def test_late_node_replays_from_the_checkpoint_and_has_the_newest_state(cl):
    # The late node must not be the leader (the smallest node id, random at each
    # start): the next test needs the first two nodes' leader to compact again.
    for attempt in range(20):
        cl.c = start_node(cl, f"node-c{attempt}", "late.toml")
        cl.procs.append(cl.c)
        if node_id(cl.c) > min(node_id(cl.a), node_id(cl.b)):
            break
        cl.c.kill()
    m = re.search(r"from the checkpoint at offset (\d+): (\d+) records read in [\d.]+ s, (\d+) snapshot records older",
                  cl.c.output())
    assert m, cl.c.output()[-3000:]
    start, read, stale = map(int, m.groups())
    assert start == cl.checkpoint
    assert read < start  # far fewer than the history
    c = port(cl.c)
    sub = Mqtt(c, "cmp-late-sub")
    cl.clients.append(sub)
    sub.subscribe("cmp/ret/#", 1)
    got = {t: p for t, p, _q, retain in sub.receive(N_RET) if retain}
    # The change made during the snapshot is newer than the snapshot's record of
    # its key; a replay where the last record wins would have brought back the old value.
    assert got[RACE] == b"new"
    assert got == cl.retained
    assert stale >= 1, "the change did not land inside the snapshot"
    dev = Mqtt(c, "cmp-dev", clean=False)
    cl.clients.append(dev)
    assert dev.session_present
    assert sorted(p for _t, p, *_ in dev.receive(5)) == [b"%d" % i for i in range(5)]


def test_half_written_snapshot_is_harmless_and_wills_fire_from_the_late_nodes(cl):
    """The leader is killed while it writes its second snapshot (no marker, the
    checkpoint stays), the other first node with it: the late nodes, which
    never compact here, publish the wills of both nodes' clients (records of
    the first snapshot), and a node started now reads the half snapshot and
    still has the newest state."""
    will_sub = Mqtt(port(cl.c), "cmp-will-sub")
    cl.clients.append(will_sub)
    will_sub.subscribe("cmp/will/#", 1)
    pub, leader = cl.pub_other, cl.leader
    survivor = cl.a if leader is cl.b else cl.b
    for i in range(600):
        topic = f"cmp/ret/{i % 50}"
        pub.publish(topic, b"w%d" % i, retain=True)
        cl.retained[topic] = b"w%d" % i
        if leader.output().count("compacting gateway meta records") == 2:
            break
    leader.kill()
    survivor.kill()  # before it sees the leader gone (and compacts in its place)
    out = leader.output()
    second = [int(x) for x in re.findall(r"compacting gateway meta records as of offset (\d+)", out)]
    assert len(second) == 2 and second[1] > cl.checkpoint
    assert out.count("compacted gateway meta records") == 1, "killed too late: the snapshot was complete"
    got = will_sub.receive(2, timeout=30)
    assert sorted((t, p) for t, p, *_ in got) == [("cmp/will/a", b"gone-a"), ("cmp/will/b", b"gone-b")]
    for proc in (cl.a, cl.b):
        assert f"will published for dead gateway node {node_id(proc)}" in cl.c.output()
    late_pub = Mqtt(port(cl.c), "cmp-late-pub")
    cl.clients.append(late_pub)
    late_pub.publish(RACE, b"after", retain=True)  # after the half-written snapshot
    cl.retained[RACE] = b"after"
    cl.d = start_node(cl, "node-d", "late.toml")
    cl.procs.append(cl.d)
    m = re.search(r"from the checkpoint at offset (\d+)", cl.d.output())
    assert m and int(m.group(1)) == cl.checkpoint, cl.d.output()[-3000:]  # the half snapshot did not move it
    sub = Mqtt(port(cl.d), "cmp-late-sub-d")
    cl.clients.append(sub)
    sub.subscribe("cmp/ret/#", 1)
    got = {t: p for t, p, _q, retain in sub.receive(N_RET) if retain}
    assert got == cl.retained
