"""A gateway node whose brokers stop answering for a while (issue 17): regression
tests of three gaps found by the fault campaign, each failing on the tree
before its fix.

Real processes: a name server, two broker groups (``broker-a``, the node's
home with the meta records, and ``broker-b``; MQTT topics are spread over both
by hash), one ``mqgate gateway`` node; clients on raw sockets
(``raw_mqtt.RawMqtt``), so each test decides what is sent when. A broker
"answers slowly" because it is stopped (SIGSTOP) and resumed, or "is down"
because it is SIGKILLed and started again on the same port and data.
"""

from __future__ import annotations

import os
import signal
import time
import zlib

import pytest

from gateway.mqtt import ConnAck, Disconnect, PubAck, Publish, Unsubscribe, UnsubAck
from ha_group import Group
from raw_mqtt import WAIT, RawMqtt
from serve_process import ServeProcess, free_port

SERVER_UNAVAILABLE = 0x88  # CONNACK, MQTT 5; 3.1.1 return code 3 decodes to it
SERVER_BUSY = 0x89  # DISCONNECT (0x88 is not a DISCONNECT code)


def on_group(prefix: str, index: int, skip: int = 0) -> str:
    """An MQTT topic under ``prefix`` that the node sends to broker group
    ``index`` (0: broker-a, 1: broker-b; gateway.broker_groups.group_for)."""
    found = (f"{prefix}/{i}" for i in range(1000) if zlib.crc32(f"{prefix}/{i}".encode()) % 2 == index)
    for _ in range(skip):
        next(found)
    return next(found)


class Nodes:
    def __init__(self, root) -> None:
        self.group = Group(root)
        self.group.start_namesrv()
        self.a = self.group.broker("a", 0, "ASYNC_MASTER", brokerName="broker-a")
        self.b = self.group.broker("b", 0, "ASYNC_MASTER", brokerName="broker-b")
        self.a.start()
        self.b.start()  # both registered before the node starts: it takes the groups it sees then
        self.node = ServeProcess(root / "node", "--namesrv", self.group.namesrv, "--mqtt-port", str(free_port()),
                                 "--ws-port", "0", "--http-port", "0", role="gateway").start()
        self.port = self.node.ports["mqtt-tcp"]

    def client(self, version: int = 5) -> RawMqtt:
        return RawMqtt(self.port, version)

    def crash(self, broker: ServeProcess) -> None:
        broker.proc.kill()
        broker.proc.wait(WAIT)
        broker.log.close()

    def stop(self) -> None:
        self.node.kill()
        self.group.stop_all()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    n = Nodes(tmp_path_factory.mktemp("outages"))
    try:
        yield n
    finally:
        n.stop()


