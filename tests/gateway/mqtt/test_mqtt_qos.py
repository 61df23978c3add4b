"""QoS flow bookkeeping: every table entry, every missing pair, persistence."""

import msgpack
import pytest

from gateway.mqtt import (
    InboundAction,
    InboundFlows,
    InboundStage,
    LocalProtocolError,
    OutboundFlows,
    OutboundStage,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    Publish,
    ReasonCode,
    RemoteProtocolError,
)
from gateway.mqtt.qos import INBOUND, OUTBOUND

O, I, A = OutboundStage, InboundStage, InboundAction


def roundtrip(flows):
    """Persist through msgpack with default (strict) options and rebuild."""
    state = msgpack.unpackb(msgpack.packb(flows.to_state()))
    again = type(flows).from_state(state)
    assert again.to_state() == flows.to_state()
    return again


def outbound_in(stage: OutboundStage) -> tuple[OutboundFlows, int]:
    flows = OutboundFlows(10)
    pid = flows.start(1 if stage is O.AWAIT_PUBACK else 2, ref=[7, b"r"])
    if stage is O.AWAIT_PUBCOMP:
        flows.on_ack(PubRec(packet_id=pid))
    return roundtrip(flows), pid


ACKS = {PubAck: 0x80, PubRec: 0x80, PubComp: 0x92}


@pytest.mark.parametrize("key", list(OUTBOUND), ids=[f"{s.name}-{t.__name__}-{ok}" for s, t, ok in OUTBOUND])
def test_outbound_entry(key):
    stage, ack_type, ok = key
    flows, pid = outbound_in(stage)
    result = flows.on_ack(ack_type(packet_id=pid, reason_code=0 if ok else ACKS[ack_type]))
    new, release = OUTBOUND[key]
    assert result.ref == [7, b"r"]
    assert result.completed is (new is O.DONE)
    assert result.reply == (PubRel(packet_id=pid) if release else None)
    if new is O.DONE:
        assert len(flows) == 0
    else:
        assert flows.redeliveries()[0].release is (new is O.AWAIT_PUBCOMP)


MISSING_OUT = [
    (s, t, ok) for s in O if s is not O.DONE for t in ACKS for ok in (True, False) if (s, t, ok) not in OUTBOUND
]


@pytest.mark.parametrize("key", MISSING_OUT, ids=[f"{s.name}-{t.__name__}-{ok}" for s, t, ok in MISSING_OUT])
def test_outbound_missing_entry_is_a_protocol_error(key):
    stage, ack_type, ok = key
    flows, pid = outbound_in(stage)
    with pytest.raises(RemoteProtocolError):
        flows.on_ack(ack_type(packet_id=pid, reason_code=0 if ok else ACKS[ack_type]))


def test_outbound_unknown_packet_ids():
    flows = OutboundFlows()
    assert flows.on_ack(PubAck(packet_id=5)).completed is False
    rec = flows.on_ack(PubRec(packet_id=5))
    assert rec.reply == PubRel(packet_id=5, reason_code=ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)
    assert flows.on_ack(PubComp(packet_id=5)).reply is None


def test_outbound_window_and_allocation():
    flows = OutboundFlows(receive_maximum=2)
    a, b = flows.start(1), flows.start(2)
    assert (a, b) == (1, 2) and flows.available() == 0
    with pytest.raises(LocalProtocolError):
        flows.start(1)
    with pytest.raises(LocalProtocolError):
        OutboundFlows().start(0)
    flows.on_ack(PubAck(packet_id=a))
    assert flows.start(1) == 3
    # Wrap-around skips ids still in flight.
    flows = OutboundFlows(receive_maximum=3)
    flows._next = 65535
    assert flows.start(1) == 65535
    assert flows.start(1) == 1
    flows.on_ack(PubAck(packet_id=1))
    flows._next = 65535
    assert flows.start(1) == 1  # 65535 is busy


def test_outbound_redelivery_order_after_restart():
    flows = OutboundFlows(5)
    p1 = flows.start(1, ref=1)
    p2 = flows.start(2, ref=2)
    p3 = flows.start(2, ref=3)
    flows.on_ack(PubRec(packet_id=p2))
    flows = roundtrip(flows)
    got = [(r.packet_id, r.qos, r.ref, r.release) for r in flows.redeliveries()]
    assert got == [(p1, 1, 1, False), (p2, 2, 2, True), (p3, 2, 3, False)]


