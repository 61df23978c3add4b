"""Reads from a slave and ``suggestWhichBrokerId`` (4.x PullMessageProcessor rules).

Real parts only: brokers with their remoting roles on 127.0.0.1 port 0, a
name server, data in tmp_path. Replication is not used: a slave gets its
messages by running once as a master on its own data dir, stopping, and
starting again as SLAVE over the same dir (a real restart). Shown: a slave
serves PULL_MESSAGE, QUERY_MESSAGE, VIEW_MESSAGE_BY_ID and
QUERY_CONSUMER_OFFSET, takes UPDATE_CONSUMER_OFFSET, does not store a pull's
COMMIT_OFFSET, does not correct an offset it cannot serve, and refuses sends
with SERVICE_NOT_AVAILABLE; a master (or slave) with ``slaveReadEnable``
points a pull that is far behind at ``whichBrokerWhenConsumeSlowly`` and
others at the group's ``brokerId``; without it, always at the master (0).
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

import pytest
import trio

from core.broker import Broker, BrokerConfig, BrokerRole
from core.broker.pulling import pulling_from_slave_suggested, suggest_which_broker_id, total_physical_memory
from core.namesrv import run_namesrv
from core.processors import BrokerRemoting
from core.remoting import RemotingCommand, RequestCode, ResponseCode
from core.remoting.client import RemotingClient
from core.store import StoreConfig
from core.store.message import decode_messages, encode_properties

N = 6
BODY = b"x" * 1000  # entries of ~1.1 KB: the slow-pull threshold below lies between one and all of them


@dataclass
class Node:
    broker: Broker
    addr: str


@asynccontextmanager
async def node(root: Path, namesrv: list[str], **config) -> AsyncIterator[Node]:
    cfg = BrokerConfig(listen_port=0, broker_ip1="127.0.0.1", broker_name="broker-ha", **config)
    broker = Broker(cfg, StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1024 * 1024))
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        port = await nursery.start(BrokerRemoting(broker, "127.0.0.1", 0, namesrv, register_period=60).run)
        yield Node(broker, f"127.0.0.1:{port}")
        nursery.cancel_scope.cancel()


def send_req(i: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": "Reads", "defaultTopic": "TBW102", "defaultTopicQueueNums": 1, "queueId": 0,
        "sysFlag": 0, "bornTimestamp": 1, "flag": 0, "reconsumeTimes": 0, "unitMode": "false",
        "properties": encode_properties({"UNIQ_KEY": "%032d" % i, "KEYS": f"k-{i}"})}, BODY + b"%d" % i)


def pull_req(offset: int, *, group: str = "GA", max_nums: int = 32, commit_offset: int | None = None) -> RemotingCommand:
    flag = 0x4 | (0x1 if commit_offset is not None else 0)  # SUBSCRIPTION, COMMIT_OFFSET
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": "Reads", "queueId": 0, "queueOffset": offset, "maxMsgNums": max_nums,
        "sysFlag": flag, "commitOffset": commit_offset or 0, "suspendTimeoutMillis": 0, "subscription": "*",
        "subVersion": 0})


def offset_req(code: RequestCode, group: str = "GA", **ext) -> RemotingCommand:
    return RemotingCommand.request(code, {"consumerGroup": group, "topic": "Reads", "queueId": 0, **ext})


async def seed(c: RemotingClient, root: Path) -> list[str]:
    """Run ``root`` once as a master with N messages; their msgIds. Also shows what a master
    does where the slave below must differ (COMMIT_OFFSET stored, offset corrected)."""
    async with node(root, []) as m:
        ids = []
        for i in range(N):
            r = await c.invoke(m.addr, send_req(i))
            assert r.code == ResponseCode.SUCCESS
            ids.append(r.ext_fields["msgId"])
        r = await c.invoke(m.addr, pull_req(0, group="GM", commit_offset=2))
        assert r.code == ResponseCode.SUCCESS
        assert m.broker.query_offset("GM", "Reads", 0) == 2  # a master stores the pull's commit
        r = await c.invoke(m.addr, pull_req(N + 5))
        assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.ext_fields["nextBeginOffset"] == "0"  # corrected (min is 0)
        q = RemotingCommand.request(RequestCode.QUERY_MESSAGE, {"topic": "Reads", "key": "k-3", "maxNum": 32,
                                                                 "beginTimestamp": 0, "endTimestamp": 2**62})
        with trio.fail_after(5):  # the index is written off the send path; it is flushed at shutdown
            while (await c.invoke(m.addr, q)).code != ResponseCode.SUCCESS:
                await trio.sleep(0.02)
    return ids


@pytest.fixture
async def namesrv(nursery) -> list[str]:
    return [f"127.0.0.1:{await nursery.start(run_namesrv, '127.0.0.1', 0)}"]


async def test_a_slave_serves_reads_and_offsets_and_refuses_sends(nursery, tmp_path, namesrv):
    c = RemotingClient(nursery)
    ids = await seed(c, tmp_path / "s")
    async with node(tmp_path / "m", namesrv), \
            node(tmp_path / "s", namesrv, broker_role=BrokerRole.SLAVE, broker_id=1) as slave:
        a = slave.addr
        r = await c.invoke(a, pull_req(0))
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["suggestWhichBrokerId"] == "0"
        assert [m.body for m in decode_messages(r.body)] == [BODY + b"%d" % i for i in range(N)]
        assert r.ext_fields["nextBeginOffset"] == str(N)

        r = await c.invoke(a, RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
            "topic": "Reads", "key": "k-3", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**62}))
        assert r.code == ResponseCode.SUCCESS and [m.body for m in decode_messages(r.body)] == [BODY + b"3"]

        r = await c.invoke(a, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": int(ids[4][16:], 16)}))
        assert r.code == ResponseCode.SUCCESS and decode_messages(r.body)[0].msg_id == ids[4]

        # offsets: a consumer whose master is gone commits to the slave (4.x)
        r = await c.invoke(a, offset_req(RequestCode.UPDATE_CONSUMER_OFFSET, commitOffset=3))
        assert r.code == ResponseCode.SUCCESS
        r = await c.invoke(a, offset_req(RequestCode.QUERY_CONSUMER_OFFSET))
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "3"
        # ...but a pull's COMMIT_OFFSET flag is not stored on a slave (4.x storeOffsetEnable)
        r = await c.invoke(a, pull_req(3, commit_offset=5))
        assert r.code == ResponseCode.SUCCESS
        r = await c.invoke(a, offset_req(RequestCode.QUERY_CONSUMER_OFFSET))
        assert r.ext_fields["offset"] == "3"

        # an offset past the slave's end is not corrected: the slave may just be behind its master
        r = await c.invoke(a, pull_req(N + 5))
        assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.remark == "OFFSET_OVERFLOW_BADLY"
        assert r.ext_fields["nextBeginOffset"] == str(N + 5) and r.ext_fields["suggestWhichBrokerId"] == "0"

        r = await c.invoke(a, send_req(99))
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert slave.broker.max_offset("Reads", 0) == N


async def test_a_slave_keeps_a_slow_consumer_only_with_slave_read_enable(nursery, tmp_path, namesrv):
    c = RemotingClient(nursery)
    await seed(c, tmp_path / "s")
    async with node(tmp_path / "m", namesrv):
        for enable, expect_slow in ((True, "1"), (False, "0")):
            async with node(tmp_path / "s", namesrv, broker_role=BrokerRole.SLAVE, broker_id=1,
                            slave_read_enable=enable, access_message_in_memory_max_ratio=1) as slave:
                slave.broker.physical_memory = 200_000  # threshold 2000 bytes: behind at offset 0, not at the last
                r = await c.invoke(slave.addr, pull_req(0, max_nums=1))
                assert r.code == ResponseCode.SUCCESS and r.ext_fields["suggestWhichBrokerId"] == expect_slow
                r = await c.invoke(slave.addr, pull_req(N - 1, max_nums=1))
                assert r.code == ResponseCode.SUCCESS and r.ext_fields["suggestWhichBrokerId"] == "0"  # group brokerId


async def test_a_master_points_a_slow_pull_at_the_groups_slave(nursery, tmp_path):
    c = RemotingClient(nursery)
    await seed(c, tmp_path / "m")  # N messages, then restarted with the read keys
    async with node(tmp_path / "m", [], slave_read_enable=True, access_message_in_memory_max_ratio=1) as m:
        m.broker.physical_memory = 200_000  # 1% = 2000 bytes
        r = await c.invoke(m.addr, pull_req(0, max_nums=1))
        assert r.ext_fields["suggestWhichBrokerId"] == "1"  # whichBrokerWhenConsumeSlowly's default
        m.broker.groups.update("GA", which_broker_when_consume_slowly=2)
        r = await c.invoke(m.addr, pull_req(0, max_nums=1))
        assert r.ext_fields["suggestWhichBrokerId"] == "2"
        r = await c.invoke(m.addr, pull_req(N - 1, max_nums=1))
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["suggestWhichBrokerId"] == "0"
        r = await c.invoke(m.addr, pull_req(N))  # nothing read: never slow
        assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext_fields["suggestWhichBrokerId"] == "0"
    async with node(tmp_path / "m", [], access_message_in_memory_max_ratio=1) as m:  # slaveReadEnable off
        m.broker.physical_memory = 200_000
        r = await c.invoke(m.addr, pull_req(0, max_nums=1))
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["suggestWhichBrokerId"] == "0"


def test_the_slow_pull_rule():
    # more than ratio% of RAM of commit log after the entry read: strictly greater, as 4.x
    assert pulling_from_slave_suggested(10_001, 0, 1_000_000, 1)
    assert not pulling_from_slave_suggested(10_000, 0, 1_000_000, 1)
    assert pulling_from_slave_suggested(2**40, 2**40 - 4 * 2**30 - 1, 10 * 2**30, 40)  # 40% of 10 GiB = 4 GiB
    assert not pulling_from_slave_suggested(2**40, 2**40 - 4 * 2**30, 10 * 2**30, 40)
    assert suggest_which_broker_id(False, True, 1, 0) == 0
    assert suggest_which_broker_id(True, True, 1, 0) == 1
    assert suggest_which_broker_id(True, False, 1, 0) == 0
    assert suggest_which_broker_id(True, False, 1, 3) == 3  # not slow: the group's own brokerId
    assert total_physical_memory() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


async def test_a_slave_filters_sql92_pulls_on_its_own_log(nursery, tmp_path, namesrv):
    c = RemotingClient(nursery)
    await seed(c, tmp_path / "s")
    async with node(tmp_path / "s", namesrv, broker_role=BrokerRole.SLAVE, broker_id=1,
                    enable_property_filter=True) as slave:
        req = pull_req(0)
        req.ext_fields.update({"subscription": "KEYS IN ('k-1', 'k-4')", "expressionType": "SQL92"})
        r = await c.invoke(slave.addr, req)
        assert r.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_messages(r.body)] == [BODY + b"1", BODY + b"4"]
        assert r.ext_fields["nextBeginOffset"] == str(N)
