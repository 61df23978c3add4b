"""SQL92 consumers of our client over real sockets: exactly the matching messages, long polling, refusals."""

import pytest
import trio
from cluster import broker_cluster, create_routed_topic

from core.client import (
    ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, MessageSelector, MQBrokerError, open_producer,
    open_pull_consumer, open_push_consumer,
)
from core.client.api import open_client_api
from core.client.model import MessageQueue
from core.remoting import ResponseCode
from core.store import decode_messages

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET

READINGS = [("lab", "31"), ("lab", "12"), ("farm", "40"), ("lab", None), ("lab", "warm"), ("lab", "30")]
WANTED = "temp >= 30 AND site = 'lab'"


@pytest.fixture
async def sql_cluster(nursery, tmp_path):
    async with broker_cluster(nursery, tmp_path, enable_property_filter=True) as c:
        yield c


def _leaf(exc: BaseException) -> BaseException:
    """The one error inside the nurseries' exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def _send_readings(namesrv: str, topic: str) -> None:
    async with open_producer(namesrv, "PG-sql") as producer:
        for i, (site, temp) in enumerate(READINGS):
            props = {"site": site} | ({"temp": temp} if temp is not None else {})
            await producer.send(Message(topic, f"r{i}", properties=props))


async def test_pull_consumer_by_sql_gets_exactly_the_matching_messages(sql_cluster):
    await _send_readings(sql_cluster.namesrv, "Readings")
    async with open_pull_consumer(sql_cluster.namesrv, "GSql", {"Readings": MessageSelector.by_sql(WANTED)},
                                  consume_from=FIRST) as consumer:
        got = []
        with trio.fail_after(10):
            while len(got) < 2:
                got.extend(await consumer.poll(1.0))
        assert sorted(m.body for m in got) == [b"r0", b"r5"]
        assert await consumer.poll(0.3) == []


async def test_push_consumer_by_sql_and_its_heartbeat_subscription(sql_cluster):
    await _send_readings(sql_cluster.namesrv, "ReadingsPush")
    got, done = [], trio.Event()

    def listener(msgs, ctx):
        got.extend(m.body for m in msgs)
        if len(got) >= 2:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async with open_push_consumer(sql_cluster.namesrv, "GSqlPush", {"ReadingsPush": MessageSelector.by_sql(WANTED)},
                                  listener, consume_from=FIRST):
        with trio.fail_after(10):
            await done.wait()
        sub = sql_cluster.remoting.ctx.clients.subscription("GSqlPush", "ReadingsPush")
        assert (sub.expression_type, sub.sub_string, sub.tags) == ("SQL92", WANTED, ())
    assert sorted(got) == [b"r0", b"r5"]


async def test_long_poll_over_the_wire_waits_for_a_matching_message(sql_cluster):
    async with open_client_api() as api:
        await api.create_topic(sql_cluster.broker_addr, "Live", 1, 1)
        mq = MessageQueue("Live", sql_cluster.broker.config.broker_name, 0)
        answer = []

        async def long_pull():
            started = trio.current_time()
            resp = await api.pull(sql_cluster.broker_addr, "GLive", mq, 0, 32, subscription="temp > 30",
                                  expression_type="SQL92", sub_version=0, commit_offset=None, suspend_ms=15_000,
                                  timeout=30)
            answer.append((resp, trio.current_time() - started))

        async with open_producer(sql_cluster.namesrv, "PG-live") as producer, trio.open_nursery() as n:
            n.start_soon(long_pull)
            await trio.sleep(0.3)
            await producer.send(Message("Live", "cool", properties={"temp": "20"}))
            await producer.send(Message("Live", "no temp"))
            await trio.sleep(0.5)
            assert answer == []  # the non-matching messages did not answer the parked pull
            with trio.fail_after(5):  # far below the 15 s suspend
                await producer.send(Message("Live", "hot", properties={"temp": "35"}))
        [(resp, waited)] = answer
        assert resp.code == 0 and resp.next_begin_offset == 3 and 0.8 <= waited < 10
        assert [m.body for m in decode_messages(resp.body)] == [b"hot"]


async def test_consumer_start_is_refused_when_property_filter_is_off(cluster):
    await create_routed_topic(cluster, "TopicOff")
    with pytest.raises(BaseException) as info:
        async with open_pull_consumer(cluster.namesrv, "GOff", {"TopicOff": MessageSelector.by_sql("a > 1")}):
            pass
    error = _leaf(info.value)
    assert isinstance(error, MQBrokerError) and error.code == ResponseCode.SYSTEM_ERROR
    assert error.remark == "The broker does not support consumer to filter message by SQL92"


async def test_pull_with_sql92_is_refused_when_property_filter_is_off(cluster):
    async with open_client_api() as api:
        await api.create_topic(cluster.broker_addr, "TopicOff2", 1, 1)
        mq = MessageQueue("TopicOff2", cluster.broker.config.broker_name, 0)
        with pytest.raises(MQBrokerError) as info:
            await api.pull(cluster.broker_addr, "GOff2", mq, 0, 32, subscription="a > 1", expression_type="SQL92",
                           sub_version=0, commit_offset=None, suspend_ms=0, timeout=5)
    assert info.value.code == ResponseCode.SYSTEM_ERROR
    assert "filter message by SQL92" in info.value.remark


async def test_consumer_start_reports_a_syntax_error_with_its_column(sql_cluster):
    await create_routed_topic(sql_cluster, "TopicBad")
    with pytest.raises(BaseException) as info:
        async with open_pull_consumer(sql_cluster.namesrv, "GBad", {"TopicBad": MessageSelector.by_sql("temp >> 3")}):
            pass
    error = _leaf(info.value)
    assert isinstance(error, MQBrokerError) and error.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "SQL92 syntax error at column 7" in error.remark
