"""Batch-through acks (gateway/mqtt/qos.py, issue 13): the batch calls make
the changes the per-packet calls make, raise the same errors at the same
packet, and their ack words encode to the bytes the events encode to; plain
acks decoded on the fast path equal the ones the general decoder builds, and
decoded as ack words (``ClientAcks``) stand for the same acks in the same
order."""

import random

import pytest

from gateway.mqtt import (
    NO_REF, NOT_FOUND, PUBACK_WORD, PUBCOMP_WORD, PUBREC_WORD, PUBREL_WORD, ClientAcks, ConnAck, InboundFlows,
    MQTTConnection, OutboundFlows, PubAck, PubComp, PubRec, PubRel, Publish, RemoteProtocolError, ack_event, encode,
    plain_acks,
)
from gateway.mqtt._decode import decode_packet, read_fixed_header

from mqtt_helpers import connect_bytes, connected

KINDS = [(PUBACK_WORD, PubAck), (PUBREC_WORD, PubRec), (PUBREL_WORD, PubRel), (PUBCOMP_WORD, PubComp)]


@pytest.mark.parametrize("version", [4, 5])
def test_plain_ack_words_are_the_bytes_of_their_events(version):
    words = [kind | pid for kind, _ in KINDS for pid in (1, 2, 255, 256, 0x1234, 65535)]
    events = [cls(packet_id=pid) for _, cls in KINDS for pid in (1, 2, 255, 256, 0x1234, 65535)]
    assert plain_acks(words) == b"".join(encode(e, version) for e in events)
    assert [ack_event(w) for w in words] == events
    assert plain_acks([PUBREL_WORD | NO_REF | 7]) == encode(PubRel(packet_id=7), version)
    assert ack_event(PUBCOMP_WORD | NOT_FOUND | 9) == PubComp(packet_id=9, reason_code=0x92)
    assert ack_event(PUBREL_WORD | NOT_FOUND | 9) == PubRel(packet_id=9, reason_code=0x92)


def _inbound_with(qos_by_pid: dict, received: set) -> InboundFlows:
    flows = InboundFlows(100)
    for pid, qos in qos_by_pid.items():
        flows.on_publish(Publish(topic="t", qos=qos, packet_id=pid))
        if pid in received:
            flows.pubrec(pid)
    return flows


def test_acknowledge_is_puback_and_pubrec_one_by_one():
    rng = random.Random(13)
    for _ in range(200):
        qos_by_pid = {pid: rng.choice((1, 2)) for pid in rng.sample(range(1, 40), 12)}
        received = {pid for pid, q in qos_by_pid.items() if q == 2 and rng.random() < 0.3}
        words = [(PUBACK_WORD if q == 1 else PUBREC_WORD) | pid for pid, q in qos_by_pid.items()]
        rng.shuffle(words)
        if rng.random() < 0.2:  # a word whose packet is in another stage: the same error at the same word
            words.insert(rng.randrange(len(words) + 1), rng.choice((PUBACK_WORD, PUBREC_WORD)) | rng.randrange(40, 50))
        one, batch = _inbound_with(qos_by_pid, received), _inbound_with(qos_by_pid, received)
        error_one = error_batch = None
        try:
            for w in words:
                (one.puback if w < 0x10000 else one.pubrec)(w & 0xFFFF)
        except Exception as e:  # noqa: BLE001 - compared below
            error_one = e
        try:
            batch.acknowledge(words)
        except Exception as e:  # noqa: BLE001
            error_batch = e
        assert type(error_one) is type(error_batch)
        assert str(error_one) == str(error_batch)
        assert one.to_state() == batch.to_state()


def test_release_is_on_pubrel_one_by_one():
    rng = random.Random(7)
    for _ in range(200):
        qos_by_pid = {pid: 2 for pid in rng.sample(range(1, 40), 10)}
        qos_by_pid.update({pid: 1 for pid in rng.sample(range(40, 60), 2)})
        received = {pid for pid, q in qos_by_pid.items() if q == 2 and rng.random() < 0.7}
        pids = [rng.randrange(1, 60) for _ in range(12)]
        one, batch = _inbound_with(qos_by_pid, received), _inbound_with(qos_by_pid, received)
        sent_one, error_one = [], None
        try:
            for pid in pids:
                sent_one.append(one.on_pubrel(PubRel(packet_id=pid)))
        except RemoteProtocolError as e:
            error_one = e
        comps, error_batch = [], None
        try:
            batch.release([PubRel(packet_id=pid) for pid in pids], comps)
        except RemoteProtocolError as e:
            error_batch = e
        assert [ack_event(w) for w in comps] == sent_one
        assert (error_one is None) == (error_batch is None)
        if error_one is not None:
            assert (str(error_one), error_one.reason_code) == (str(error_batch), error_batch.reason_code)
        assert one.to_state() == batch.to_state()


def _outbound_with(flows_spec) -> OutboundFlows:
    flows = OutboundFlows(100)
    for qos, ref, past_pubrec in flows_spec:
        pid = flows.start(qos, ref)
        if past_pubrec:
            flows.on_ack(PubRec(packet_id=pid))
    return flows


