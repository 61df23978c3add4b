"""One owner per client id across gateway nodes, arbitrated by etcd (``mqgate gateway --etcd``, issue 20).

Real processes for the module: etcd, one ``mqgate serve`` (name server and
broker, MQTT edge off) and two gateway nodes with ``--etcd``; the SIGKILL
test starts and kills a third node. The clients are raw MQTT sockets (built
on ``gateway.mqtt``) where the order of packets across two connections is
the point, and paho-mqtt elsewhere. The test that stops etcd runs last.

What nodes without etcd lack, and these check (with the nodes started
without ``--etcd`` these three fail): the new node reads the session from
the old node's final record, written after it closed the old connection
(QoS 1 messages in flight on a live connection come again with their
packet ids and DUP, not as new messages); two CONNECTs racing on two nodes
never both run, and one of them is left; a CONNECT that cannot own its
client id (etcd down) is refused (0x88 / 3) instead of run without an
owner, and a node whose lease is gone closes its clients. The QoS 2 and
SIGKILL tests hold without etcd too (the window in which the meta order
can deliver a QoS 2 message twice is too short to hit on purpose); they
check that the etcd path keeps them: the takeover's CONNACK after the old
connection's DISCONNECT 0x8E, the PUBREL flow completed once, and a dead
owner's session taken within the lease's TTL and a margin.

One test runs a node's broker backend in this process against the
module's broker: the cached max offset of a watched session queue never
stands above the broker's (the cause of a flake of the QoS 1 test, issue 17).
"""

from __future__ import annotations

import base64
import json
import re
import selectors
import urllib.request
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import trio

from core.broker import LMQ_TOPIC_PREFIX
from core.client import MessageQueue, open_client_api, parse_namesrv
from core.store import PROPERTY_INNER_MULTI_DISPATCH, Message
from gateway.mqtt import (ConnAck, Connect, Disconnect, PubComp, PubRec, PubRel, Publish, SubAck, Subscribe,
                          Subscription, decode_all, encode)
from gateway.owners import OWNER_TTL
from gateway.remote_backend import RemoteBackend
from tests.gateway.test_gateway_nodes import WAIT, Mqtt
from etcd_process import EtcdProcess
from mqtt_packets import split_packets as _split
from serve_process import ServeProcess, free_port


class Raw:
    """A raw MQTT connection: send events, read packets (with arrival times) until a deadline."""

    def __init__(self, port: int, cid: str, *, version: int = 5, clean: bool = False, send: bool = True) -> None:
        self.version = version
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.buf = b""
        self.wire = b""  # every byte received
        self.closed_at: float | None = None
        self.got: list[tuple[float, object]] = []
        self.connect = Connect(client_id=cid, clean_start=clean, keep_alive=60, protocol_version=version,
                               session_expiry_interval=(3600 if not clean and version == 5 else None))
        if send:
            self.send(self.connect)

    def send(self, *events) -> None:
        self.sock.sendall(b"".join(encode(e, self.version) for e in events))

    def feed(self) -> list:
        """Read what is there now (the socket is readable); None once closed."""
        try:
            chunk = self.sock.recv(65536)
        except BlockingIOError:
            raise
        except OSError:  # reset: closed
            chunk = b""
        now = time.monotonic()
        if not chunk:
            if self.closed_at is None:
                self.closed_at = now
            return []
        self.wire += chunk
        whole, self.buf = _split(self.buf + chunk)
        events = decode_all(whole, self.version)
        self.got += [(now, e) for e in events]
        return events

    def read_until(self, pred, timeout: float = WAIT) -> list:
        out: list = []
        deadline = time.monotonic() + timeout
        while not pred(out) and self.closed_at is None and time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                out += self.feed()
            except socket.timeout:
                break
        return out

    def count(self, kind) -> int:
        return sum(isinstance(e, kind) for _t, e in self.got)

    def wait_count(self, kind, n: int, timeout: float = WAIT) -> None:
        """Read until ``n`` packets of ``kind`` have come on this connection in all."""
        self.read_until(lambda _evs: self.count(kind) >= n, timeout)

    def drain(self) -> None:
        """Read whatever has arrived by now, without waiting: on loopback a
        packet the server sent earlier is in the socket's buffer already."""
        self.sock.setblocking(False)
        try:
            while self.closed_at is None:
                try:
                    self.feed()
                except BlockingIOError:
                    break
        finally:
            self.sock.setblocking(True)

    @property
    def live(self) -> bool:
        """Accepted, and neither told to go nor closed (as far as read)."""
        ack = self.first(ConnAck)
        return ack is not None and ack[1].reason_code == 0 and self.first(Disconnect) is None and self.closed_at is None

    def first(self, kind) -> tuple[float, object] | None:
        return next(((t, e) for t, e in self.got if isinstance(e, kind)), None)

    def close(self) -> None:
        self.sock.close()


