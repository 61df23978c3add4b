"""Master/slave replication with real processes (RocketMQ 4.x HA, issue 12):
a name server, a master and slaves as `mqgate broker` subprocesses on
loopback, sends through our client over the remoting protocol.

Shown here: the slave's commit log is the master's byte for byte; a slave
catches up from zero and from the middle after a restart; SYNC_MASTER answers
SLAVE_NOT_AVAILABLE without a slave and FLUSH_SLAVE_TIMEOUT when the slave
stops answering; a manual failover (`mqgate admin ha promote`) and the old
master rejoining as a slave after cutting the tail the new master never had.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import zlib

import pytest
import trio

from core.client import Message, SendStatus, open_producer
from ha_group import Group, commitlog_bytes, ha_status, stored_messages, wait_in_sync, wait_until


@pytest.fixture
def group(tmp_path):
    g = Group(tmp_path)
    g.start_namesrv()
    yield g
    g.stop_all()


async def send(group: Group, n: int, tag: str, topic: str = "TopicHA") -> list:
    async with open_producer(group.namesrv, "PG_HA", send_timeout=4.0, retry_times=0) as p:
        return [await p.send(Message(topic, f"{tag}-{i}".encode(), keys=[f"{tag}-{i}"])) for i in range(n)]


def admin(group: Group, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", "admin", "--namesrv", group.namesrv, *args],
                          capture_output=True, text=True, timeout=60)


def bodies(data_dir) -> list[bytes]:
    return [m.body for m in stored_messages(data_dir) if m.topic == "TopicHA"]


async def test_a_sync_master_and_its_slave_hold_the_same_bytes(group):
    master = group.broker("m", 0, "SYNC_MASTER").start()
    slave = group.broker("s", 1, "SLAVE").start()  # learns the master's HA address from the name server
    # a SYNC_MASTER answers SLAVE_NOT_AVAILABLE until its slave has linked (tested below): wait for it
    await wait_until(lambda: _has_slave(group.addr("m")), 20, "the slave links")
    results = await send(group, 300, "a")
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    end = await wait_in_sync(group.addr("m"), group.addr("s"))
    st = await ha_status(group.addr("m"))
    assert st["role"] == "SYNC_MASTER" and st["slaves"][0]["ackedOffset"] == end and st["slaves"][0]["inSync"]
    slave.stop()
    master.stop()
    m, s = commitlog_bytes(master.data_dir), commitlog_bytes(slave.data_dir)
    assert m == s and zlib.crc32(m) == zlib.crc32(s)
    assert len(bodies(slave.data_dir)) == 300


async def test_a_slave_catches_up_from_zero_and_from_the_middle(group):
    master = group.broker("m", 0, "ASYNC_MASTER").start()
    await send(group, 200, "first")
    slave = group.broker("s", 1, "SLAVE", haMasterAddress=group.ha_addr("m")).start()
    first_end = await wait_in_sync(group.addr("m"), group.addr("s"))
    slave.stop()
    await send(group, 200, "second")
    slave.start()
    assert f"log 0..{first_end}," in slave.output().split("store at")[-1]  # it resumed, not restarted from 0
    await wait_in_sync(group.addr("m"), group.addr("s"))
    slave.stop()
    master.stop()
    assert commitlog_bytes(master.data_dir) == commitlog_bytes(slave.data_dir)
    assert len(bodies(slave.data_dir)) == 400


async def test_sync_master_without_a_fit_slave_says_so(group):
    group.broker("m", 0, "SYNC_MASTER", slaveTimeout=500).start()
    assert {r.status for r in await send(group, 3, "alone")} == {SendStatus.SLAVE_NOT_AVAILABLE}
    slave = group.broker("s", 1, "SLAVE").start()
    await wait_until(lambda: _has_slave(group.addr("m")), 20, "the slave links")
    assert {r.status for r in await send(group, 3, "paired")} == {SendStatus.SEND_OK}
    slave.proc.send_signal(signal.SIGSTOP)  # connected, but it acknowledges nothing
    try:
        started = trio.current_time()
        (r,) = await send(group, 1, "stopped")
        assert r.status is SendStatus.FLUSH_SLAVE_TIMEOUT
        assert 0.4 <= trio.current_time() - started < 3.0  # slaveTimeout, not syncFlushTimeout
    finally:
        slave.proc.send_signal(signal.SIGCONT)
    assert {r.status for r in await send(group, 3, "again")} == {SendStatus.SEND_OK}


async def _has_slave(addr: str) -> bool:
    st = await ha_status(addr)
    return bool(st and st["slaves"] and st["slaves"][0]["ackedOffset"] >= 0)


async def test_manual_failover_and_the_old_master_rejoins_after_cutting_its_tail(group):
    a = group.broker("a", 0, "ASYNC_MASTER").start()
    b = group.broker("b", 1, "SLAVE").start()
    await send(group, 100, "both")
    await wait_in_sync(group.addr("a"), group.addr("b"))
    b.stop()  # (a SIGSTOPped slave would still get the frames: the kernel buffers them for it)
    only_a = await send(group, 50, "only-a")  # acknowledged by an ASYNC master, never replicated
    assert {r.status for r in only_a} == {SendStatus.SEND_OK}
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    b.start()  # a slave of a master that is gone
    await wait_until(lambda: _no_master(group), 20, "the name server drops the dead master")
    out = admin(group, "ha", "promote", "g1", "1")
    assert out.returncode == 0, out.stderr
    assert "is master, epoch 2" in out.stdout
    await wait_until(lambda: _role(group.addr("b"), "SYNC_MASTER"), 20, "b is master")  # haPromoteRole's default
    a.start()  # configured as master, it finds b leading a newer epoch and follows it
    assert "is master of g1 at epoch 2" in a.output()
    await wait_until(lambda: _role(group.addr("a"), "SLAVE"), 20, "a is a slave")
    await wait_until(lambda: _in_sync_slave(group.addr("b")), 20, "a cut its tail and follows b")
    results = await send(group, 30, "after")
    assert {r.status for r in results} == {SendStatus.SEND_OK}  # SYNC_MASTER b has its slave again
    await wait_in_sync(group.addr("a"), group.addr("b"))
    assert "commit log cut at offset" in a.output()
    status = admin(group, "ha", "status")
    assert "SYNC_MASTER" in status.stdout and "SLAVE" in status.stdout
    a.stop()
    b.stop()
    assert commitlog_bytes(a.data_dir) == commitlog_bytes(b.data_dir)
    got = bodies(a.data_dir)
    assert len(got) == 130 and not any(x.startswith(b"only-a") for x in got)


async def _no_master(group: Group) -> bool:
    out = admin(group, "--json", "ha", "status")
    return out.returncode == 0 and '"master": null' in out.stdout


async def _role(addr: str, role: str) -> bool:
    st = await ha_status(addr)
    return bool(st and st["role"] == role)


async def _in_sync_slave(addr: str) -> bool:
    st = await ha_status(addr)
    return bool(st and any(x["inSync"] for x in st["slaves"]))


async def test_a_consumer_goes_on_reading_from_the_slave_while_the_master_is_down(group):
    from core.client import open_pull_consumer

    master = group.broker("m", 0, "ASYNC_MASTER").start()
    group.broker("s", 1, "SLAVE").start()
    await send(group, 100, "r")
    await wait_in_sync(group.addr("m"), group.addr("s"))
    first: list[bytes] = []
    async with open_pull_consumer(group.namesrv, "G_SLAVE", {"TopicHA": "*"}) as c:
        while len(first) < 40:
            first += [m.body for m in await c.poll(5)]
        await c.commit()
    # the slave copies the group's offsets from its master (every 10 s, 4.x SlaveSynchronize)
    await wait_until(lambda: _slave_has_offsets(group, "G_SLAVE", len(first)), 30, "offsets reach the slave")
    master.stop()
    rest: list[bytes] = []
    async with open_pull_consumer(group.namesrv, "G_SLAVE", {"TopicHA": "*"}) as c:
        with trio.move_on_after(20):
            while len(first) + len(rest) < 100:
                rest += [m.body for m in await c.poll(2)]
        await c.commit()  # a slave takes the commits while its master is down
    assert sorted(first + rest) == sorted(f"r-{i}".encode() for i in range(100))
    assert await _slave_has_offsets(group, "G_SLAVE", 100)


async def _slave_has_offsets(group: Group, consumer_group: str, total: int) -> bool:
    from core.client.api import open_client_api
    from core.client.model import MessageQueue

    async with open_client_api(3.0) as api:
        got = 0
        for qid in range(8):
            off = await api.query_consumer_offset(group.addr("s"), consumer_group, MessageQueue("TopicHA", "g1", qid))
            got += max(off or 0, 0)
    return got >= total
