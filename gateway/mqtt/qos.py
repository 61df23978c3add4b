"""QoS 1 and 2 flow bookkeeping, both directions, as plain serialisable state.

Rules kept here (3.1.1 section 4.3-4.6, 5.0 section 4.3-4.9):

* State is plain data: ``to_state()`` returns ints, lists and dicts with
  str keys (msgpack-friendly, ``strict_map_key`` safe), ``from_state()``
  rebuilds an equal object. The ``ref`` a caller attaches to an outbound
  message is stored as given, so it must be plain data too (e.g. a queue
  offset). Sessions persist this across connections and restarts.
* Every change follows ``OUTBOUND`` or ``INBOUND``: (stage, input) ->
  (next stage, what to do). A pair missing from the table is a protocol
  error: ``RemoteProtocolError`` when the client caused it,
  ``LocalProtocolError`` when we did.
* Outbound (server -> client): packet ids are 1..65535, never two in flight
  at once, allocated round-robin. At most the client's Receive Maximum
  QoS 1/2 PUBLISHes are unacknowledged. QoS 1: PUBLISH -> PUBACK. QoS 2:
  PUBLISH -> PUBREC -> (we send PUBREL) -> PUBCOMP; a PUBREC with a failure
  code ends the flow. On reconnect, ``redeliveries()`` lists, in original
  order, the PUBLISHes to resend with DUP and the PUBRELs to resend.
* Inbound (client -> server): at most our Receive Maximum QoS 1/2 messages
  are unacknowledged (0x93 Receive Maximum exceeded). QoS 2 is exactly
  once: the packet id is remembered from delivery until PUBREL, so a
  PUBLISH re-sent with DUP in between is answered but not delivered again.
  ``reset_unacked()`` (on reconnect) forgets messages we never acknowledged:
  the client will resend them. Call ``pubrec`` only once the message is
  stored, and persist the state with it.
* Batch-through (a read's acks): ``InboundFlows.acknowledge``,
  ``InboundFlows.release`` and ``OutboundFlows.on_acks`` make the same
  changes as ``puback``/``pubrec``, ``on_pubrel`` and ``on_ack`` one after
  the other, in order, and raise the same errors at the same packet, but
  build no event per packet: they answer in plain ack words (``PUBREC_WORD
  | packet id`` etc., see ``plain_acks``), which ``plain_acks`` turns into
  the 4-byte packets a success ack without properties is in 3.1.1 and 5.0.
"""

from __future__ import annotations

import struct
from enum import Enum, IntEnum
from types import MappingProxyType
from typing import Any, NamedTuple

from ._events import ClientAcks, PubAck, PubComp, PubRec, PubRel, Publish
from ._reasons import LocalProtocolError, ReasonCode, RemoteProtocolError

try:
    import cython
except ImportError:  # a pure-Python install: nothing here is compiled
    from . import _cython_shadow as cython

__all__ = [
    "OutboundStage", "OutboundFlows", "OutboundAck", "Redelivery", "OUTBOUND",
    "InboundStage", "InboundAction", "InboundFlows", "INBOUND", "plain_acks", "ack_event",
    "PUBACK_WORD", "PUBREC_WORD", "PUBREL_WORD", "PUBCOMP_WORD", "NOT_FOUND", "NO_REF", "WORD_PID",
]

_PROTO = ReasonCode.PROTOCOL_ERROR
_NOT_FOUND = ReasonCode.PACKET_IDENTIFIER_NOT_FOUND
# The flows of a table with none yet (most sessions, most of the time): read-only
# and shared, replaced by a dict of its own at the first flow.
_NO_FLOWS: Any = MappingProxyType({})
_EMPTY: dict = {}  # _NO_FLOWS as a dict, for the typed loops (never written: nothing to find or remove in it)