def _connack(raw: Raw, timeout: float = WAIT) -> ConnAck:
    raw.read_until(lambda evs: any(isinstance(e, ConnAck) for e in evs), timeout)
    ack = raw.first(ConnAck)
    assert ack is not None, f"no CONNACK (closed: {raw.closed_at is not None})"
    return ack[1]


@pytest.fixture(scope="module")
def owned(tmp_path_factory):
    root = tmp_path_factory.mktemp("gwowner")
    (root / "etcd").mkdir()
    etcd = EtcdProcess(root / "etcd")
    namesrv = f"127.0.0.1:{free_port()}"
    broker = ServeProcess(root / "broker", "--mqtt-port", "0", "--ws-port", "0", "--namesrv-port",
                          namesrv.rsplit(":", 1)[1], "--broker-port", str(free_port()))
    nodes = [ServeProcess(root / f"node{i}", "--namesrv", namesrv, "--etcd", etcd.endpoint,
                          "--mqtt-port", str(free_port()), "--ws-port", "0", role="gateway") for i in range(2)]
    try:
        # etcd and the broker at once, then both nodes at once (module setup time)
        with ThreadPoolExecutor(2) as pool:
            for starts in ((etcd, broker), nodes):
                for done in [pool.submit(p.start) for p in starts]:
                    done.result()
        yield etcd, namesrv, [n.ports["mqtt-tcp"] for n in nodes], root
    finally:
        for n in nodes:
            n.kill()
        broker.kill()
        etcd.kill()


def test_qos2_flow_past_pubrec_moves_to_another_node_once(owned):
    _etcd, _ns, (a, b), _root = owned
    old = Raw(a, "own-q2")
    assert _connack(old).reason_code == 0
    old.send(Subscribe(packet_id=1, subscriptions=(Subscription(topic_filter="own/q2", qos=2),)))
    assert old.read_until(lambda evs: any(isinstance(e, SubAck) for e in evs))
    pub = Mqtt(a, "own-q2-pub")
    pub.publish("own/q2", b"once", qos=2)
    got = old.read_until(lambda evs: any(isinstance(e, Publish) for e in evs))
    first = next(e for e in got if isinstance(e, Publish))
    assert first.payload == b"once"
    app = [first.payload]  # what the device's application got (method A: once per packet id until PUBREL)
    awaiting = {first.packet_id}
    old.send(PubRec(packet_id=first.packet_id))
    assert old.read_until(lambda evs: any(isinstance(e, PubRel) for e in evs))  # PUBCOMP never sent here

    new = Raw(b, "own-q2")
    ack = _connack(new)
    assert ack.reason_code == 0 and ack.session_present
    # the old connection had been told to go when the new one was accepted
    old.drain()
    told = old.first(Disconnect)
    assert told is not None and told[1].reason_code == 0x8E, old.got
    # the flow goes on where it was: PUBREL, not the message again

    def device(events) -> None:
        for e in events:
            if isinstance(e, Publish):
                if e.packet_id not in awaiting:
                    app.append(e.payload)
                awaiting.add(e.packet_id)
                new.send(PubRec(packet_id=e.packet_id))
            elif isinstance(e, PubRel):
                awaiting.discard(e.packet_id)
                new.send(PubComp(packet_id=e.packet_id))

    device([e for _t, e in new.got])
    if first.packet_id in awaiting:
        device(new.read_until(lambda evs: any(isinstance(e, PubRel) for e in evs)))
    assert awaiting == set()
    pub.publish("own/q2", b"next", qos=2)
    device(new.read_until(lambda evs: any(isinstance(e, Publish) for e in evs)))
    device(new.read_until(lambda evs: any(isinstance(e, PubRel) for e in evs)))
    assert app == [b"once", b"next"], new.got
    new.send(Disconnect())
    for c in (old, new):
        c.close()
    pub.close()


