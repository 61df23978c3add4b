"""Outbound QoS 2 is exactly once across a SIGKILL (persistent session, SYNC_FLUSH).

A persistent 3.1.1 subscriber acts as a receiver that hands a message to its
application on the first receipt of a packet id (method A) and de-duplicates
by packet id until the PUBREL. It stops part-way: some flows complete, some
past PUBREC (PUBCOMP never sent), some only received (no PUBREC). The server
is killed with SIGKILL (right away, or after its periodic consumer-offset
save), restarted on the same data dir, and the subscriber, with its de-dup
state, reconnects and finishes: every message reaches the application exactly
once, and a PUBLISH resent under a packet id carries the same message.
"""

import socket
import time
from collections import Counter

import pytest

from gateway.mqtt import (ConnAck, Connect, Disconnect, PubComp, PubRec, PubRel, Publish, SubAck, Subscribe,
                          Subscription, decode_all, encode)
from mqtt_packets import split_packets as _split
from serve_process import ServeProcess, free_port

V = 4
N = 12
SUB = "eo-subscriber"
TOPIC = "eo/t"


class Receiver:
    """A QoS 2 receiver, method A: deliver on first receipt, de-dup by packet id."""

    def __init__(self) -> None:
        self.app: list[bytes] = []  # what the application got, in order
        self.held: dict[int, bytes] = {}  # packet id -> payload, until PUBREL
        self.buf = b""
        self.sock: socket.socket | None = None

    def connect(self, port: int) -> list:
        """CONNECT; the CONNACK and whatever came with it."""
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""
        self.sock.sendall(encode(Connect(client_id=SUB, clean_start=False, keep_alive=60, protocol_version=V), V))
        ev = self.read_until(lambda evs: any(isinstance(e, ConnAck) for e in evs), 10)
        assert ev and isinstance(ev[0], ConnAck) and ev[0].reason_code == 0, ev
        return ev

    def read_some(self, timeout: float) -> list:
        """Packets that arrive within ``timeout`` s (complete packets only)."""
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return []
        if not chunk:
            return []
        self.buf += chunk
        whole, self.buf = _split(self.buf)
        events = decode_all(whole, V)
        return events

    def read_until(self, pred, timeout: float) -> list:
        got = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not pred(got):
            got += self.read_some(max(0.01, deadline - time.monotonic()))
        return got

    def on_publish(self, p: Publish) -> bool:
        """True when this PUBLISH was new to the application."""
        assert p.qos == 2
        if p.packet_id in self.held:
            assert self.held[p.packet_id] == p.payload, "packet id resent with a different message"
            assert p.dup
            return False
        self.held[p.packet_id] = p.payload
        self.app.append(p.payload)
        return True

    def send(self, *events) -> None:
        self.sock.sendall(b"".join(encode(e, V) for e in events))


def _publish_all(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as pub:
        pub.settimeout(10)
        pub.sendall(encode(Connect(client_id="eo-pub", clean_start=True, protocol_version=V), V))
        data = b""
        out = b"".join(encode(Publish(topic=TOPIC, payload=b"m%02d" % i, qos=2, packet_id=i + 1), V)
                       for i in range(N))
        pub.sendall(out)
        comps = set()
        while len(comps) < N:
            chunk = pub.recv(65536)
            assert chunk
            whole, data = _split(data + chunk)
            events = decode_all(whole, V)
            rels = [PubRel(packet_id=e.packet_id) for e in events if isinstance(e, PubRec)]
            if rels:
                pub.sendall(b"".join(encode(r, V) for r in rels))
            comps |= {e.packet_id for e in events if isinstance(e, PubComp)}
        pub.sendall(encode(Disconnect(), V))


@pytest.mark.parametrize("wait_before_kill", [0.0, 6.0], ids=["kill-now", "kill-after-offset-save"])
def test_outbound_qos2_exactly_once_across_sigkill(tmp_path, wait_before_kill):
    port = free_port()
    args = ("--mqtt-port", str(port), "--ws-port", "0", "--namesrv-port", "0", "--broker-port", "0",
            "--flush", "sync")
    r = Receiver()
    server = ServeProcess(tmp_path / "d", *args).start()
    try:
        r.connect(port)
        r.send(Subscribe(packet_id=1, subscriptions=(Subscription(topic_filter=TOPIC, qos=2),)))
        assert r.read_until(lambda evs: any(isinstance(e, SubAck) for e in evs), 10)
        _publish_all(port)

        # Phase 1: m00-m03 complete, m04-m07 past PUBREC (no PUBCOMP), m08-m11 only received.
        order: dict[int, int] = {}  # packet id -> message index
        completed: set[int] = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (len(order) == N and len(completed) == 4):
            for e in r.read_some(0.5):
                if isinstance(e, Publish):
                    r.on_publish(e)
                    idx = int(e.payload[1:])
                    order[e.packet_id] = idx
                    if idx < 8:
                        r.send(PubRec(packet_id=e.packet_id))
                elif isinstance(e, PubRel):
                    r.held.pop(e.packet_id, None)
                    if order[e.packet_id] < 4:
                        r.send(PubComp(packet_id=e.packet_id))
                        completed.add(e.packet_id)
        assert len(order) == N and len(completed) == 4, (order, completed)
        for e in r.read_until(lambda evs: False, 0.3):  # late PUBRELs of the group past PUBREC
            if isinstance(e, PubRel):
                r.held.pop(e.packet_id, None)
        assert sorted(r.app) == [b"m%02d" % i for i in range(N)]
        time.sleep(wait_before_kill)
        server.kill()  # SIGKILL
        r.sock.close()

        server = ServeProcess(tmp_path / "d", *args).start()
        first = r.connect(port)
        assert first[0].session_present
        backlog = first[1:]
        deadline = time.monotonic() + 20
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            events, backlog = backlog + r.read_some(0.3), []
            if events:
                quiet_since = time.monotonic()
            for e in events:
                if isinstance(e, Publish):
                    r.on_publish(e)
                    r.send(PubRec(packet_id=e.packet_id))
                elif isinstance(e, PubRel):
                    r.held.pop(e.packet_id, None)
                    r.send(PubComp(packet_id=e.packet_id))
            if not r.held and time.monotonic() - quiet_since > 1.5:
                break
        counts = Counter(r.app)
        assert counts == Counter({b"m%02d" % i: 1 for i in range(N)}), counts
        assert not r.held, r.held
        r.send(Disconnect())
        r.sock.close()
    finally:
        server.kill()