# Ack words: a packet id (bits 0-15), the ack's type (bits 16-17) and flags.
# A word without flags is a success ack without properties: 4 bytes on the
# wire in 3.1.1 and 5.0 (first byte, remaining length 2, packet id).
WORD_PID = 0xFFFF
PUBACK_WORD = 0  # a QoS 1 message's PUBACK is its bare packet id
PUBREC_WORD = 1 << 16
PUBREL_WORD = 2 << 16
PUBCOMP_WORD = 3 << 16
NOT_FOUND = 1 << 18  # reason code 0x92 Packet Identifier not found (an event, not plain)
NO_REF = 1 << 19  # OutboundFlows.on_acks: a PUBREL for a flow whose ref is None
_WORD_TYPES = (PubAck, PubRec, PubRel, PubComp)
_WORD_HEADS = (0x4002, 0x5002, 0x6202, 0x7002)  # first byte and remaining length of each
_HEAD_WORDS = tuple(h << 16 for h in _WORD_HEADS)  # ... as the high half of a 4-byte ack
_WORD_OF_ACK = {PubAck: PUBACK_WORD, PubRec: PUBREC_WORD, PubComp: PUBCOMP_WORD}  # a client ack's word type
_PACKED: dict = {}  # number of acks -> struct packing that many 4-byte acks


# (the ack loops below run once per message: compiled, their ints are C ints)
@cython.locals(w=cython.long)
def plain_acks(words) -> bytes:
    """The packets of ``words`` (success acks, no flags but ``NO_REF``) in one bytes:
    each is 4 bytes, first byte and remaining length then packet id, so one
    pack of 32-bit words makes the lot."""
    n = len(words)
    pack = _PACKED.get(n)
    if pack is None:
        pack = struct.Struct(f"!{n}I").pack
        if len(_PACKED) < 256:
            _PACKED[n] = pack
    heads = _HEAD_WORDS
    acks = []
    for w in words:
        acks.append(heads[(w >> 16) & 3] | (w & 0xFFFF))
    return pack(*acks)


def ack_event(word: int):
    """The event of one ack word (for the general path: a flag, a state check)."""
    cls = _WORD_TYPES[(word >> 16) & 3]
    if word & NOT_FOUND:
        return cls(packet_id=word & 0xFFFF, reason_code=_NOT_FOUND)
    return cls(packet_id=word & 0xFFFF)


class OutboundStage(IntEnum):
    """Where a server-to-client QoS 1/2 message is in its flow."""

    DONE = 0  # not in the table any more
    AWAIT_PUBACK = 1
    AWAIT_PUBREC = 2
    AWAIT_PUBCOMP = 3


O = OutboundStage
# (stage, ack type, ack reason < 0x80) -> (next stage, send PUBREL?)
OUTBOUND: dict[tuple[OutboundStage, type, bool], tuple[OutboundStage, bool]] = {
    (O.AWAIT_PUBACK, PubAck, True): (O.DONE, False),
    (O.AWAIT_PUBACK, PubAck, False): (O.DONE, False),
    (O.AWAIT_PUBREC, PubRec, True): (O.AWAIT_PUBCOMP, True),
    (O.AWAIT_PUBREC, PubRec, False): (O.DONE, False),
    (O.AWAIT_PUBCOMP, PubRec, True): (O.AWAIT_PUBCOMP, True),  # our PUBREL was lost
    (O.AWAIT_PUBCOMP, PubComp, True): (O.DONE, False),
    (O.AWAIT_PUBCOMP, PubComp, False): (O.DONE, False),
}


_DONE, _AWAIT_PUBACK, _AWAIT_PUBREC, _AWAIT_PUBCOMP = O.DONE, O.AWAIT_PUBACK, O.AWAIT_PUBREC, O.AWAIT_PUBCOMP


class OutboundAck(NamedTuple):
    packet_id: int
    ref: Any  # the caller's ref, or None for an unknown packet id
    completed: bool  # the flow is over; the id is free again
    reply: PubRel | None  # send this, if not None


