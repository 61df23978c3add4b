"""The broker's flow control under a send flood (RocketMQ's BrokerFastFailure),
with real processes: a name server, a SYNC_MASTER and its slave as
`mqgate broker` subprocesses on loopback.

A SIGSTOPped slave makes every SYNC_MASTER store wait ``slaveTimeout`` for an
acknowledgement that never comes. Many connections flood the master with
pipelined sends; each read's first send waits, and the sends read with it
that waited ``waitTimeMillsInSendQueue`` are answered SYSTEM_BUSY
``[TIMEOUT_CLEAN_QUEUE]`` at once and not stored. Meanwhile another client's
pulls are served, the master's memory stays bounded by connections, not by
what the flood offers, and sends succeed again once the slave is back.
"""

from __future__ import annotations

import signal
import socket
import time

import pytest
import trio

from core.client import Message, SendStatus, open_producer
from core.client.api import open_client_api
from core.client.model import MessageQueue
from core.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode, encode_frame
from ha_group import Group, is_master_with_slave, wait_in_sync, wait_until

TOPIC = "TopicBusy"
SLAVE_TIMEOUT_MS = 800


@pytest.fixture
def group(tmp_path):
    g = Group(tmp_path)
    g.start_namesrv()
    yield g
    g.stop_all()


def _send_frame(i: int, code: int) -> bytes:
    header = {"producerGroup": "PG_FLOOD", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
              "queueId": i % 4, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
              "properties": "", "reconsumeTimes": 0, "unitMode": "false", "batch": "false"}
    return encode_frame(RemotingCommand.request(code, header, b"x" * 512, opaque=i + 1))


def _burst(n: int) -> bytes:
    # SEND_MESSAGE and SEND_BATCH_MESSAGE (batch=false: one message) alternate, so
    # that no two neighbours share a run: each send is stored and waited for alone
    return b"".join(_send_frame(i, RequestCode.SEND_MESSAGE if i % 2 else RequestCode.SEND_BATCH_MESSAGE)
                    for i in range(n))


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


async def _flood_and_read(port: int, burst: bytes, n: int) -> list[RemotingCommand]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(burst)
        decoder = FrameDecoder()
        out: list[RemotingCommand] = []
        with trio.fail_after(30):
            while len(out) < n:
                data = await stream.receive_some(65536)
                assert data, "the broker closed the connection"
                decoder.receive_data(data)
                out.extend(decoder.frames())
        return out


async def _queue_total(addr: str) -> int:
    async with open_client_api() as api:
        return sum([await api.max_offset(addr, MessageQueue(TOPIC, "g1", q)) for q in range(4)])


async def test_a_send_flood_behind_a_stalled_slave_gets_system_busy_and_memory_stays_bounded(group):
    master = group.broker("m", 0, "SYNC_MASTER", slaveTimeout=SLAVE_TIMEOUT_MS, defaultTopicQueueNums=4).start()
    slave = group.broker("s", 1, "SLAVE").start()
    await wait_until(lambda: is_master_with_slave(group, "m"), 20, "the slave links")  # else SLAVE_NOT_AVAILABLE
    async with open_producer(group.namesrv, "PG_OK", send_timeout=5.0) as producer:
        before = [await producer.send(Message(TOPIC, f"before-{i}".encode())) for i in range(8)]
    assert {r.status for r in before} == {SendStatus.SEND_OK}
    await wait_in_sync(group.addr("m"), group.addr("s"))
    port = group.ports["m"]
    stored_before = await _queue_total(group.addr("m"))

    slave.proc.send_signal(signal.SIGSTOP)
    try:
        # 1. Twenty clients each pipeline 30 sends in one write.
        results: list[list[RemotingCommand]] = []

        async def one() -> None:
            results.append(await _flood_and_read(port, _burst(30), 30))

        pulled: list[int] = []

        async def other_client() -> None:  # a consumer on another connection keeps being served
            await trio.sleep(0.2)
            async with open_client_api() as api:
                for q in range(4):
                    pulled.append(await api.max_offset(group.addr("m"), MessageQueue(TOPIC, "g1", q)))

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(one)
            nursery.start_soon(other_client)
        assert len(pulled) == 4
        codes: dict[int, int] = {}
        for responses in results:
            first, rest = responses[0], responses[1:]
            assert first.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (first.code, first.remark)
            for r in rest:
                codes[r.code] = codes.get(r.code, 0) + 1
                assert r.code == ResponseCode.SYSTEM_BUSY, (r.code, r.remark)
                assert r.remark.startswith("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, "
                                           "period in queue: "), r.remark
                waited = int(r.remark.split("period in queue: ")[1].split("ms")[0])
                assert waited >= 200
        assert codes == {ResponseCode.SYSTEM_BUSY: 20 * 29}
        # only the sends that were not turned away are stored (unreplicated, as FLUSH_SLAVE_TIMEOUT says)
        assert await _queue_total(group.addr("m")) == stored_before + 20

        # 2. Memory: 40 connections offer 4 MiB each, far more than one read per connection.
        rss_before = _rss_kib(master.proc.pid)
        burst = _burst(4 * 1024 * 1024 // 700)
        socks = []
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", port))
            s.setblocking(False)
            socks.append(s)
        offered = 0
        deadline = time.monotonic() + 4
        views = [memoryview(burst) for _ in socks]
        while time.monotonic() < deadline and any(views):
            for k, s in enumerate(socks):
                if views[k]:
                    try:
                        sent = s.send(views[k][:1 << 20])
                    except BlockingIOError:
                        continue
                    offered += sent
                    views[k] = views[k][sent:]
            await trio.sleep(0.01)
        rss_peak = _rss_kib(master.proc.pid)
        for s in socks:
            s.close()
        print(f"flood: {offered / 2**20:.0f} MiB offered over 40 connections; "
              f"master RSS {rss_before / 1024:.0f} -> {rss_peak / 1024:.0f} MiB")
        assert offered > 40 * 1024 * 1024  # the flood was real: more than 1 MiB a connection got through
        assert rss_peak - rss_before < 96 * 1024
    finally:
        slave.proc.send_signal(signal.SIGCONT)

    # 3. The slave is back: a Java-like client (ours) sends again; SYSTEM_BUSY is one of the codes it retries.
    async with open_producer(group.namesrv, "PG_OK", send_timeout=5.0) as producer:
        with trio.fail_after(30):
            while (await producer.send(Message(TOPIC, b"after"))).status is not SendStatus.SEND_OK:
                await trio.sleep(0.2)