def inbound_in(stage: InboundStage, pid: int = 3) -> InboundFlows:
    flows = InboundFlows(5)
    if stage is I.QOS1_UNACKED:
        flows.on_publish(Publish(topic="t", qos=1, packet_id=pid))
    elif stage in (I.QOS2_UNACKED, I.QOS2_RECEIVED):
        flows.on_publish(Publish(topic="t", qos=2, packet_id=pid))
        if stage is I.QOS2_RECEIVED:
            flows.pubrec(pid)
    flows = roundtrip(flows)
    assert flows.stage(pid) is stage
    return flows


def apply(flows: InboundFlows, what: str, pid: int = 3):
    if what in ("publish1", "publish2"):
        return flows.on_publish(Publish(topic="t", qos=int(what[-1]), packet_id=pid, dup=True))
    if what == "puback":
        return flows.puback(pid)
    if what == "pubrec":
        return flows.pubrec(pid)
    if what == "pubrec_failed":
        return flows.pubrec(pid, ReasonCode.NOT_AUTHORIZED)
    return flows.on_pubrel(PubRel(packet_id=pid))


@pytest.mark.parametrize("key", list(INBOUND), ids=[f"{s.name}-{w}" for s, w in INBOUND])
def test_inbound_entry(key):
    stage, what = key
    flows = inbound_in(stage)
    result = apply(flows, what)
    new, action = INBOUND[key]
    assert flows.stage(3) is new
    if what.startswith("publish"):
        assert result is action
    if what == "pubrel":
        code = ReasonCode.SUCCESS if stage is I.QOS2_RECEIVED else ReasonCode.PACKET_IDENTIFIER_NOT_FOUND
        assert result == PubComp(packet_id=3, reason_code=code)


INPUTS = ("publish1", "publish2", "pubrel", "puback", "pubrec", "pubrec_failed")
MISSING_IN = [(s, w) for s in I for w in INPUTS if (s, w) not in INBOUND]


@pytest.mark.parametrize("key", MISSING_IN, ids=[f"{s.name}-{w}" for s, w in MISSING_IN])
def test_inbound_missing_entry(key):
    stage, what = key
    flows = inbound_in(stage)
    if stage is I.QOS2_RECEIVED and what.startswith("pubrec"):
        # Re-sending PUBREC for an acknowledged message is how RESEND_PUBREC is answered.
        assert apply(flows, what).packet_id == 3
        return
    error = RemoteProtocolError if what in ("publish1", "publish2", "pubrel") else LocalProtocolError
    with pytest.raises(error):
        apply(flows, what)


def test_inbound_receive_maximum():
    flows = InboundFlows(2)
    flows.on_publish(Publish(topic="t", qos=1, packet_id=1))
    flows.on_publish(Publish(topic="t", qos=2, packet_id=2))
    assert flows.on_publish(Publish(topic="t")) is A.DELIVER  # QoS 0 does not count
    with pytest.raises(RemoteProtocolError) as info:
        flows.on_publish(Publish(topic="t", qos=1, packet_id=3))
    assert info.value.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
    flows.puback(1)
    assert flows.on_publish(Publish(topic="t", qos=1, packet_id=3)) is A.DELIVER


def test_qos2_exactly_once_across_reconnect():
    flows = InboundFlows()
    pub = Publish(topic="t", qos=2, packet_id=9, payload=b"m")
    assert flows.on_publish(pub) is A.DELIVER
    assert flows.pubrec(9) == PubRec(packet_id=9)
    flows = roundtrip(flows)  # session persisted, client reconnects
    flows.reset_unacked()
    dup = Publish(topic="t", qos=2, packet_id=9, payload=b"m", dup=True)
    assert flows.on_publish(dup) is A.RESEND_PUBREC
    assert flows.on_pubrel(PubRel(packet_id=9)) == PubComp(packet_id=9)
    assert flows.on_publish(Publish(topic="t", qos=2, packet_id=9)) is A.DELIVER  # a new message


def test_reset_unacked_forgets_unacknowledged():
    flows = InboundFlows()
    flows.on_publish(Publish(topic="t", qos=1, packet_id=1))
    flows.on_publish(Publish(topic="t", qos=2, packet_id=2))
    flows.reset_unacked()
    assert len(flows) == 0
