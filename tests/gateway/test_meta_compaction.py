"""Compaction of the gateway's meta records (issue 17): state kept, replay bounded.

Real broker on a temp store, real MQTT clients over TCP. Sessions with
subscriptions, wills, inbound QoS 2 state and retained messages are churned
until history is many times the live state; the gateway compacts; a fresh
replay from the checkpoint gives exactly the state a replay of the whole
queue gives, while reading O(live) records; a restarted gateway restores that
state from the checkpoint. The SIGKILL-mid-compaction case runs a real
process: tests/gateway/test_meta_compaction_kill.py.
"""

from __future__ import annotations

import trio

from .conftest import Client, running_gateway
from core.broker import PERM_READ, PERM_WRITE
from gateway.meta import META_TOPIC
from gateway.meta_log import CHECKPOINT_GROUP, MetaLog
from gateway.mqtt import Publish, PubAck, PubRec, Will

SETTINGS = {"sysInterval": 0, "metaCompactionMinRecords": 60, "metaCompactionRatio": 2.0,
            "metaCompactionBatch": 7}
SESSIONS = 12
RETAINED = 15


async def _wait_for(cond, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not cond():
            await trio.sleep(0.01)


async def _churn(port: int, rounds: int) -> list[Client]:
    """History: every session connects, subscribes, disconnects ``rounds``
    times; retained topics are set again each round (one cleared). Live at
    the end: SESSIONS sessions, RETAINED - 1 retained topics, two connected
    clients with wills, one of them with inbound QoS 2 state."""
    for r in range(rounds):
        for i in range(SESSIONS):
            c, _ = await Client.connect(port, f"s{i}", clean_start=False, session_expiry_interval=3600)
            await c.subscribe(f"t/{i}/#", f"r{r}/+", qos=1 + i % 2)
            await c.disconnect()
        pub, _ = await Client.connect(port, "pub")
        for t in range(RETAINED):
            payload = b"" if (t == 0 and r == rounds - 1) else f"v{r}".encode()
            await pub.publish(f"ret/{t}", payload, qos=1, retain=True)
            await pub.expect(PubAck)
        await pub.disconnect()
    held = []
    for name in ("w1", "w2"):
        c, _ = await Client.connect(port, name, clean_start=False, session_expiry_interval=600,
                                    will=Will(topic=f"wills/{name}", payload=b"gone", will_delay_interval=30))
        held.append(c)
    await held[0].publish("q2/a", b"x", qos=2)  # PUBREC, no PUBREL: "in2" state
    await held[0].expect(PubRec)
    return held


def _restored(gw) -> dict:
    """What a gateway holds of the meta state: sessions with their
    subscriptions, retained topics, will keys."""
    return {"sess": {cid: sorted(s.subs) for cid, s in gw.router.sessions.items()},
            "ret": dict(gw.retained.stored), "will": sorted(gw.wills.keys)}


def _expected(state: dict) -> dict:
    return {"sess": {k: sorted(v["subs"]) for (kind, k), v in state.items() if kind == "sess"},
            "ret": {k: list(v) for (kind, k), v in state.items() if kind == "ret"},
            "will": sorted(k for (kind, k) in state if kind == "will")}


async def test_compaction_keeps_state_and_replay_reads_live_records(tmp_path):
    root = tmp_path / "store"
    async with running_gateway(root, SETTINGS) as (broker, gw, port):
        held = await _churn(port, rounds=8)
        await _wait_for(lambda: gw.meta.compactions >= 1 and not gw.meta.due())
        full, bounded = MetaLog(broker), MetaLog(broker)
        state_full = await full.replay(full=True)
        state = await bounded.replay()
        assert state == state_full
        assert bounded.image == full.image == gw.meta.image
        assert not bounded.last_replay.full
        live = len(state)
        assert full.last_replay.read > 4 * live  # history is many times live state
        assert bounded.last_replay.read <= 2 * live + 60  # O(live): at most a snapshot and what follows
        kinds = {kind for kind, _ in state}
        assert kinds == {"sess", "ret", "will", "in2"}, kinds
        assert len([k for k in state if k[0] == "ret"]) == RETAINED - 1
        for c in held:
            await c.close()
        await _wait_for(lambda: not gw.router.sessions["w1"].conn and not gw.router.sessions["w2"].conn)
    async with running_gateway(root, SETTINGS) as (broker, gw, port):
        replay = gw.meta.last_replay
        assert not replay.full and replay.start > 0
        expected = _expected(await MetaLog(broker).replay(full=True))
        assert _restored(gw) == expected
        assert set(expected["sess"]) == {*(f"s{i}" for i in range(SESSIONS)), "w1", "w2"}
        assert expected["sess"]["s3"] == sorted(f"r{r}/+" for r in range(8)) + ["t/3/#"]
        assert expected["will"] == ["w1", "w2"]
        # A restored session still gets its messages.
        c, ack = await Client.connect(port, "s3", clean_start=False, session_expiry_interval=3600)
        assert ack.session_present
        pub, _ = await Client.connect(port, "pub")
        await pub.publish("t/3/x", b"after", qos=1)
        got = await c.expect(Publish)
        assert got.payload == b"after"


async def test_a_checkpoint_without_its_snapshot_replays_everything(tmp_path):
    """A checkpoint past which no marker names it (a slave behind its synced
    offsets, a partial copy) is ignored: the whole queue replays."""
    root = tmp_path / "store"
    async with running_gateway(root, SETTINGS) as (broker, gw, port):
        c, _ = await Client.connect(port, "only", clean_start=False, session_expiry_interval=3600)
        await c.subscribe("a/#", qos=1)
        await c.disconnect()
        pub, _ = await Client.connect(port, "pub")
        await pub.publish("ret/x", b"kept", qos=1, retain=True)
        await pub.expect(PubAck)
        await broker.ensure_topic(META_TOPIC, 1, PERM_READ | PERM_WRITE)
        end = broker.max_offset(META_TOPIC, 0)
        broker.commit_offset(CHECKPOINT_GROUP, META_TOPIC, 0, end - 1)
        log = MetaLog(broker)
        state = await log.replay()
        assert log.last_replay.full
        assert state == await MetaLog(broker).replay(full=True)
        assert ("sess", "only") in state and ("ret", "ret/x") in state
