"""SQL92 pulls on a real broker and store: filtering on properties from the log, long polling, refusal."""

from __future__ import annotations

import trio
import trio.testing

from core.broker import PullStatus, TopicConfig, open_broker, parse_subscription
from core.store.message import Message

SQL = "SQL92"


def _msg(body: bytes, **props: str) -> Message:
    return Message("T", body, properties=dict(props))


async def test_sql92_pull_returns_exactly_the_matching_messages(broker_config, store_config):
    config = broker_config.replace(enable_property_filter=True)
    async with open_broker(config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        sent = [_msg(b"hot", temp="31", site="lab", TAGS="A"), _msg(b"cold", temp="12", site="lab"),
                _msg(b"no-temp", site="lab"), _msg(b"nan", temp="warm", site="lab"),
                _msg(b"hot-away", temp="40", site="farm", TAGS="B"), _msg(b"edge", temp="30", site="lab")]
        for m in sent:
            await broker.send(m, queue_id=0)
        got = await broker.pull("G", "T", 0, 0, 32, "temp >= 30 AND site IN ('lab')", expression_type=SQL)
        assert got.status is PullStatus.FOUND
        assert [m.body for m in got.messages()] == [b"hot", b"edge"]
        assert got.next_begin_offset == 6
        got = await broker.pull("G", "T", 0, 0, 32, "TAGS = 'B' OR temp IS NULL", expression_type=SQL)
        assert [m.body for m in got.messages()] == [b"no-temp", b"hot-away"]
        # max_count counts matches, as the store scans past rejected entries
        got = await broker.pull("G", "T", 0, 0, 1, "site = 'lab'", expression_type=SQL)
        assert [m.body for m in got.messages()] == [b"hot"] and got.next_begin_offset == 1
        got = await broker.pull("G", "T", 0, 0, 32, "temp > 100", expression_type=SQL)
        assert got.status is PullStatus.PULL_RETRY_IMMEDIATELY and got.next_begin_offset == 6
        # a prepared SubscriptionData (what a heartbeat-registered subscription gives) works the same
        sub = parse_subscription("T", "temp < 20", SQL)
        got = await broker.pull("G", "T", 0, 0, 32, sub)
        assert [m.body for m in got.messages()] == [b"cold"]


async def test_parked_sql92_pull_waits_for_a_matching_message(broker_config, store_config):
    config = broker_config.replace(enable_property_filter=True)
    async with open_broker(config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        results = []

        async def puller():
            results.append(await broker.pull("G", "T", 0, 0, 32, "temp > 30", suspend_timeout_ms=15_000,
                                             expression_type=SQL))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(puller)
            await trio.testing.wait_all_tasks_blocked()
            await broker.send(_msg(b"cool", temp="20"))
            await broker.send(_msg(b"other"))
            await trio.testing.wait_all_tasks_blocked()
            assert results == []  # woken twice, no match: parked again past them
            with trio.fail_after(5):  # real clock: far below the 15 s suspend
                await broker.send(_msg(b"hot", temp="35"))
        [got] = results
        assert got.status is PullStatus.FOUND
        assert [m.body for m in got.messages()] == [b"hot"] and got.next_begin_offset == 3


async def test_parked_sql92_pull_times_out_when_nothing_matches(autojump_clock, broker_config, store_config):
    config = broker_config.replace(enable_property_filter=True)
    async with open_broker(config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        await broker.send(_msg(b"cool", temp="20"))
        start = trio.current_time()
        got = await broker.pull("G", "T", 0, 0, 32, "temp > 30", suspend_timeout_ms=15_000, expression_type=SQL)
        assert trio.current_time() - start >= 15
        assert got.status is PullStatus.PULL_RETRY_IMMEDIATELY and got.next_begin_offset == 1
        assert got.messages() == []


async def test_sql92_refused_when_property_filter_is_off(broker_config, store_config):
    assert broker_config.enable_property_filter is False  # RocketMQ's default
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        got = await broker.pull("G", "T", 0, 0, 32, "a > 1", expression_type=SQL)
        assert got.status is PullStatus.SYSTEM_ERROR
        assert got.remark == "The broker does not support consumer to filter message by SQL92"


async def test_bad_sql92_is_a_parse_failure_with_its_position(broker_config, store_config):
    config = broker_config.replace(enable_property_filter=True)
    async with open_broker(config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        got = await broker.pull("G", "T", 0, 0, 32, "a > AND b", expression_type=SQL)
        assert got.status is PullStatus.SUBSCRIPTION_PARSE_FAILED
        assert got.remark == ("parse the consumer's subscription failed: SQL92 syntax error at column 5: "
                              "expected a value, a property name or '(', found 'AND'")