def test_on_acks_is_on_ack_one_by_one():
    rng = random.Random(5)
    refs = [None, 17, (1 << 40) | 3, ["r", 100, 20]]
    for _ in range(300):
        spec = [(q, rng.choice(refs), q == 2 and rng.random() < 0.4) for q in (rng.choice((1, 2)) for _ in range(8))]
        acks = []
        for _ in range(10):
            cls = rng.choice((PubAck, PubRec, PubComp))
            failed = 0x92 if cls is PubComp else 0x80
            acks.append(cls(packet_id=rng.randrange(1, 11), reason_code=0 if rng.random() < 0.85 else failed))
        one, batch = _outbound_with(spec), _outbound_with(spec)
        replies, done, received, error_one = [], [], [], None
        try:
            for a in acks:
                r = one.on_ack(a)
                if r.reply is not None:
                    flag = NOT_FOUND if r.reply.reason_code else (NO_REF if r.ref is None else 0)
                    replies.append(PUBREL_WORD | flag | r.packet_id)
                if r.completed:
                    done.append(r.packet_id)
                elif type(a) is PubRec and type(r.ref) is int:
                    received.append(r.packet_id)
        except RemoteProtocolError as e:
            error_one = e
        # the same acks as events, and with each run of success acks as ack words (ClientAcks)
        for run in (acks, _as_client_acks(acks)):
            batch = _outbound_with(spec)
            got = ([], [], [])
            error_batch = None
            try:
                batch.on_acks(run, *got)
            except RemoteProtocolError as e:
                error_batch = e
            assert got == (replies, done, received)
            assert (error_one is None) == (error_batch is None)
            if error_one is not None:
                assert (str(error_one), error_one.reason_code) == (str(error_batch), error_batch.reason_code)
            assert one.to_state() == batch.to_state()


_WORD_OF = {PubAck: PUBACK_WORD, PubRec: PUBREC_WORD, PubComp: PUBCOMP_WORD}


def _as_client_acks(acks: list) -> list:
    """``acks`` with every run of success PUBACK/PUBREC/PUBCOMP events as one ClientAcks."""
    out = []
    for a in acks:
        if type(a) in _WORD_OF and not a.reason_code:
            if not out or type(out[-1]) is not ClientAcks:
                out.append(ClientAcks([]))
            out[-1].words.append(_WORD_OF[type(a)] | a.packet_id)
        else:
            out.append(a)
    return out


def _decode_slow(data: bytes, version: int) -> list:
    out, pos = [], 0
    while pos < len(data):
        first, length, body = read_fixed_header(data, pos, len(data))
        out.append(decode_packet(first, data, body, body + length, version))
        pos = body + length
    return out


@pytest.mark.parametrize("version", [4, 5])
def test_plain_acks_decode_as_the_general_decoder_does(version):
    events = [PubAck(packet_id=1), PubRec(packet_id=2), PubRel(packet_id=300), PubComp(packet_id=65535),
              Publish(topic="a/b", qos=2, packet_id=9, payload=b"x"), PubRel(packet_id=9), PubAck(packet_id=4)]
    if version == 5:  # reason codes and properties: the general path, in its place
        events[3:3] = [PubRec(packet_id=5, reason_code=0x80), PubComp(packet_id=6, reason_code=0x92, reason_string="n")]
    data = b"".join(encode(e, version) for e in events)
    for cut in range(len(data) + 1):  # every split of the input into two reads
        mq = connected(version)
        got = []
        for part in (data[:cut], data[cut:]):
            if part:  # b"" would be EOF
                mq.receive_data(part)
                got += mq.events()
        assert got == events == _decode_slow(data, version)
        assert [type(e) for e in got] == [type(e) for e in events]


@pytest.mark.parametrize("version", [4, 5])
def test_plain_client_acks_decode_as_ack_words_in_their_place(version):
    """With ack_words, each run of plain PUBACK/PUBREC/PUBCOMP is one
    ClientAcks holding their words in order; PUBRELs, PUBLISHes and acks with
    a reason code stay events in their place, across every split of the input."""
    events = [PubAck(packet_id=1), PubRec(packet_id=2), PubComp(packet_id=65535), PubRel(packet_id=300),
              PubAck(packet_id=7), Publish(topic="a/b", qos=1, packet_id=9, payload=b"x"), PubAck(packet_id=4),
              PubComp(packet_id=256)]
    if version == 5:
        events[2:2] = [PubRec(packet_id=5, reason_code=0x80)]
    data = b"".join(encode(e, version) for e in events)
    for cut in range(len(data) + 1):
        mq = MQTTConnection(ack_words=True)
        mq.receive_data(connect_bytes(version))
        mq.events()
        mq.send(ConnAck())
        got = []
        for part in (data[:cut], data[cut:]):
            if part:
                mq.receive_data(part)
                got += mq.events()
        # a read may end inside a run: its two ClientAcks stand for it, in order
        merged = []
        for ev in got:
            if type(ev) is ClientAcks and merged and type(merged[-1]) is ClientAcks:
                merged[-1] = ClientAcks(merged[-1].words + ev.words)
            else:
                merged.append(ev)
        assert merged == _as_client_acks(events)


@pytest.mark.parametrize("bad", [b"\x40\x02\x00\x00", b"\x60\x02\x00\x01", b"\x52\x02\x00\x01"],
                         ids=["packet-id-0", "pubrel-flags-0000", "pubrec-flags-0010"])
@pytest.mark.parametrize("ack_words", [False, True])
def test_a_bad_short_ack_is_still_refused(bad, ack_words):
    mq = MQTTConnection(ack_words=ack_words)
    mq.receive_data(connect_bytes(4))
    mq.events()
    mq.send(ConnAck())
    mq.receive_data(encode(PubAck(packet_id=3), 4) + bad)
    assert mq.events() == ([ClientAcks([PUBACK_WORD | 3])] if ack_words else [PubAck(packet_id=3)])
    with pytest.raises(RemoteProtocolError):
        mq.events()
