"""MQTT gateway nodes (``mqgate gateway --namesrv``) in front of brokers (issue 20).

Real processes: one ``mqgate serve`` with its MQTT edge off (the name server
and broker group ``broker-a``, the nodes' home), a second broker group
(``mqgate broker``, ``broker-b``: MQTT topics are spread over both groups),
three gateway nodes, and paho-mqtt clients. One cluster for the module; the
SIGKILL test starts and kills a fourth node of its own; the last test kills
``broker-b``.
"""

from __future__ import annotations

import json
import re
import urllib.request
import queue
import signal
import subprocess
import sys
import threading
import time
import zlib

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes

from serve_process import ServeProcess, free_port

WAIT = 15.0


class Mqtt:
    """A paho client on a thread of its own, with waits that have deadlines."""

    def __init__(self, port: int, client_id: str, *, clean: bool = True, version: int = 5, expiry: int = 3600,
                 will: tuple | None = None) -> None:
        proto = paho.MQTTv5 if version == 5 else paho.MQTTv311
        kw = {} if version == 5 else {"clean_session": clean}
        self.c = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=proto, **kw)
        self.messages: queue.Queue = queue.Queue()
        self.disconnects: queue.Queue = queue.Queue()
        self.acks: queue.Queue = queue.Queue()
        self.flags: queue.Queue = queue.Queue()  # (topic, packet id, DUP) of each message, as they come
        self.c.on_message = lambda c, u, m: (self.messages.put((m.topic, m.payload, m.qos, m.retain)),
                                             self.flags.put((m.topic, m.mid, m.dup)))
        self.c.on_disconnect = lambda c, u, flags, rc, props: self.disconnects.put(rc)
        self.c.on_subscribe = lambda c, u, mid, rcs, props: self.acks.put(("sub", mid))
        if will is not None:
            wp = None
            if version == 5:
                wp = Properties(PacketTypes.WILLMESSAGE)
                wp.WillDelayInterval = will[2]
            self.c.will_set(will[0], will[1], qos=1, properties=wp)
        props = None
        if version == 5:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 0 if clean else expiry
        connected: queue.Queue = queue.Queue()
        self.c.on_connect = lambda c, u, flags, rc, p: connected.put((rc, flags.session_present))
        if version == 5:
            self.c.connect("127.0.0.1", port, clean_start=clean, properties=props)
        else:
            self.c.connect("127.0.0.1", port)
        self.c.loop_start()
        rc, self.session_present = connected.get(timeout=WAIT)
        assert rc == 0, rc

    def subscribe(self, flt: str, qos: int = 1) -> None:
        _rc, mid = self.c.subscribe(flt, qos)
        assert self.acks.get(timeout=WAIT) == ("sub", mid)

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> None:
        info = self.c.publish(topic, payload, qos=qos, retain=retain)
        info.wait_for_publish(WAIT)
        assert info.is_published()

    def receive(self, n: int, timeout: float = WAIT) -> list[tuple]:
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            try:
                out.append(self.messages.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                break
        return out

    def receive_payloads_until(self, wanted: set[int], timeout: float = WAIT) -> set[int]:
        """Integer payloads received until ``wanted`` are all in (or the deadline)."""
        got: set[int] = set()
        deadline = time.monotonic() + timeout
        while not got >= wanted:
            try:
                got.add(int(self.messages.get(timeout=max(0.01, deadline - time.monotonic()))[1]))
            except queue.Empty:
                break
        return got

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


class Cluster(tuple):
    """(name server, MQTT ports, temp root), and ``http``: the nodes' HTTP ports."""

    def __new__(cls, items, *, http, broker_b):
        self = super().__new__(cls, items)
        self.http = http
        self.broker_b = broker_b  # the second group's broker process (the last test kills it)
        return self


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("gwnodes")
    broker = ServeProcess(root / "broker", "--mqtt-port", "0", "--ws-port", "0", "--namesrv-port", str(free_port()),
                          "--broker-port", str(free_port())).start()
    namesrv = f"127.0.0.1:{broker.ports['namesrv']}"
    nodes = []
    # a second broker group on the same name server: sessions keep to the first (docs/CLUSTER.md)
    conf = root / "broker-b.toml"
    conf.write_text('[broker]\nbrokerName = "broker-b"\n')
    other = ServeProcess(root / "broker-b", "--namesrv", namesrv, "--broker-port", str(free_port()),
                         "--config", str(conf), role="broker")
    try:
        other.start()
        for i in range(3):
            nodes.append(ServeProcess(root / f"node{i}", "--namesrv", namesrv, "--mqtt-port", str(free_port()),
                                      "--ws-port", "0", "--http-port", str(free_port()), role="gateway").start())
        yield Cluster((namesrv, [n.ports["mqtt-tcp"] for n in nodes], root), http=[n.ports["http"] for n in nodes],
                      broker_b=other)
    finally:
        for n in nodes:
            n.kill()
        other.kill()
        broker.kill()


def stored_per_group(namesrv: str, topic: str) -> dict[str, int]:
    """Entries of a broker topic on each broker group (``mqgate admin topic status``)."""
    out = subprocess.run([sys.executable, "-m", "gateway", "admin", "topic", "status", topic, "--namesrv", namesrv,
                          "--json"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return {}
    per: dict[str, int] = {}
    for q in json.loads(out.stdout)["queues"]:
        per[q["brokerName"]] = per.get(q["brokerName"], 0) + q["maxOffset"] - q["minOffset"]
    return per


def stored_once(namesrv: str, topic: str, done) -> dict[str, int]:
    """``stored_per_group`` once ``done`` of it holds (a broker registers a new
    topic's route with the name server a moment after creating it), or at the deadline."""
    deadline = time.monotonic() + WAIT
    per = stored_per_group(namesrv, topic)
    while not done(per) and time.monotonic() < deadline:
        per = stored_per_group(namesrv, topic)
    return per


def group_of(mqtt_topic: str) -> str:
    """The broker group a node sends an MQTT topic to (gateway.remote_backend.group_for)."""
    return ("broker-a", "broker-b")[zlib.crc32(mqtt_topic.encode()) % 2]


def test_publish_on_one_node_reaches_wildcard_subscribers_on_the_others(cluster):
    _ns, (a, b, c), _ = cluster
    sub_b = Mqtt(b, "wild-b")
    sub_b.subscribe("wild/+/t", 1)
    sub_c = Mqtt(c, "wild-c", version=4)
    sub_c.subscribe("wild/#", 1)
    pub = Mqtt(a, "wild-pub")
    for i in range(50):
        pub.publish(f"wild/{i}/t", b"%d" % i, qos=1)
    pub.publish("wild/other", b"x", qos=1)
    got_b = sub_b.receive(50)
    got_c = sub_c.receive(51)
    assert sorted(int(p) for _t, p, _q, _r in got_b) == list(range(50))
    assert len(got_c) == 51 and {t for t, *_ in got_c} >= {"wild/other", "wild/0/t"}
    assert sub_b.receive(1, timeout=0.3) == []  # wild/other matched nothing of b's
    for m in (sub_b, sub_c, pub):
        m.close()


def test_persistent_session_resumes_on_another_node_with_its_offline_messages(cluster):
    _ns, (a, b, c), _ = cluster
    dev = Mqtt(a, "resume-dev", clean=False)
    dev.subscribe("resume/#", 1)
    dev.close()
    pub = Mqtt(c, "resume-pub")
    for i in range(40):
        pub.publish(f"resume/{i % 8}", b"%d" % i, qos=1)
    per = stored_once(_ns, "resume", lambda per: sum(per.values()) >= 40)
    assert per.get("broker-a", 0) > 0 and per.get("broker-b", 0) > 0, per  # offline messages on both groups
    dev = Mqtt(b, "resume-dev", clean=False)
    assert dev.session_present
    got = dev.receive(40)
    assert sorted(int(p) for _t, p, _q, _r in got) == list(range(40))
    for k in range(8):  # in order per topic
        assert [int(p) for t, p, _q, _r in got if t == f"resume/{k}"] == list(range(k, 40, 8))
    pub.publish("resume/live", b"live", qos=1)  # the subscription moved with the session
    assert dev.receive(1)[0][:2] == ("resume/live", b"live")
    dev.close()
    pub.close()


def test_retained_message_set_on_one_node_is_seen_from_another(cluster):
    _ns, (a, b, c), _ = cluster
    pub = Mqtt(a, "ret-pub")
    pub.publish("ret/x", b"kept", qos=1, retain=True)
    deadline = time.monotonic() + WAIT
    got = []
    while not got and time.monotonic() < deadline:  # the other node learns it from the meta tail
        sub = Mqtt(c, "ret-sub")
        sub.subscribe("ret/#", 1)
        got = sub.receive(1, timeout=0.5)
        sub.close()
    assert got and got[0][:2] == ("ret/x", b"kept") and got[0][3]
    pub.publish("ret/x", b"", qos=1, retain=True)  # cleared on b too
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        sub = Mqtt(b, "ret-sub2")
        sub.subscribe("ret/#", 1)
        got = sub.receive(1, timeout=0.5)
        sub.close()
        if not got:
            break
    assert got == []
    pub.close()


def test_client_id_connected_on_another_node_takes_the_session_over(cluster):
    _ns, (a, b, c), _ = cluster
    watcher = Mqtt(c, "take-watch")
    watcher.subscribe("take/will", 1)
    old = Mqtt(a, "take-dev", clean=False, will=("take/will", b"gone", 0))
    old.subscribe("take/t", 1)
    new = Mqtt(b, "take-dev", clean=False)
    assert new.session_present
    assert old.disconnects.get(timeout=WAIT) == 0x8E  # session taken over
    # A takeover with a will of no delay publishes it (as on one node).
    assert watcher.receive(1)[0][:2] == ("take/will", b"gone")
    pub = Mqtt(c, "take-pub")
    pub.publish("take/t", b"to-new", qos=1)
    assert new.receive(1)[0][:2] == ("take/t", b"to-new")
    assert old.receive(1, timeout=0.3) == []
    for m in (watcher, new, pub):
        m.close()
    old.c.loop_stop()


def test_sigkill_of_a_node_loses_nothing_acknowledged_and_sessions_resume_elsewhere(cluster):
    namesrv, (a, b, c), root = cluster
    doomed = ServeProcess(root / "doomed", "--namesrv", namesrv, "--mqtt-port", str(free_port()), "--ws-port", "0",
                          role="gateway").start()
    try:
        d = doomed.ports["mqtt-tcp"]
        watcher = Mqtt(c, "kill-watch")
        watcher.subscribe("kill-will/#", 1)
        dev = Mqtt(d, "kill-dev", clean=False, expiry=60, will=("kill-will/dev", b"dev lost", 1))
        # its session ends (1 s) before its will's delay (60 s): the will goes then
        short = Mqtt(d, "kill-short", clean=False, expiry=1, will=("kill-will/short", b"short lost", 60))
        sub = Mqtt(d, "kill-sub", clean=False)
        sub.subscribe("kill/#", 1)
        pub = Mqtt(d, "kill-pub", version=4)
        acked = []
        for i in range(30):
            pub.publish(f"kill/{i}", b"%d" % i, qos=1)
            acked.append(i)
        first = sub.receive(5)
        assert len(first) == 5
        started = time.monotonic()
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(10)
        pub.c.loop_stop()
        sub.c.loop_stop()
        dev.c.loop_stop()
        short.c.loop_stop()
        # the cluster publishes the will of a client of the dead node, after its delay
        wills = watcher.receive(2)
        assert sorted(w[:2] for w in wills) == [("kill-will/dev", b"dev lost"), ("kill-will/short", b"short lost")]
        assert time.monotonic() - started >= 0.9
        assert not Mqtt(a, "kill-short", clean=False, expiry=1).session_present  # it ended
        # what the old connection got (and acknowledged) before the kill
        before = {int(p) for _t, p, _q, _r in first} | sub.receive_payloads_until(set(acked), timeout=0)
        pub = Mqtt(a, "kill-pub", version=4)
        for i in range(30, 40):
            pub.publish(f"kill/{i}", b"%d" % i, qos=1)
            acked.append(i)
        sub = Mqtt(b, "kill-sub", clean=False)
        assert sub.session_present
        got = before | sub.receive_payloads_until(set(acked) - before)
        assert got >= set(acked), sorted(set(acked) - got)
        assert watcher.receive(1, timeout=0.5) == []  # once
        for m in (sub, pub, watcher):
            m.close()
    finally:
        doomed.kill()


def test_sigterm_drains_a_node_clients_are_sent_elsewhere_and_resume_there(cluster):
    namesrv, (a, b, c), root = cluster
    conf = root / "drain.toml"
    conf.write_text(f'[mqtt]\nserverReference = "127.0.0.1:{b}"\n')
    node = ServeProcess(root / "drained", "--namesrv", namesrv, "--mqtt-port", str(free_port()), "--ws-port", "0",
                        "--config", str(conf), role="gateway").start()
    try:
        port = node.ports["mqtt-tcp"]
        refs: queue.Queue = queue.Queue()
        dev = Mqtt(port, "drain-dev", clean=False)
        dev.c.on_disconnect = lambda c, u, flags, rc, props: refs.put((rc, getattr(props, "ServerReference", None)))
        dev.subscribe("drain/#", 1)
        assert node.stop(signal.SIGTERM) == 0
        assert refs.get(timeout=WAIT) == (0x9C, f"127.0.0.1:{b}")  # Use another server
        dev.c.loop_stop()
        pub = Mqtt(a, "drain-pub")
        pub.publish("drain/x", b"after", qos=1)
        dev = Mqtt(b, "drain-dev", clean=False)
        assert dev.session_present
        assert dev.receive(1)[0][:2] == ("drain/x", b"after")
        dev.close()
        pub.close()
    finally:
        node.kill()


def test_a_node_started_later_reaches_the_subscribers_of_the_others(cluster):
    """A node that starts after the others reads their sessions from the meta
    records before it knows which nodes are alive: that must not count them as
    dead (a will record of a live client's node once made it drop every clean
    session of the other nodes)."""
    namesrv, (a, b, _c), root = cluster
    clean = Mqtt(a, "late-clean", will=("late/will", b"gone", 3600))
    clean.subscribe("late/+", 1)
    kept = Mqtt(b, "late-kept", clean=False)
    kept.subscribe("late/#", 1)
    node = ServeProcess(root / "late", "--namesrv", namesrv, "--mqtt-port", str(free_port()), "--ws-port", "0",
                        role="gateway").start()
    try:
        pub = Mqtt(node.ports["mqtt-tcp"], "late-pub")
        for i in range(5):
            pub.publish(f"late/{i}", b"%d" % i, qos=1)
        assert sorted(int(p) for _t, p, _q, _r in clean.receive(5)) == list(range(5))
        assert sorted(int(p) for _t, p, _q, _r in kept.receive(5)) == list(range(5))
        pub.close()
    finally:
        node.kill()
        for m in (clean, kept):
            m.close()


def test_admin_cluster_status_lists_the_nodes_and_their_clients(cluster):
    namesrv, (a, b, c), _ = cluster
    held = [Mqtt(a, "status-1", clean=False), Mqtt(a, "status-2")]
    held[1].subscribe("status/#", 0)
    out = subprocess.run([sys.executable, "-m", "gateway", "admin", "cluster", "status", "--namesrv", namesrv, "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [b["brokerName"] for b in doc["brokers"]] == ["broker-a", "broker-b"]
    assert doc["brokers"][0]["gatewayNodes"] >= 3 and doc["brokers"][1]["gatewayNodes"] >= 3
    assert all(n["groups"] == ["broker-a", "broker-b"] and n["broker"] == "broker-a" for n in doc["nodes"]), doc
    counts = sorted(n["clients"] for n in doc["nodes"])
    assert len(counts) >= 3 and counts[-1] >= 2, doc
    for m in held:
        m.close()


def test_share_group_members_on_different_nodes_get_each_message_once(cluster):
    _ns, (a, b, c), _ = cluster
    members = [Mqtt(b, "share-1"), Mqtt(c, "share-2")]
    for m in members:
        m.subscribe("$share/g/share/#", 1)
    plain = Mqtt(b, "share-plain")
    plain.subscribe("share/#", 1)
    pub = Mqtt(a, "share-pub")
    # until both members' subscriptions are routed to from node a (the meta tail)
    deadline = time.monotonic() + WAIT
    while not all(m.messages.qsize() for m in members) and time.monotonic() < deadline:
        pub.publish("share/warmup", b"w", qos=1)
    for m in (*members, plain):
        m.receive(10_000, timeout=0.3)
    for i in range(40):
        pub.publish(f"share/{i}", b"%d" % i, qos=1)
    assert sorted(int(p) for _t, p, _q, _r in plain.receive(40)) == list(range(40))
    got: list[int] = []
    deadline = time.monotonic() + WAIT
    while len(got) < 40 and time.monotonic() < deadline:
        for m in members:
            got += [int(p) for _t, p, _q, _r in m.receive(40 - len(got), timeout=0.05)]
    assert sorted(got) == list(range(40))  # each once, over both members
    assert all(m.receive(1, timeout=0.2) == [] for m in members)
    for m in (*members, plain, pub):
        m.close()


def test_unacknowledged_qos1_messages_move_with_the_session_and_come_again_as_duplicates(cluster):
    _ns, (a, b, c), _ = cluster
    got: queue.Queue = queue.Queue()
    dev = paho.Client(CallbackAPIVersion.VERSION2, client_id="inflight-dev", protocol=paho.MQTTv311,
                      clean_session=False, manual_ack=True)
    dev.on_message = lambda c, u, m: got.put((m.topic, m.mid, m.dup))  # never acknowledged
    dev.connect("127.0.0.1", a)
    dev.loop_start()
    subscribed = threading.Event()
    dev.on_subscribe = lambda *args: subscribed.set()
    dev.subscribe("inflight/#", 1)
    assert subscribed.wait(WAIT)
    pub = Mqtt(c, "inflight-pub")
    for i in range(3):
        pub.publish(f"inflight/{i}", b"%d" % i, qos=1)
    first = [got.get(timeout=WAIT) for _ in range(3)]
    dev.disconnect()
    dev.loop_stop()
    again = Mqtt(b, "inflight-dev", clean=False, version=4)
    second = [again.flags.get(timeout=WAIT) for _ in range(3)]
    # the same three, with their packet ids, marked DUP
    assert second == [(t, mid, True) for t, mid, _dup in first]
    again.close()
    pub.close()


def test_a_node_serves_metrics_about_its_own_clients(cluster):
    _ns, (a, b, c), _ = cluster
    here = Mqtt(a, "metrics-here")
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.http[0]}/metrics", timeout=WAIT) as r:
        text = r.read().decode()
    online = float(re.search(r'mqgate_mqtt_sessions\{state="online"\} (\S+)', text).group(1))
    assert online >= 1.0
    here.close()


def test_publishes_on_many_topics_are_spread_over_both_groups_and_reach_subscribers_on_other_nodes(cluster):
    namesrv, (a, b, c), _ = cluster
    sub_b = Mqtt(b, "spread-b")
    sub_b.subscribe("spread/#", 1)
    sub_c = Mqtt(c, "spread-c", clean=False)
    sub_c.subscribe("spread/+", 1)
    pub = Mqtt(a, "spread-pub")
    deadline = time.monotonic() + WAIT
    while not (sub_b.messages.qsize() and sub_c.messages.qsize()) and time.monotonic() < deadline:
        pub.publish("spread/warm", b"w", qos=1)  # until node a routes to both (the meta tail)
    for m in (sub_b, sub_c):
        m.receive(10_000, timeout=0.3)
    before = stored_per_group(namesrv, "spread")
    for i in range(40):
        pub.publish(f"spread/{i}", b"%d" % i, qos=1)
    for m in (sub_b, sub_c):
        assert sorted(int(p) for _t, p, _q, _r in m.receive(40)) == list(range(40))
    after = stored_once(namesrv, "spread", lambda per: sum(per.values()) - sum(before.values()) >= 40)
    grew = {g: after.get(g, 0) - before.get(g, 0) for g in ("broker-a", "broker-b")}
    assert sum(grew.values()) == 40 and min(grew.values()) > 0, (before, after)
    for m in (sub_b, sub_c, pub):
        m.close()


def test_retained_messages_on_either_group_are_served_to_new_subscribers_on_any_node(cluster):
    namesrv, (a, b, c), _ = cluster
    pub = Mqtt(a, "ret2-pub")
    for k in range(8):
        pub.publish(f"ret2/{k}", b"kept%d" % k, qos=1, retain=True)
    per = stored_once(namesrv, "ret2", lambda per: sum(per.values()) >= 8)
    assert per.get("broker-a", 0) > 0 and per.get("broker-b", 0) > 0, per
    for port in (a, c):
        deadline = time.monotonic() + WAIT
        got = []
        while len(got) < 8 and time.monotonic() < deadline:  # another node learns them from the meta tail
            sub = Mqtt(port, "ret2-sub")
            sub.subscribe("ret2/#", 1)
            got = sub.receive(8, timeout=1.0)
            sub.close()
        assert sorted((t, p, r) for t, p, _q, r in got) == [(f"ret2/{k}", b"kept%d" % k, True) for k in range(8)]
    pub.close()


def test_a_group_without_master_stops_only_its_topics(cluster):  # the last test: it kills broker-b
    _ns, (a, b, c), _ = cluster
    topics = [f"down/{i}" for i in range(16)]
    on_a = [t for t in topics if group_of(t) == "broker-a"]
    on_b = [t for t in topics if group_of(t) == "broker-b"]
    assert on_a and on_b
    sub = Mqtt(b, "down-sub", clean=False)
    sub.subscribe("down/#", 1)
    pub = Mqtt(a, "down-pub")
    acks: queue.Queue = queue.Queue()
    pub.c.on_publish = lambda c, u, mid, rc, props: acks.put((mid, rc))
    deadline = time.monotonic() + WAIT
    while not sub.messages.qsize() and time.monotonic() < deadline:
        pub.publish(on_a[0], b"w", qos=1)  # until node a routes to the subscriber
    sub.receive(10_000, timeout=0.3)
    cluster.broker_b.kill()
    _rc, mid = pub.c.publish(on_b[0], b"refused", qos=1)
    while True:  # acks of the warm-up publishes come first
        got_mid, rc = acks.get(timeout=WAIT)
        if got_mid == mid:
            break
    assert rc.is_failure, rc  # its group has no broker: the client must send it again
    for i, t in enumerate(on_a):
        pub.publish(t, b"%d" % i, qos=1)
    got = sub.receive(len(on_a))
    assert sorted((t, p) for t, p, _q, _r in got) == sorted((t, b"%d" % i) for i, t in enumerate(on_a))
    for m in (sub, pub):
        m.close()