class Redelivery(NamedTuple):
    packet_id: int
    qos: int
    ref: Any
    release: bool  # True: resend PubRel(packet_id); False: resend the PUBLISH with dup=True


class OutboundFlows:
    """Server-to-client flows of one session: packet ids, window, redelivery."""

    __slots__ = ("receive_maximum", "_next", "_flows")

    def __init__(self, receive_maximum: int = 65535) -> None:
        self.receive_maximum = receive_maximum
        self._next = 1
        self._flows: dict[int, list] = _NO_FLOWS  # packet id -> [qos, stage, ref]

    def __len__(self) -> int:
        return len(self._flows)

    def available(self) -> int:
        """How many more QoS 1/2 PUBLISHes the client's window allows now."""
        return max(0, self.receive_maximum - len(self._flows))

    @cython.locals(packet_id=cython.long)
    def start(self, qos: int, ref: Any = None) -> int:
        """Allocate a packet id for a QoS 1/2 PUBLISH about to be sent."""
        if qos != 1 and qos != 2:
            raise LocalProtocolError(f"QoS {qos!r} has no flow")
        flows = self._flows
        if len(flows) >= self.receive_maximum:
            raise LocalProtocolError("the client's Receive Maximum is reached")
        if flows is _NO_FLOWS:
            flows = self._flows = {}
        packet_id = self._next
        while packet_id in flows:
            packet_id = packet_id % 65535 + 1
        self._next = packet_id % 65535 + 1
        flows[packet_id] = [qos, _AWAIT_PUBACK if qos == 1 else _AWAIT_PUBREC, ref]
        return packet_id

    def on_ack(self, event) -> OutboundAck:
        """Apply a PubAck, PubRec or PubComp received from the client."""
        packet_id = event.packet_id
        flow = self._flows.get(packet_id)
        if flow is None:
            # Late or duplicate ack (e.g. across a reconnect). A PUBREC still
            # needs its PUBREL so the client can finish.
            reply = PubRel(packet_id=packet_id, reason_code=_NOT_FOUND) if type(event) is PubRec else None
            return OutboundAck(packet_id, None, False, reply)
        step = OUTBOUND.get((flow[1], type(event), event.reason_code < 0x80))
        if step is None:
            raise RemoteProtocolError(
                f"{type(event).__name__} for packet {packet_id} in stage {O(flow[1]).name}", _PROTO
            )
        stage, release = step
        if stage is O.DONE:
            del self._flows[packet_id]
        else:
            flow[1] = stage
        return OutboundAck(packet_id, flow[2], stage is O.DONE, PubRel(packet_id=packet_id) if release else None)

    def on_acks(self, events, replies: list, done: list, received: list) -> None:
        """``on_ack`` for each of ``events`` (a run of a read's PubAck, PubRec
        and PubComp, and ``ClientAcks``: runs of them as ack words), in
        order, with no result object per ack. Appends to ``replies`` the
        PUBRELs to send, in order, as words: ``PUBREL_WORD | pid``, ``|
        NO_REF`` when the flow's ref is None, ``| NOT_FOUND`` for an unknown
        packet id; to ``done`` the packet ids whose flow is over; to
        ``received`` those past PUBREC whose ref is an int (a queue entry). A
        protocol error is raised at the ack that causes it, the lists holding
        what the acks before it did."""
        for event in events:
            cls = event.__class__
            if cls is ClientAcks:
                self.on_ack_words(event.words, replies, done, received)
                continue
            word = _WORD_OF_ACK.get(cls)
            if word is not None and event.reason_code < 0x80:  # a success ack: its word's steps
                self.on_ack_words((word | event.packet_id,), replies, done, received)
                continue
            packet_id = event.packet_id
            flow = self._flows.get(packet_id)
            if flow is None:
                if cls is PubRec:
                    replies.append(PUBREL_WORD | NOT_FOUND | packet_id)
                continue
            step = OUTBOUND.get((flow[1], cls, event.reason_code < 0x80))
            if step is None:
                raise RemoteProtocolError(f"{cls.__name__} for packet {packet_id} in stage {O(flow[1]).name}", _PROTO)
            stage, release = step
            if stage is _DONE:
                del self._flows[packet_id]
                done.append(packet_id)
            else:
                flow[1] = stage
                if cls is PubRec and type(flow[2]) is int:
                    received.append(packet_id)
            if release:
                replies.append(PUBREL_WORD | packet_id if flow[2] is not None else PUBREL_WORD | NO_REF | packet_id)

    @cython.locals(word=cython.long, packet_id=cython.long, kind=cython.long, flows=dict)
    def on_ack_words(self, words, replies: list, done: list, received: list) -> None:
        """``on_acks`` for success acks given as ack words (``PUBACK_WORD |
        pid``, ``PUBREC_WORD | ...``, ``PUBCOMP_WORD | ...``): the steps of
        ``OUTBOUND`` with a reason code below 0x80, taken without a key
        tuple or a lookup."""
        flows = self._flows if type(self._flows) is dict else _EMPTY
        for word in words:
            packet_id = word & 0xFFFF
            kind = word >> 16  # 0 PUBACK, 1 PUBREC, 3 PUBCOMP
            flow = flows.get(packet_id)
            if flow is None:
                if kind == 1:
                    replies.append(PUBREL_WORD | NOT_FOUND | packet_id)
                continue
            at = flow[1]
            if at is _AWAIT_PUBACK and kind == 0 or at is _AWAIT_PUBCOMP and kind == 3:
                del flows[packet_id]
                done.append(packet_id)
            elif kind == 1 and (at is _AWAIT_PUBREC or at is _AWAIT_PUBCOMP):  # (AWAIT_PUBCOMP: our PUBREL was lost)
                flow[1] = _AWAIT_PUBCOMP
                ref = flow[2]
                if type(ref) is int:
                    received.append(packet_id)
                replies.append(PUBREL_WORD | packet_id if ref is not None else PUBREL_WORD | NO_REF | packet_id)
            else:
                cls = _WORD_TYPES[kind & 3]
                raise RemoteProtocolError(f"{cls.__name__} for packet {packet_id} in stage {O(at).name}", _PROTO)

    def redeliveries(self) -> list[Redelivery]:
        """What to resend after the client reconnects, in original order."""
        return [
            Redelivery(pid, qos, ref, stage == O.AWAIT_PUBCOMP) for pid, (qos, stage, ref) in self._flows.items()
        ]

    def to_state(self) -> dict:
        flows = [[pid, qos, int(stage), ref] for pid, (qos, stage, ref) in self._flows.items()]
        return {"receive_maximum": self.receive_maximum, "next": self._next, "flows": flows}

    @classmethod
    def from_state(cls, state: dict) -> "OutboundFlows":
        self = cls(state["receive_maximum"])
        self._next = state["next"]
        self._flows = {pid: [qos, O(stage), ref] for pid, qos, stage, ref in state["flows"]} or _NO_FLOWS
        return self