def reconnect_until_served(n: Nodes, cid: str) -> tuple[RawMqtt, ConnAck, Publish]:
    """Connect as a client does after 0x88 or 0x89, again until the session's first
    message comes (bounded): (client, CONNACK, that PUBLISH)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        c = n.client()
        ack = c.connect(cid)
        if ack.reason_code == 0:
            ev = c.next((Publish, Disconnect))  # a redelivery that cannot read yet ends it (0x89)
            if isinstance(ev, Publish):
                return c, ack, ev
            assert ev is not None and ev.reason_code == SERVER_BUSY, ev
        c.sock.close()
    raise AssertionError(f"{cid}: not served again after the broker came back")


def test_a_session_notified_while_its_pump_awaits_a_slow_broker_is_pumped_again(nodes):
    """Connection._flush (4cee3fb): the pump awaits a read on broker-b (stopped);
    meanwhile a message for the same session lands on broker-a and notifies it.
    The read then yields nothing to send (its entry no longer matches): the
    writer must pump again rather than end with the notification dropped."""
    n = nodes
    p1, q1, p1_more = on_group("pump/p", 0), on_group("pump/q", 1), on_group("pump/p", 0, skip=1)
    probe = on_group("pump/none", 0)
    sub = n.client()
    assert sub.connect("pump-sub", receive_maximum=1).reason_code == 0
    sub.subscribe("pump/p/#", "pump/q/#")
    pub = n.client()
    assert pub.connect("pump-pub", clean_start=True).reason_code == 0
    pub.publish(p1, b"m1")
    m1 = sub.next(Publish)
    assert m1 is not None and m1.payload == b"m1"  # in flight, not acknowledged: the window (1) is full
    pub.publish(q1, b"m2")  # waits in the session queue on broker-b
    sub.send(Unsubscribe(packet_id=sub.packet_id(), topic_filters=("pump/q/#",)))
    assert sub.next(UnsubAck) is not None  # m2 is still queued, and no longer matches
    os.kill(n.b.proc.pid, signal.SIGSTOP)
    try:
        # the acknowledgement frees the window: the pump reads broker-a's part
        # (nothing), then awaits broker-b for m2
        sub.send(PubAck(packet_id=m1.packet_id))
        pub.publish(p1_more, b"m3")  # on broker-a: stored, and the session notified
        pub.publish(probe, b"-")  # stored after the node has read the notification (one connection to broker-a)
    finally:
        os.kill(n.b.proc.pid, signal.SIGCONT)
    m3 = sub.next(Publish)
    assert m3 is not None and (m3.topic, m3.payload) == (p1_more, b"m3")
    sub.send(PubAck(packet_id=m3.packet_id))
    sub.close()
    pub.close()


def test_an_in_flight_message_on_a_broker_that_is_down_comes_on_the_next_connect(nodes):
    """Redelivery (a04449d): the session's CONNECT record is written (home
    group up) but its in-flight message is on broker-b, which is down: the
    connection ends (DISCONNECT 0x89 "Server busy" after the CONNACK) and the
    flow is kept, so the message comes again once broker-b is back. Before
    a04449d the flow ended as if the message were gone; with a04449d's 0x88,
    not a DISCONNECT code, the handler failed and the CONNACK was never sent."""
    n = nodes
    topic = on_group("redeliver/t", 1)
    sub = n.client()
    assert sub.connect("redeliver-sub").reason_code == 0
    sub.subscribe("redeliver/#")
    pub = n.client()
    assert pub.connect("redeliver-pub", clean_start=True).reason_code == 0
    pub.publish(topic, b"kept")
    pub.close()
    first = sub.next(Publish)
    assert first is not None and first.payload == b"kept"
    sub.close()  # not acknowledged: in flight in the session
    n.crash(n.b)
    try:
        again = n.client()
        ack = again.connect("redeliver-sub")
        assert ack.reason_code == 0 and ack.session_present
        bye = again.next(Disconnect)
        assert bye is not None and bye.reason_code == SERVER_BUSY, bye
        again.sock.close()
    finally:
        n.b.start()
    back, ack, m = reconnect_until_served(n, "redeliver-sub")
    assert ack.session_present
    assert (m.topic, m.payload, m.packet_id, m.dup) == (topic, b"kept", first.packet_id, True)
    back.send(PubAck(packet_id=m.packet_id))
    back.close()


def test_a_connect_while_the_meta_records_cannot_be_read_is_refused_with_server_unavailable(nodes):
    """ClusterSync.catch_up: with the home group (the meta records) down, a
    CONNECT is refused (0x88; 3.1.1: return code 3) rather than decided on
    what the node had read so far; once it is back the client's session is
    there, with what was queued for it (before: accepted, on stale meta)."""
    n = nodes
    topic = on_group("meta/t", 1)
    sub = n.client()
    assert sub.connect("meta-sub").reason_code == 0
    sub.subscribe("meta/#")
    sub.close()
    pub = n.client()
    assert pub.connect("meta-pub", clean_start=True).reason_code == 0
    pub.publish(topic, b"queued")
    pub.close()
    n.crash(n.a)
    try:
        c = n.client()
        ack = c.connect("meta-sub")
        assert ack.reason_code == SERVER_UNAVAILABLE, ack
        assert ack.reason_string == "server unavailable: try again"
        c.sock.close()
        old = n.client(version=4)
        ack = old.connect("meta-sub")  # return code 3, which the codec decodes to 0x88
        assert ack.reason_code == SERVER_UNAVAILABLE and not ack.session_present, ack
        old.sock.close()
    finally:
        n.a.start()
    refused = [line for line in n.node.output().splitlines() if "CONNECT refused (0x88): client meta-sub" in line]
    assert len(refused) == 2, refused  # one line each, saying why
    assert all(": gateway meta records not read from offset " in line for line in refused), refused
    back, ack, m = reconnect_until_served(n, "meta-sub")
    assert ack.session_present
    assert (m.topic, m.payload) == (topic, b"queued")
    back.send(PubAck(packet_id=m.packet_id))
    back.close()
