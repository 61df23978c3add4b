"""A slave copies its master's tables (4.x SlaveSynchronize): `core.ha.metadata.SlaveMetadataSync`.

Real parts only: a name server and two brokers with their remoting roles on
127.0.0.1 port 0 (one brokerName, ids 0 and 1, the second a SLAVE), data in
tmp_path; the slave learns its master from the name server's REGISTER_BROKER
answer (`BrokerRegistrar.master_addr`). Shown: topics, groups, consumer
offsets and delay offsets made on the master reach the slave after one round
and after `run` rounds, are written in the slave's config dir, and replace the
slave's own; a master that stops is retried (logged once) and followed again
when it is back; a master answering bodies that do not parse never ends `run`.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

import trio

from core.broker import Broker, BrokerConfig, BrokerRole, TopicConfig
from core.ha.metadata import SlaveMetadataSync
from core.namesrv import run_namesrv
from core.processors import BrokerRemoting
from core.remoting import RemotingCommand, RequestCode, ResponseCode, decode_json
from core.remoting.client import RemotingClient
from core.remoting.server import RemotingServer
from core.store import StoreConfig
from core.store.message import encode_properties

LEVELS = " ".join(["100ms", "200ms"] + ["300ms"] * 16)


@dataclass
class Node:
    broker: Broker
    remoting: BrokerRemoting
    addr: str
    stop: trio.CancelScope


@asynccontextmanager
async def node(root: Path, namesrv: str, *, role: BrokerRole = BrokerRole.ASYNC_MASTER, broker_id: int = 0,
               port: int = 0) -> AsyncIterator[Node]:
    cfg = BrokerConfig(listen_port=0, broker_ip1="127.0.0.1", broker_name="broker-ha", broker_id=broker_id,
                       broker_role=role)
    broker = Broker(cfg, StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1024 * 1024))
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        remoting = BrokerRemoting(broker, "127.0.0.1", port, [namesrv], delay_levels=LEVELS, register_period=60)
        bound = await nursery.start(remoting.run)
        yield Node(broker, remoting, f"127.0.0.1:{bound}", nursery.cancel_scope)
        nursery.cancel_scope.cancel()


def req(code: RequestCode, **ext) -> RemotingCommand:
    return RemotingCommand.request(code, ext)


def send_req(topic: str, body: bytes, queue_id: int, props: dict[str, str]) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": queue_id, "sysFlag": 0, "bornTimestamp": 1, "flag": 0,
        "properties": encode_properties({"UNIQ_KEY": "%032d" % queue_id, **props}), "reconsumeTimes": 0,
        "unitMode": "false"}, body)


async def make_master_tables(c: RemotingClient, master: Node) -> None:
    """A topic, two committed offsets, a group with its own settings and a delivered delayed message."""
    r = await c.invoke(master.addr, req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic="Orders", readQueueNums=3,
                                        writeQueueNums=3, perm=6, topicFilterType="SINGLE_TAG"))
    assert r.code == ResponseCode.SUCCESS
    for qid, off in ((0, 7), (2, 11)):
        r = await c.invoke(master.addr, req(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="GA", topic="Orders",
                                            queueId=qid, commitOffset=off))
        assert r.code == ResponseCode.SUCCESS
    master.broker.groups.update("GA", which_broker_when_consume_slowly=1, retry_max_times=3)
    r = await c.invoke(master.addr, send_req("Orders", b"later", 0, {"DELAY": "1"}))
    assert r.code == ResponseCode.SUCCESS
    with trio.fail_after(5):  # delivered by the master's delay-level service: its level 1 offset moves to 1
        while master.remoting.schedule.offsets.get(1) != 1:
            await trio.sleep(0.01)


async def wait_master_known(slave: Node) -> str:
    registrar = slave.remoting.registrar
    with trio.fail_after(5):
        while registrar.master_addr is None:
            await registrar.master_changed().wait()
    return registrar.master_addr


def sync_for(slave: Node, client: RemotingClient, **kw) -> SlaveMetadataSync:
    return SlaveMetadataSync(slave.broker, client, lambda: slave.remoting.registrar.master_addr,
                             schedule=slave.remoting.schedule, **kw)


def read(path: Path):
    return decode_json(path.read_bytes())


async def test_one_round_takes_every_table_and_writes_it(nursery, tmp_path):
    ns = f"127.0.0.1:{await nursery.start(run_namesrv, '127.0.0.1', 0)}"
    async with node(tmp_path / "m", ns) as master, \
            node(tmp_path / "s", ns, role=BrokerRole.SLAVE, broker_id=1) as slave:
        c = RemotingClient(nursery)
        # the name server told the slave where its master is (remoting and HA addresses)
        assert await wait_master_known(slave) == master.addr
        assert slave.remoting.registrar.ha_server_addr == master.remoting.registrar.identity.ha_server_addr
        await slave.broker.update_topic(TopicConfig("SlaveOnly", 2, 2))  # made before the first sync: replaced
        await make_master_tables(c, master)

        sync = sync_for(slave, c)
        assert await sync.sync_once()

        s, m = slave.broker, master.broker
        assert s.topics.all() == m.topics.all() and "SlaveOnly" not in s.topics
        assert s.topics.data_version == m.topics.data_version
        assert s.get_topic("Orders") == TopicConfig("Orders", 3, 3, 6)
        assert s.query_offset("GA", "Orders", 0) == 7 and s.query_offset("GA", "Orders", 2) == 11
        assert s.groups.get("GA") == m.groups.get("GA") and s.groups.get("GA").retry_max_times == 3
        assert s.groups.data_version == m.groups.data_version
        assert slave.remoting.schedule.offsets == {1: 1}
        # over the wire too: the slave answers the master's offset
        r = await c.invoke(slave.addr, req(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="GA", topic="Orders", queueId=2))
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "11"
        # persisted in the slave's config dir
        conf = s.config_dir
        assert "Orders" in read(conf / "topics.json")["topicConfigTable"]
        assert "SlaveOnly" not in read(conf / "topics.json")["topicConfigTable"]
        assert read(conf / "consumerOffset.json")["offsetTable"]["Orders@GA"] == {"0": 7, "2": 11}
        assert read(conf / "subscriptionGroup.json")["subscriptionGroupTable"]["GA"]["retryMaxTimes"] == 3
        assert read(conf / "delayOffset.json") == {"offsetTable": {1: 1}}

        # a second round with nothing new changes nothing, and still counts as a good round
        before = (conf / "topics.json").stat().st_mtime_ns
        assert await sync.sync_once()
        assert (conf / "topics.json").stat().st_mtime_ns == before
        assert sync.rounds == 2 and sync.failed_rounds == 0


async def test_an_offset_committed_to_the_slave_alone_is_kept(nursery, tmp_path):
    """4.x putAll: a topic@group the master does not have stays on the slave (its consumer
    committed there while the master was away); the ones the master has are the master's."""
    ns = f"127.0.0.1:{await nursery.start(run_namesrv, '127.0.0.1', 0)}"
    async with node(tmp_path / "m", ns) as master, \
            node(tmp_path / "s", ns, role=BrokerRole.SLAVE, broker_id=1) as slave:
        c = RemotingClient(nursery)
        await wait_master_known(slave)
        await make_master_tables(c, master)
        for group, off in (("GA", 99), ("GB", 5)):
            r = await c.invoke(slave.addr, req(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup=group, topic="Orders",
                                               queueId=0, commitOffset=off))
            assert r.code == ResponseCode.SUCCESS
        assert await sync_for(slave, c).sync_once()
        assert slave.broker.query_offset("GA", "Orders", 0) == 7  # the master's
        assert slave.broker.query_offset("GB", "Orders", 0) == 5  # the slave's own