class InboundStage(IntEnum):
    """Where a client-to-server QoS 1/2 packet id is in its flow."""

    ABSENT = 0
    QOS1_UNACKED = 1  # delivered, PUBACK not sent yet
    QOS2_UNACKED = 2  # delivered, PUBREC not sent yet
    QOS2_RECEIVED = 3  # PUBREC sent, waiting for PUBREL


class InboundAction(Enum):
    """What the server does with a PUBLISH received from the client."""

    DELIVER = "deliver"  # new message: deliver it, then puback()/pubrec()
    ACK_PENDING = "ack pending"  # duplicate; the ack of the first copy will answer it
    RESEND_PUBREC = "resend pubrec"  # duplicate of an acknowledged QoS 2 message
    NONE = "none"


I = InboundStage
A = InboundAction
# Inputs: "publish1"/"publish2"/"pubrel" come from the client;
# "puback"/"pubrec"/"pubrec_failed" are our acknowledgements.
INBOUND: dict[tuple[InboundStage, str], tuple[InboundStage, InboundAction]] = {
    (I.ABSENT, "publish1"): (I.QOS1_UNACKED, A.DELIVER),
    (I.QOS1_UNACKED, "publish1"): (I.QOS1_UNACKED, A.ACK_PENDING),
    (I.QOS1_UNACKED, "puback"): (I.ABSENT, A.NONE),
    (I.ABSENT, "publish2"): (I.QOS2_UNACKED, A.DELIVER),
    (I.QOS2_UNACKED, "publish2"): (I.QOS2_UNACKED, A.ACK_PENDING),
    (I.QOS2_UNACKED, "pubrec"): (I.QOS2_RECEIVED, A.NONE),
    (I.QOS2_UNACKED, "pubrec_failed"): (I.ABSENT, A.NONE),
    (I.QOS2_RECEIVED, "publish2"): (I.QOS2_RECEIVED, A.RESEND_PUBREC),
    (I.QOS2_RECEIVED, "pubrel"): (I.ABSENT, A.NONE),
    (I.ABSENT, "pubrel"): (I.ABSENT, A.NONE),  # answered with PUBCOMP 0x92
}
_CLIENT_INPUTS = frozenset({"publish1", "publish2", "pubrel"})
_QOS1_UNACKED, _QOS2_UNACKED, _QOS2_RECEIVED = I.QOS1_UNACKED, I.QOS2_UNACKED, I.QOS2_RECEIVED
_DELIVER = A.DELIVER  # (an enum member read through its class is a lookup per read)