def test_qos1_in_flight_on_a_live_connection_moves_with_its_packet_ids(owned):
    _etcd, _ns, (a, b), _root = owned
    old = Raw(a, "own-q1", version=4)
    assert _connack(old).reason_code == 0
    old.send(Subscribe(packet_id=1, subscriptions=(Subscription(topic_filter="own/q1/#", qos=1),)))
    assert old.read_until(lambda evs: any(isinstance(e, SubAck) for e in evs))
    pub = Mqtt(a, "own-q1-pub")
    for i in range(3):
        pub.publish(f"own/q1/{i}", b"%d" % i, qos=1)
    old.wait_count(Publish, 3)
    first = [(e.topic, e.packet_id) for _t, e in old.got if isinstance(e, Publish)]  # never acknowledged
    assert len(first) == 3
    new = Raw(b, "own-q1", version=4)  # the old connection is still open
    assert _connack(new).session_present
    new.wait_count(Publish, 3)
    again = [(e.topic, e.packet_id, e.dup) for _t, e in new.got if isinstance(e, Publish)]
    # the old node's final record carried them: the same three, same packet ids, marked DUP
    assert again == [(t, pid, True) for t, pid in first]
    new.send(Disconnect())
    for c in (old, new):
        c.close()
    pub.close()


async def test_a_node_never_counts_an_entry_of_a_watched_queue_twice(owned):
    """Why the test above once saw 2 of its 3 messages (issue 17): a node
    counted its own send to a session's queue once more on the send's answer
    after the watching long poll's answer had counted it already, so its
    cached max offset stood one above the broker's. The session's delivery
    then read at an offset with no entry, and the answers that counted the
    next entry did not raise the cache, so nothing woke it: the last message
    waited for a later one. Here a ``RemoteBackend`` of this process against
    the module's broker (the code of a node; the broker answers a parked
    pull at the append, a send after its flush): after each send, the cache
    of a watched queue is never above the broker's, and the long poll brings
    it to the end; a queue not watched still counts the node's own sends
    (queue limits of offline sessions need them)."""
    _etcd, namesrv, _ports, _root = owned
    watched, offline = f"{LMQ_TOPIC_PREFIX}own-cache-watched", f"{LMQ_TOPIC_PREFIX}own-cache-offline"
    sends = 50
    async with open_client_api() as api, trio.open_nursery() as nursery:
        backend = await nursery.start(RemoteBackend(api, parse_namesrv(namesrv), node_id="gwcachetest").run)
        at_end = trio.Event()
        backend.add_dispatch_listener(lambda q, _qid, end: at_end.set() if (q, end) == (watched, sends) else None)
        for q in (watched, offline):
            await backend.prepare_queue(q)
        backend.watch_queue(watched, True)

        async def broker_max(q: str) -> int:
            return await api.max_offset(backend.home_addr, MessageQueue(q, backend.home_name, 0))

        assert await broker_max(watched) == 0  # so the broker's is i + 1 after send i: only this test sends there
        for i in range(sends):
            msg = Message(topic="own_cache", body=b"%d" % i, properties={PROPERTY_INNER_MULTI_DISPATCH: watched})
            assert (await backend.send(msg)).ok
            assert backend.max_offset(watched, 0) <= i + 1, i
        assert await broker_max(watched) == sends
        with trio.fail_after(WAIT):
            await at_end.wait()
        for i in range(3):
            msg = Message(topic="own_cache", body=b"%d" % i, properties={PROPERTY_INNER_MULTI_DISPATCH: offline})
            assert (await backend.send(msg)).ok
        assert backend.max_offset(offline, 0) == await broker_max(offline) == 3
        nursery.cancel_scope.cancel()


def _extra_node(owned, name: str, *config: str) -> ServeProcess:
    """A third gateway node with etcd, for a test that stops it; ``config``: [mqtt] lines."""
    etcd, namesrv, _ports, root = owned
    args = ()
    if config:
        (root / f"{name}.toml").write_text("[mqtt]\n" + "\n".join(config) + "\n")
        args = ("--config", str(root / f"{name}.toml"))
    return ServeProcess(root / name, "--namesrv", namesrv, "--etcd", etcd.endpoint, "--mqtt-port", str(free_port()),
                        "--ws-port", "0", *args, role="gateway").start()