async def test_run_follows_the_master_and_outlives_its_outage(nursery, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="mqgate.ha.metadata")
    ns = f"127.0.0.1:{await nursery.start(run_namesrv, '127.0.0.1', 0)}"
    async with node(tmp_path / "s", ns, role=BrokerRole.SLAVE, broker_id=1) as slave:
        c = RemotingClient(nursery)
        sync = sync_for(slave, c, interval_s=0.05, timeout_s=1.0, wake=slave.remoting.registrar.master_changed)
        heard = []
        slave.remoting.registrar.on_master = lambda addr, ha: heard.append((addr, ha))
        await nursery.start(sync.run)  # before any master: rounds are skipped
        assert slave.remoting.registrar.master_addr is None and sync.rounds == sync.failed_rounds == 0
        async with node(tmp_path / "m", ns) as master:
            port = int(master.addr.rsplit(":", 1)[1])
            slave.remoting.registrar.trigger()  # register now: the name server's answer names the master
            await make_master_tables(c, master)
            with trio.fail_after(5):
                while slave.broker.query_offset("GA", "Orders", 2) != 11 or slave.remoting.schedule.offsets != {1: 1}:
                    await trio.sleep(0.02)
            assert heard == [(master.addr, master.remoting.registrar.identity.ha_server_addr)]
            await master.broker.update_topic(TopicConfig("Later", 1, 1))
            with trio.fail_after(5):
                while "Later" not in slave.broker.topics:
                    await trio.sleep(0.02)
        # the master is gone: rounds fail, the loop goes on, one warning for the whole outage
        failed = sync.failed_rounds
        with trio.fail_after(5):
            while sync.failed_rounds < failed + 5:
                await trio.sleep(0.02)
        down = [r for r in caplog.records if "does not answer" in r.getMessage()]
        assert len(down) == 1 and down[0].levelno == logging.WARNING
        assert sync.status()["masterReachable"] is False
        # back on the same port and data: followed again, logged once
        rounds = sync.rounds
        async with node(tmp_path / "m", ns, port=port) as master:
            await master.broker.update_topic(TopicConfig("AfterRestart", 1, 1))
            with trio.fail_after(5):
                while "AfterRestart" not in slave.broker.topics or sync.rounds <= rounds:
                    await trio.sleep(0.02)
        assert len([r for r in caplog.records if "answers again" in r.getMessage()]) == 1
        assert len([r for r in caplog.records if "does not answer" in r.getMessage()]) in (1, 2)  # 2: the stop just now
        assert "AfterRestart" in read(slave.broker.config_dir / "topics.json")["topicConfigTable"]