class InboundFlows:
    """Client-to-server flows of one session: window and QoS 2 exactly once."""

    __slots__ = ("receive_maximum", "_flows")

    def __init__(self, receive_maximum: int = 65535) -> None:
        self.receive_maximum = receive_maximum
        self._flows: dict[int, InboundStage] = _NO_FLOWS

    def __len__(self) -> int:
        return len(self._flows)

    def stage(self, packet_id: int) -> InboundStage:
        return self._flows.get(packet_id, I.ABSENT)

    def packet_ids(self, *stages: InboundStage) -> list[int]:
        """The packet ids now in one of ``stages``, in arrival order."""
        return [pid for pid, st in self._flows.items() if st in stages]

    def _step(self, packet_id: int, what: str) -> InboundAction:
        stage = self._flows.get(packet_id, I.ABSENT)
        step = INBOUND.get((stage, what))
        if step is None:
            msg = f"{what} for packet {packet_id} in stage {stage.name}"
            if what in _CLIENT_INPUTS:
                raise RemoteProtocolError(msg, _PROTO)
            raise LocalProtocolError(msg)
        new, action = step
        if new is I.ABSENT:
            if stage is not I.ABSENT:
                del self._flows[packet_id]
        else:
            if stage is I.ABSENT and len(self._flows) >= self.receive_maximum:
                raise RemoteProtocolError("Receive Maximum exceeded", ReasonCode.RECEIVE_MAXIMUM_EXCEEDED)
            if self._flows is _NO_FLOWS:
                self._flows = {}
            self._flows[packet_id] = new
        return action

    def on_publish(self, event: Publish) -> InboundAction:
        """What to do with a PUBLISH received from the client."""
        qos = event.qos
        if not qos:
            return A.DELIVER
        packet_id = event.packet_id
        flows = self._flows
        if packet_id not in flows and len(flows) < self.receive_maximum:
            # INBOUND's (ABSENT, "publish1"/"publish2"), without a key tuple and a lookup
            if flows is _NO_FLOWS:
                flows = self._flows = {}
            flows[packet_id] = _QOS1_UNACKED if qos == 1 else _QOS2_UNACKED
            return _DELIVER
        return self._step(packet_id, "publish1" if qos == 1 else "publish2")

    def puback(self, packet_id: int, reason_code: int = ReasonCode.SUCCESS, **props) -> PubAck:
        """Finish a QoS 1 message (after it is stored); returns the PubAck to send."""
        self._step(packet_id, "puback")
        return PubAck(packet_id=packet_id, reason_code=reason_code, **props)

    @cython.locals(word=cython.long, pid=cython.long, flows=dict)
    def acknowledge(self, words) -> None:
        """``puback(pid)`` for each ``PUBACK_WORD | pid`` and ``pubrec(pid)`` for each ``PUBREC_WORD |
        pid`` of ``words``, with success: a read's stored messages, acknowledged in one call."""
        flows = self._flows if type(self._flows) is dict else _EMPTY
        unacked1, unacked2, received = I.QOS1_UNACKED, I.QOS2_UNACKED, I.QOS2_RECEIVED
        for word in words:
            pid = word & 0xFFFF
            stage = flows.get(pid)
            if word >> 16 == 0:
                if stage is not unacked1:
                    raise LocalProtocolError(f"puback for packet {pid} in stage {self.stage(pid).name}")
                del flows[pid]
            elif stage is unacked2:
                flows[pid] = received
            elif stage is not received:  # received already: the PUBREC of RESEND_PUBREC
                raise LocalProtocolError(f"pubrec for packet {pid} in stage {self.stage(pid).name}")

    def pubrec(self, packet_id: int, reason_code: int = ReasonCode.SUCCESS, **props) -> PubRec:
        """Acknowledge a QoS 2 message (after it is stored); returns the PubRec to send.

        Also use it to build the PubRec for ``RESEND_PUBREC``.
        """
        if self._flows.get(packet_id) is not I.QOS2_RECEIVED:
            self._step(packet_id, "pubrec" if reason_code < 0x80 else "pubrec_failed")
        return PubRec(packet_id=packet_id, reason_code=reason_code, **props)

    def on_pubrel(self, event: PubRel) -> PubComp:
        """Release a QoS 2 packet id; returns the PubComp to send."""
        known = event.packet_id in self._flows
        self._step(event.packet_id, "pubrel")
        return PubComp(packet_id=event.packet_id, reason_code=ReasonCode.SUCCESS if known else _NOT_FOUND)

    def release(self, events, comps: list) -> None:
        """``on_pubrel`` for each of ``events`` (a run of a read's PubRel), in
        order, with no PubComp built: appends ``PUBCOMP_WORD | pid`` to
        ``comps``, ``| NOT_FOUND`` for a packet id not awaiting PUBREL. A
        protocol error is raised at the PUBREL that causes it, ``comps``
        holding the answers to those before it."""
        flows = self._flows
        received = I.QOS2_RECEIVED
        for event in events:
            pid = event.packet_id
            stage = flows.get(pid)
            if stage is received:
                del flows[pid]
                comps.append(PUBCOMP_WORD | pid)
            elif stage is None:
                comps.append(PUBCOMP_WORD | NOT_FOUND | pid)
            else:
                raise RemoteProtocolError(f"pubrel for packet {pid} in stage {stage.name}", _PROTO)

    def reset_unacked(self) -> None:
        """On a new connection: forget messages we never acknowledged."""
        if self._flows:
            self._flows = {pid: st for pid, st in self._flows.items() if st is I.QOS2_RECEIVED} or _NO_FLOWS

    def to_state(self) -> dict:
        return {"receive_maximum": self.receive_maximum, "flows": [[p, int(s)] for p, s in self._flows.items()]}

    @classmethod
    def from_state(cls, state: dict) -> "InboundFlows":
        self = cls(state["receive_maximum"])
        self._flows = {pid: I(stage) for pid, stage in state["flows"]} or _NO_FLOWS
        return self
