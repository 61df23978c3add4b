"""Acting on the packets of one read of an MQTT connection (its protocol
event loop; gateway/connection.py reads and writes, this decides).

* Consecutive PUBLISHes are stored together (`publishing.publish_batch`);
  any other packet except client acks and PINGREQ first finishes the
  PUBLISHes before it, so a SUBSCRIBE never overtakes an earlier PUBLISH.
* Client acks and PUBRELs are acted on in runs, in arrival order, each
  stretch of one kind in one call and one write (`_acks`); a PUBREL after
  PUBLISHes of the same read finishes them first.
* A PUBCOMP is released only after the inbound QoS 2 state that forgets its
  packet id is durable, and a PUBREL only after the session with that flow
  past PUBREC is (one record write per read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.connecting import accept_connect, on_auth
from gateway.meta import record
from gateway.mqtt import (
    NOT_FOUND, Auth, ClientAcks, Connect, ConnectionClosed, Disconnect, PingReq, PingResp, PubAck, PubComp, PubRec,
    PubRel, Publish, ReasonCode, Subscribe, Unsubscribe,
)
from gateway.publishing import publish_batch
from gateway.subscribing import subscribe, unsubscribe

if TYPE_CHECKING:
    from gateway.connection import Connection

R = ReasonCode
_ACKS_AND_RELEASES = (ClientAcks, PubAck, PubRec, PubComp, PubRel)  # (ClientAcks: a run of plain acks as words)


async def handle(conn: Connection, events: list) -> None:
    batch: list[Publish] = []
    run = None  # client acks and PUBRELs not acted on yet, in arrival order (see _acks)
    sess = conn.session
    for ev in events:
        t = type(ev)
        if t is Publish:
            batch.append(ev)
            continue
        # A PUBREL after PUBLISHes of this read goes the way of other
        # packets below: those are stored and acknowledged first (the
        # inbound flows change in arrival order), then it starts a run.
        if t in _ACKS_AND_RELEASES and not (t is PubRel and (batch or conn.closing)):
            if run is None:
                run = []
            run.append(ev)
            continue
        if run:
            _acks(conn, run)
            run = None
        if t is PingReq:
            conn.send_event(PingResp())
            continue
        if batch:
            await publish_batch(conn, batch)
            batch = []
        if conn.closing:
            return
        if t is PubRel:
            run = [ev]
        elif t is Connect:
            await accept_connect(conn, ev)
            sess = conn.session
            if sess is None:  # refused, or an authentication exchange under way
                return
        elif t is Subscribe:
            await subscribe(conn, ev)
        elif t is Unsubscribe:
            await unsubscribe(conn, ev)
        elif t is Disconnect:
            _disconnect(conn, ev)
            return
        elif t is ConnectionClosed:
            conn.closing = True
            return
        elif t is Auth:
            await on_auth(conn, ev)
            sess = conn.session  # set by the end of a CONNECT's exchange
            if sess is None:
                return
        if conn.closing:  # the packet ended the connection: nothing more of this read is acted on
            return
    if run:
        _acks(conn, run)
    if batch:
        await publish_batch(conn, batch)
    if conn._held or conn._held_rel:
        # One record write for the read: the inbound QoS 2 state before its
        # PUBCOMPs, the session (flows past PUBREC) before its PUBRELs.
        items = []
        if conn._held:
            items.append(conn.in2_record())
        if conn._held_rel:
            items.append(record("sess", sess.client_id, sess.to_record(gone=None)))
        await conn.gw.write_records(items)
        held, conn._held = conn._held, None
        held_rel, conn._held_rel = conn._held_rel, None
        if held:
            conn.send_acks(held, plain=True)
        if held_rel:
            conn.send_acks(held_rel, plain=True)

def _acks(conn: Connection, run: list) -> None:
    """Act on a run of a read's client acks (PUBACK, PUBREC, PUBCOMP, and
    ``ClientAcks``, runs of them as ack words: the session's outbound
    flows) and PUBRELs (its inbound QoS 2 flows), in
    arrival order, a stretch of one kind at a time, each in one call and
    one write. Nothing in it waits: the read's PUBLISHes before it have
    been acted on and those after it will be (see `handle`). A PUBCOMP with
    success of a persistent session waits for the read's ``"in2"`` record."""
    sess = conn.session
    start, n = 0, len(run)
    while start < n:
        inbound = run[start].__class__ is PubRel
        stop = start + 1
        while stop < n and (run[stop].__class__ is PubRel) is inbound:
            stop += 1
        part = run if stop - start == n else run[start:stop]
        start = stop
        if not inbound:
            sess.on_acks(part, conn)
            continue
        comps: list = []
        try:
            sess.inbound.release(part, comps)
        finally:
            if comps and sess.persistent:
                # the packet ids forgotten durably before the PUBCOMPs go out
                held = [w for w in comps if not w & NOT_FOUND]
                if held:
                    if conn._held is None:
                        conn._held = held
                    else:
                        conn._held += held
                    comps = [w for w in comps if w & NOT_FOUND] if len(held) < len(comps) else None
            if comps:
                conn.send_acks(comps)

def _disconnect(conn: Connection, ev: Disconnect) -> None:
    conn.peer_closed = True
    if ev.reason_code != R.DISCONNECT_WITH_WILL_MESSAGE:
        conn.will = None
    if ev.session_expiry_interval is not None and conn.session is not None:
        conn.session.expiry = conn.gw.settings.limits.effective_session_expiry(ev.session_expiry_interval)
    conn.closing = True