async def test_bodies_that_do_not_parse_leave_the_tables_and_the_loop_alone(nursery, tmp_path, caplog):
    """A peer at the master's address that answers every table request with junk."""
    ns = f"127.0.0.1:{await nursery.start(run_namesrv, '127.0.0.1', 0)}"

    async def junk(channel, request):
        bodies = {RequestCode.GET_ALL_TOPIC_CONFIG: b'{"topicConfigTable": {"X": {"no": "name"}}}',
                  RequestCode.GET_ALL_CONSUMER_OFFSET: b"not json",
                  RequestCode.GET_ALL_DELAY_OFFSET: b'{"offsetTable": {"a": "b"}}',
                  RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: b'{"subscriptionGroupTable": [1, 2]}'}
        return request.make_response(ResponseCode.SUCCESS, body=bodies[request.code])

    server = RemotingServer({code: junk for code in (RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_ALL_CONSUMER_OFFSET,
                                                     RequestCode.GET_ALL_DELAY_OFFSET,
                                                     RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)})
    port = await nursery.start(server.serve, "127.0.0.1", 0)
    async with node(tmp_path / "s", ns, role=BrokerRole.SLAVE, broker_id=1) as slave:
        c = RemotingClient(nursery)
        await slave.broker.update_topic(TopicConfig("Mine", 1, 1))
        slave.broker.commit_offset("G", "Mine", 0, 3)
        topics = slave.broker.topics.all()
        sync = SlaveMetadataSync(slave.broker, c, lambda: f"127.0.0.1:{port}", schedule=slave.remoting.schedule,
                                 interval_s=0.02)
        assert not await sync.sync_once()
        await nursery.start(sync.run)
        with trio.fail_after(5):
            while sync.failed_rounds < 5:
                await trio.sleep(0.02)
        assert slave.broker.topics.all() == topics
        assert slave.broker.query_offset("G", "Mine", 0) == 3
        assert slave.remoting.schedule.offsets == {}
        assert any("unusable" in r.getMessage() for r in caplog.records)



async def test_a_stale_delay_offset_file_is_replaced_even_by_an_empty_table(nursery, tmp_path):
    """The slave's delayOffset.json from an earlier life as a master must not survive the first round."""
    ns = f"127.0.0.1:{await nursery.start(run_namesrv, '127.0.0.1', 0)}"
    (tmp_path / "s" / "config").mkdir(parents=True)
    (tmp_path / "s" / "config" / "delayOffset.json").write_text('{"offsetTable":{3:9}}')
    async with node(tmp_path / "m", ns), node(tmp_path / "s", ns, role=BrokerRole.SLAVE, broker_id=1) as slave:
        await wait_master_known(slave)
        assert await sync_for(slave, RemotingClient(nursery)).sync_once()
        assert read(slave.broker.config_dir / "delayOffset.json") == {"offsetTable": {}}


async def test_the_first_round_takes_tables_whose_version_matches_by_chance(nursery, tmp_path):
    """A version is (ms, counter): the slave's own change and the master's can share one
    (seen in CI: both brokers made the same system topics, then one topic each in the same
    millisecond). The first round takes the master's tables anyway."""
    ns = f"127.0.0.1:{await nursery.start(run_namesrv, '127.0.0.1', 0)}"
    async with node(tmp_path / "m", ns) as master, \
            node(tmp_path / "s", ns, role=BrokerRole.SLAVE, broker_id=1) as slave:
        c = RemotingClient(nursery)
        await wait_master_known(slave)
        await slave.broker.update_topic(TopicConfig("SlaveOnly", 2, 2))
        slave.broker.groups.update("SlaveGroup", retry_max_times=1)
        await make_master_tables(c, master)
        slave.broker.topics.data_version = master.broker.topics.data_version
        slave.broker.groups.data_version = master.broker.groups.data_version
        assert await sync_for(slave, c).sync_once()
        assert slave.broker.topics.all() == master.broker.topics.all()
        assert slave.broker.groups.get("SlaveGroup") is None and slave.broker.groups.get("GA") is not None