def _race(a: int, b: int, cid: str) -> tuple[Raw, Raw, int]:
    """Two CONNECTs of ``cid`` sent to two nodes at the same moment; read both
    connections until one is accepted and the other closed or refused. Also
    the number of times a connection was accepted while the other was live."""
    x = Raw(a, cid, send=False)
    y = Raw(b, cid, send=False)
    data = encode(x.connect, 5)
    go = threading.Barrier(2)

    def send(raw: Raw) -> None:
        go.wait(WAIT)
        raw.sock.sendall(data)

    threads = [threading.Thread(target=send, args=(r,)) for r in (x, y)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    sel = selectors.DefaultSelector()
    for r in (x, y):
        sel.register(r.sock, selectors.EVENT_READ, r)
    overlaps = 0
    deadline = time.monotonic() + WAIT
    quiet_until = None
    while time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.05):
            r = key.data
            other = y if r is x else x
            was = r.live
            r.drain()
            if r.live and not was:
                other.drain()  # what the other node sent before this CONNACK is in the buffer by now
                overlaps += other.live
            if r.closed_at is not None:
                sel.unregister(key.fileobj)
        settled = (x.live != y.live) and all(r.live or r.closed_at is not None or r.first(ConnAck) for r in (x, y))
        if settled:
            quiet_until = quiet_until or time.monotonic() + 0.5  # and stays so
            if time.monotonic() >= quiet_until:
                break
        else:
            quiet_until = None
    sel.close()
    return x, y, overlaps


def test_two_connects_racing_on_two_nodes_never_both_run(owned):
    _etcd, _ns, (a, b), _root = owned
    for round_ in range(3):
        x, y, overlaps = _race(a, b, f"own-race-{round_}")
        assert overlaps == 0  # at most one accepted connection at any time
        assert [x.live, y.live].count(True) == 1, (x.got, y.got)  # and one left, connected
        for r in (x, y):
            if r.closed_at is None:
                r.send(Disconnect())
            r.close()


def test_sigkill_of_the_owner_the_session_resumes_elsewhere_after_the_lease(owned):
    """The dead node's lease has its own TTL ([mqtt] ownerLeaseTtl = 2, not 5)."""
    etcd, _ns, (a, _b), _root = owned
    ttl = 2
    doomed = _extra_node(owned, "doomed", f"ownerLeaseTtl = {ttl}")
    try:
        d = doomed.ports["mqtt-tcp"]
        sub = Mqtt(d, "own-kill-sub", clean=False, version=4)
        (kv,) = _etcd_call(etcd.endpoint, "/v3/kv/range", {"key": base64.b64encode(f"{PREFIX}own-kill-sub".encode()).decode()})["kvs"]
        granted = _etcd_call(etcd.endpoint, "/v3/lease/timetolive", {"ID": kv["lease"]})
        assert int(granted["grantedTTL"]) == ttl
        sub.subscribe("own/kill/#", 1)
        pub = Mqtt(d, "own-kill-pub", version=4)
        acked = set(range(20))
        for i in sorted(acked):
            pub.publish(f"own/kill/{i}", b"%d" % i, qos=1)
        before = sub.receive_payloads_until(set(range(5)))
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(10)
        killed = time.monotonic()
        sub.c.loop_stop()
        pub.c.loop_stop()
        before |= sub.receive_payloads_until(acked, timeout=0)  # what the old connection got (and acknowledged)
        sub = Mqtt(a, "own-kill-sub", clean=False, version=4)  # accepted once the dead node's lease expired
        took = time.monotonic() - killed
        assert sub.session_present
        assert took <= ttl + 3, took
        got = before | sub.receive_payloads_until(acked - before)
        assert got >= acked, sorted(acked - got)
        sub.close()
    finally:
        doomed.kill()


PREFIX = "/mqgate/gateway/DefaultCluster/owner/"  # [broker] etcdKeyPrefix and brokerClusterName defaults


def _etcd_call(endpoint: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"{endpoint}{path}", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=WAIT) as r:
        return json.loads(r.read())


