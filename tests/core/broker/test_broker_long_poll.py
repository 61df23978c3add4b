"""Long polling and queue wake-ups: exact wake on dispatch, deadline on an idle queue."""

from __future__ import annotations

import trio
import trio.testing

from core.broker import PullStatus, TopicConfig, open_broker
from core.store.message import Message


async def test_parked_pull_returns_as_soon_as_a_send_lands(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 2, 2))
        results = []

        async def puller():
            results.append(await broker.pull("G", "T", 1, 0, 32, "*", suspend_timeout_ms=15_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(puller)
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
            await broker.send(Message("T", b"other queue"), queue_id=0)
            await trio.testing.wait_all_tasks_blocked()
            assert results == []  # a message on another queue does not answer it
            with trio.fail_after(5):  # real clock: far below the 15 s suspend
                await broker.send(Message("T", b"mine"), queue_id=1)
        [got] = results
        assert got.status is PullStatus.FOUND
        assert [m.body for m in got.messages()] == [b"mine"] and got.next_begin_offset == 1


async def test_parked_pull_times_out_with_not_found(autojump_clock, broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        start = trio.current_time()
        got = await broker.pull("G", "T", 0, 0, 32, "*", suspend_timeout_ms=15_000)
        assert got.status is PullStatus.PULL_NOT_FOUND and got.next_begin_offset == 0
        assert trio.current_time() - start >= 15


async def test_short_polling_when_long_polling_is_off(autojump_clock, broker_config, store_config):
    config = broker_config.replace(long_polling_enable=False, short_polling_time_mills=1000)
    async with open_broker(config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        start = trio.current_time()
        got = await broker.pull("G", "T", 0, 0, 32, "*", suspend_timeout_ms=15_000)
        assert got.status is PullStatus.PULL_NOT_FOUND
        assert 1 <= trio.current_time() - start < 15


async def test_parked_tag_pull_skips_unmatched_messages(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        results = []

        async def puller():
            results.append(await broker.pull("G", "T", 0, 0, 32, "TagA", suspend_timeout_ms=15_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(puller)
            await trio.testing.wait_all_tasks_blocked()
            await broker.send(Message("T", b"b", properties={"TAGS": "TagB"}))
            await trio.testing.wait_all_tasks_blocked()
            assert results == []  # woken, found no match, parked again past it
            with trio.fail_after(5):
                await broker.send(Message("T", b"a", properties={"TAGS": "TagA"}))
        [got] = results
        assert got.status is PullStatus.FOUND
        assert [m.body for m in got.messages()] == [b"a"] and got.next_begin_offset == 2


async def test_wait_for_messages_and_dispatch_listener(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        seen = []
        broker.add_dispatch_listener(lambda topic, qid, nxt: seen.append((topic, qid, nxt)))
        deadline = trio.current_time() + 10
        woke = []

        async def waiter():
            woke.append(await broker.wait_for_messages("T", 0, 0, deadline))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert woke == []
            await broker.send(Message("T", b"x"))
        assert woke == [True] and seen == [("T", 0, 1)]
        assert await broker.wait_for_messages("T", 0, 0, deadline)  # already there
        assert not await broker.wait_for_messages("T", 0, 1, trio.current_time())  # deadline passed
