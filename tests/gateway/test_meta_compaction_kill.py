"""SIGKILL in the middle of a meta-record compaction (issue 17): nothing is lost.

A real ``mqgate serve`` (SYNC_FLUSH) holds live state: 1,000 retained topics
(each set twice: history), persistent sessions with subscriptions and
queued messages, two wills. Restarted with compaction due and one record per
write (each one fsync), it is SIGKILLed as soon as it says it is compacting,
so the log holds a partial snapshot and no new checkpoint. Restarted again,
then SIGKILLed after a full compaction whose checkpoint the periodic
consumer-offset save persisted, then started from that checkpoint: each time every retained message, session, subscription, queued
message and will is there.
"""

from __future__ import annotations

import re
import signal
import time

import trio

from .conftest import Client
from gateway.meta_log import CHECKPOINT_GROUP
from gateway.mqtt import PubAck, Publish, Will
from serve_process import ServeProcess, free_port

RETAINED = 1000
SESSIONS = 3


def _config(tmp_path, name: str, **mqtt) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text("[broker]\nflushConsumerOffsetInterval = 100\n[mqtt]\n"
                    + "".join(f"{k} = {v}\n" for k, v in mqtt.items()))
    return str(path)


def _start(tmp_path, port: int, config: str) -> ServeProcess:
    return ServeProcess(tmp_path / "d", "--mqtt-port", str(port), "--ws-port", "0", "--namesrv-port", "0",
                        "--broker-port", "0", "--flush", "sync", "--config", config).start()


def _since_start(server: ServeProcess) -> str:
    return server.output()[server._start_at:]


def _wait_output(server: ServeProcess, pattern: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, _since_start(server)):
        assert time.monotonic() < deadline, f"no {pattern!r} in:\n{_since_start(server)[-3000:]}"
        assert server.proc.poll() is None, _since_start(server)[-3000:]
        time.sleep(0.005)


async def _build_state(port: int) -> None:
    for i in range(SESSIONS):
        c, _ = await Client.connect(port, f"s{i}", clean_start=False, session_expiry_interval=3600)
        await c.subscribe(f"q/{i}/#", qos=1)
        await c.disconnect()
    obs, _ = await Client.connect(port, "obs", clean_start=False, session_expiry_interval=3600)
    await obs.subscribe("wills/#", qos=1)
    await obs.disconnect()
    pub, _ = await Client.connect(port, "pub")
    for rnd in (b"old", b"new"):
        for t in range(RETAINED):
            await pub.publish(f"ret/{t}", rnd + b"%d" % t, qos=0, retain=True)
        await pub.publish("sync", b"", qos=1)  # acknowledged once everything before it is stored
        await pub.expect(PubAck)
    for i in range(SESSIONS):
        await pub.publish(f"q/{i}/m", b"queued %d" % i, qos=1)
        await pub.expect(PubAck)
    await pub.disconnect()
    for name in ("w1", "w2"):  # wills that fire 1 s after the clients are gone (kept across restarts)
        c, _ = await Client.connect(port, name, clean_start=False, session_expiry_interval=3600,
                                    will=Will(topic=f"wills/{name}", payload=b"gone", qos=1,
                                              will_delay_interval=1))
        await c.close()  # no DISCONNECT: the will stands


async def _check_state(port: int, wills: set[bytes]) -> set[bytes]:
    """Every retained message with its last value, every session with its
    subscription and queued message (consumed here), and the wills so far."""
    c, _ = await Client.connect(port, "checker")
    await c.subscribe("ret/#", qos=0)
    got = {}
    with trio.fail_after(20):
        while len(got) < RETAINED:
            p = await c.expect(Publish)
            got[p.topic] = p.payload
    assert got == {f"ret/{t}": b"new%d" % t for t in range(RETAINED)}
    await c.disconnect()
    for i in range(SESSIONS):
        s, ack = await Client.connect(port, f"s{i}", clean_start=False, session_expiry_interval=3600)
        assert ack.session_present, i
        p = await s.expect(Publish)
        assert p.payload == b"queued %d" % i
        await s.send(PubAck(packet_id=p.packet_id))
        pub, _ = await Client.connect(port, "pub")
        await pub.publish(f"q/{i}/m", b"queued %d" % i, qos=1)  # queued again for the next check
        await pub.expect(PubAck)
        await pub.disconnect()
        p2 = await s.expect(Publish)  # the subscription is live too (then left unacked, so queued)
        assert p2.payload == b"queued %d" % i
        await s.close()
    obs, ack = await Client.connect(port, "obs", clean_start=False, session_expiry_interval=3600)
    assert ack.session_present
    with trio.move_on_after(3):  # the wills fire 1 s after the start that restored them
        while len(wills) < 2:
            p = await obs.expect(Publish, timeout=3)
            wills.add(p.topic.encode())
            await obs.send(PubAck(packet_id=p.packet_id))
    await obs.disconnect()
    return wills


async def test_sigkill_mid_compaction_keeps_every_record(tmp_path):
    port = free_port()
    no_compaction = _config(tmp_path, "plain", metaCompactionMinRecords=1000000, sysInterval=0)
    slow = _config(tmp_path, "slow", metaCompactionMinRecords=100, metaCompactionRatio=1.2,
                   metaCompactionBatch=1, sysInterval=0)
    quick = _config(tmp_path, "quick", metaCompactionMinRecords=100, metaCompactionRatio=1.2, sysInterval=0)

    server = _start(tmp_path, port, no_compaction)
    try:
        await _build_state(port)
    finally:
        server.kill()

    server = _start(tmp_path, port, slow)  # compaction due at once: one fsync per record
    try:
        _wait_output(server, r"compacting gateway meta records: (\d+) live")
    finally:
        server.proc.send_signal(signal.SIGKILL)
        server.kill()
    out = _since_start(server)
    assert "compacted gateway meta records" not in out, "the kill came after the compaction, not in it"

    server = _start(tmp_path, port, quick)
    try:
        assert "no complete snapshot" not in _since_start(server)
        wills = await _check_state(port, set())
        _wait_output(server, r"compacted gateway meta records")
        offsets = tmp_path / "d" / "config" / "consumerOffset.json"
        deadline = time.monotonic() + 10
        while CHECKPOINT_GROUP not in (offsets.read_text() if offsets.exists() else ""):
            assert time.monotonic() < deadline, "the checkpoint was not persisted"
            time.sleep(0.01)
    finally:
        server.kill()  # SIGKILL, the checkpoint persisted by the periodic consumer-offset save

        server.kill()

    server = _start(tmp_path, port, no_compaction)
    try:
        m = re.search(r"from the checkpoint at offset (\d+): (\d+) records read", _since_start(server))
        assert m and int(m[2]) < RETAINED + 100, _since_start(server)[-2000:]  # O(live), not history
        wills = await _check_state(port, wills)
        assert wills == {b"wills/w1", b"wills/w2"}
    finally:
        server.kill()