def _owned_by(endpoint: str, node_id: str) -> set[str]:
    """The owner keys in etcd whose value is ``node_id``."""
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    kvs = _etcd_call(endpoint, "/v3/kv/range", {"key": b64(PREFIX.encode()),
                                                "range_end": b64(PREFIX[:-1].encode() + b"0")}).get("kvs", [])
    return {base64.b64decode(kv["key"]).decode() for kv in kvs if base64.b64decode(kv["value"]).decode() == node_id}


def test_a_drained_node_leaves_no_owner_key_and_revokes_its_lease(owned):
    etcd, _ns, (a, _b), _root = owned
    node = _extra_node(owned, "drained")
    try:
        port = node.ports["mqtt-tcp"]
        dev = Raw(port, "own-drain-dev")
        clean = Raw(port, "own-drain-clean", clean=True)
        assert _connack(dev).reason_code == 0 and _connack(clean).reason_code == 0
        node_id, lease = re.search(r"gateway node (gw\w+): client ids owned under etcd lease (\w+)",
                                   node.output()).groups()
        assert _owned_by(etcd.endpoint, node_id) == {PREFIX + "own-drain-dev", PREFIX + "own-drain-clean"}
        assert node.stop(signal.SIGTERM) == 0
        assert dev.read_until(lambda evs: any(isinstance(e, Disconnect) for e in evs))
        assert _owned_by(etcd.endpoint, node_id) == set()
        ttl = _etcd_call(etcd.endpoint, "/v3/lease/timetolive", {"ID": str(int(lease, 16))})
        assert int(ttl.get("TTL", -1)) == -1  # revoked, not left to expire
        again = Raw(a, "own-drain-dev")  # free for any node at once
        assert _connack(again, timeout=OWNER_TTL - 1).session_present
        again.send(Disconnect())
        for c in (dev, clean, again):
            c.close()
    finally:
        node.kill()


def test_etcd_down_connects_are_refused_and_clients_closed_then_accepted_again(owned):
    etcd, _ns, (a, b), _root = owned
    held = Raw(b, "own-held")
    assert _connack(held).reason_code == 0
    etcd.kill()
    try:
        stopped = time.monotonic()
        v5 = Raw(a, "own-down-5")
        assert _connack(v5).reason_code == 0x88  # Server unavailable
        v4 = Raw(a, "own-down-4", version=4)
        _connack(v4)
        assert v4.wire[:4] == b"\x20\x02\x00\x03"  # 3.1.1 CONNACK: return code 3, server unavailable
        # the node cannot renew its lease: after a TTL it closes the connections it owns
        held.read_until(lambda evs: any(isinstance(e, Disconnect) for e in evs), timeout=OWNER_TTL + 5)
        told = held.first(Disconnect)
        assert told is not None and told[1].reason_code == 0x9C, held.got  # Use another server
        assert time.monotonic() - stopped >= OWNER_TTL - 2  # not before the lease could have lapsed
    finally:
        etcd.start()
    for c in (held, v5, v4):
        c.close()
    deadline = time.monotonic() + WAIT
    code = None
    while time.monotonic() < deadline:  # the node grants itself a new lease once etcd answers
        again = Raw(a, "own-back")
        code = _connack(again).reason_code
        again.close()
        if code == 0:
            break
        time.sleep(0.2)
    assert code == 0


async def test_a_send_cancelled_before_its_answer_still_reaches_the_stored_hooks(owned):
    """A node's send cancelled while it waits for the broker (its publisher's
    connection closed): the stored hooks hear the message as not stored, so
    what the put hooks left for them (the router's pending deliveries) is not
    kept forever."""
    _etcd, namesrv, _ports, _root = owned
    heard = []
    async with open_client_api() as api, trio.open_nursery() as nursery:
        backend = await nursery.start(RemoteBackend(api, parse_namesrv(namesrv), node_id="gwcanceltest").run)
        backend.add_stored_hook(lambda msg, result: heard.append((msg.body, result.ok)))
        with trio.move_on_after(0):  # cancelled at the send's first wait
            await backend.send(Message(topic="own_cancel", body=b"cancelled"))
        assert heard == [(b"cancelled", False)]
        assert (await backend.send(Message(topic="own_cancel", body=b"sent"))).ok
        assert heard[1:] == [(b"sent", True)]
        nursery.cancel_scope.cancel()
