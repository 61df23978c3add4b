"""A gateway's state back from its meta records, before its listeners open.

``restore_gateway(gw)`` is the first step of ``MQTTGateway.run``: it returns
the meta queue offset it read to (where a gateway node's tail goes on).

Rules kept here:

* ``mqgate serve`` (no cluster): the records come from ``MetaLog.replay``
  (from the compaction checkpoint). Offline sessions are back in the router
  with their subscriptions in the trie, inbound QoS 2 state and the
  retained index; a session's expiry and a will's delay count from when its
  client went (the record's ``"gone"``, else now), so a session or will
  that came due while the server was down ends or is published at once. A
  will waits no longer than its session (the specification: a will is
  published when the session ends, if that is sooner).
* A gateway node (``mqgate gateway``): every session in the records is
  another node's (a node's id is new at each start): stubs applied by
  ``ClusterSync.apply``, no timers; the records come from
  ``NodeMetaLog.replay`` (from the cluster's compaction checkpoint).
* A record of the right form whose value is not a shape we write is
  skipped with one line naming it; the rest is restored.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.mapping import now_ms
from gateway.meta import META_TOPIC
from gateway.mqtt import InboundFlows
from gateway.sessions import Session
from gateway.wills import will_from_record

if TYPE_CHECKING:
    from gateway.app import MQTTGateway

log = logging.getLogger("mqgate.gateway")
NEVER = 0xFFFFFFFF  # a session expiry interval that never ends


async def restore_gateway(gw: MQTTGateway) -> int:
    """Rebuild ``gw`` from the meta records; the meta queue offset read to."""
    if gw.cluster is not None:
        state, meta_end = await gw.cluster.meta_log.replay()
        _restore_node(gw, state)
        return meta_end
    state = await gw.meta.replay()
    meta_end = gw.backend.max_offset(META_TOPIC, 0)
    now = now_ms()
    sessions = _restore_sessions(gw, state, now)
    for sess, gone in sessions:
        if sess.expiry != NEVER:
            gw.schedule_expiry(sess, sess.expiry - (now - gone) / 1000)
    _restore_wills(gw, state, now)
    if sessions or gw.retained.stored:
        r = gw.meta.last_replay
        log.info("gateway state restored: %d sessions, %d retained messages (%s at offset %d: %d records "
                 "read in %.3f s)", len(sessions), len(gw.retained.stored),
                 "the whole history" if r.full else "from the checkpoint", r.start, r.read, r.seconds)
    return meta_end


def _restore_sessions(gw: MQTTGateway, state: dict, now: int) -> list[tuple[Session, float]]:
    """The retained index and the offline sessions; (session, when its client went) each."""
    router = gw.router
    lim = gw.settings.limits
    sessions = []
    for (kind, key), value in state.items():
        try:
            if kind == "ret":
                gw.retained.set(key, int(value[0]), int(value[1]))
            elif kind == "sess":
                sess = Session(gw, key, expiry=float(value["exp"]), version=int(value["v"]))
                gone = float(value.get("gone") or now)
                sess.restore(value)
                router.add_session(sess)
                for text, (_flt, opts) in sess.subs.items():
                    router.trie.subscribe(key, text, opts)
                in2 = state.get(("in2", key))
                if in2:
                    sess.inbound = InboundFlows.from_state(
                        {"receive_maximum": lim.max_inflight_messages, "flows": [[int(p), 3] for p in in2]})
                sessions.append((sess, gone))
        except Exception as e:  # noqa: BLE001 - decoded, but not a shape we wrote: the rest still holds
            _unusable(kind, key, e)
    return sessions


def _restore_wills(gw: MQTTGateway, state: dict, now: int) -> None:
    """Each will's timer, for what is left of its delay (sessions restored first)."""
    for (kind, key), value in state.items():
        if kind != "will":
            continue
        try:
            will = will_from_record(value)
            gone = float(value.get("gone") or now)
            delay = (will.will_delay_interval or 0) - (now - gone) / 1000
        except Exception as e:  # noqa: BLE001 - as in _restore_sessions
            _unusable(kind, key, e)
            continue
        gw.wills.keys.add(key)
        sess = gw.router.sessions.get(key)
        if sess is not None:
            delay = min(delay, sess.expiry - (now - gone) / 1000)
        gw.wills.schedule(sess, will, delay, cid=key)


def _restore_node(gw: MQTTGateway, state: dict) -> None:
    """On a node of a cluster: every session in the records is another node's: stubs, no timers."""
    for (kind, key), value in state.items():
        try:
            gw.cluster.apply(kind, key, value)
        except Exception as e:  # noqa: BLE001 - as in _restore_sessions
            _unusable(kind, key, e)
    r = gw.cluster.meta_log.last_replay
    log.info("gateway node %s: %d sessions of the cluster, %d retained messages (%s at offset %d: %d records "
             "read in %.3f s, %d snapshot records older than a later change skipped)", gw.node_id,
             len(gw.router.sessions), len(gw.retained.stored),
             "the whole history" if r.full else "from the checkpoint", r.start, r.read, r.seconds, r.stale)


def _unusable(kind: str, key: str, e: Exception) -> None:
    log.error("gateway meta record %s:%r in %s is not usable (%s: %s); skipped, the others are restored",
              kind, key, META_TOPIC, type(e).__name__, e)
