"""Lifecycle: clean shutdown marker, parked pulls released at shutdown, retention, hooks, topic events."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from core.broker import Broker, PullStatus, TopicConfig, open_broker
from core.store.message import Message


async def test_clean_shutdown_and_nursery_start(broker_config, store_config):
    async with trio.open_nursery() as nursery:
        broker = await nursery.start(Broker(broker_config, store_config).run)
        assert broker.running and (Path(store_config.store_path_root_dir) / "abort").exists()
        assert (await broker.send(Message("T", b"x"))).ok
        nursery.cancel_scope.cancel()
    assert not broker.running
    assert not (Path(store_config.store_path_root_dir) / "abort").exists()
    async with open_broker(broker_config, store_config) as broker:
        assert broker.recovery_report is not None and not broker.recovery_report.abnormal_exit
        assert [m.body for m in (await broker.pull("G", "T", 0, 0)).messages()] == [b"x"]


async def test_parked_pull_is_released_at_shutdown(broker_config, store_config):
    results = []
    async with trio.open_nursery() as outer:
        async with open_broker(broker_config, store_config) as broker:
            await broker.update_topic(TopicConfig("T", 1, 1))

            async def puller():
                results.append(await broker.pull("G", "T", 0, 0, 32, "*", suspend_timeout_ms=3_600_000))

            outer.start_soon(puller)
            await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(5):
            await trio.testing.wait_all_tasks_blocked()
    assert [r.status for r in results] in ([PullStatus.PULL_NOT_FOUND], [PullStatus.SERVICE_NOT_AVAILABLE])
    assert not broker.running
    assert (await broker.send(Message("T", b"late"))).status.code == 14


async def test_retention_moves_queue_minimum(broker_config, store_config):
    config = broker_config.replace(file_reserved_time=0, delete_when="*")
    async with open_broker(config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        body = b"x" * 10_000
        for _ in range(250):  # about 2.5 segments of 1 MiB
            assert (await broker.send(Message("T", body))).ok
        deleted = await broker.delete_expired()
        assert deleted
        low = broker.min_offset("T", 0)
        assert 0 < low < 250
        moved = await broker.pull("G", "T", 0, 0)
        assert moved.status is PullStatus.PULL_OFFSET_MOVED and moved.next_begin_offset == low
        got = await broker.pull("G", "T", 0, low)
        assert got.status is PullStatus.FOUND
        assert await broker.offset_by_time("T", 0, 0) == low


async def test_put_hook_rewrites_before_encoding(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("Real", 1, 1))
        await broker.ensure_topic("Parked", 2)

        def park(msg: Message) -> None:
            if msg.properties.get("DELAY"):
                msg.properties["REAL_TOPIC"], msg.properties["REAL_QID"] = msg.topic, str(msg.queue_id)
                msg.topic, msg.queue_id = "Parked", 1

        broker.add_put_hook(park)
        r = await broker.send(Message("Real", b"later", properties={"DELAY": "3"}))
        assert r.ok and (r.topic, r.queue_id) == ("Real", 0)
        [m] = (await broker.pull("G", "Parked", 1, 0)).messages()
        assert m.properties["REAL_TOPIC"] == "Real" and m.body == b"later"
        assert broker.max_offset("Real", 0) == 0


async def test_topic_changes_bump_data_version_and_notify(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        seen = []
        broker.topics.add_listener(lambda name, cfg: seen.append(name))
        v0 = broker.topics.data_version
        assert (await broker.send(Message("Fresh", b"x"))).ok
        assert seen == ["Fresh"] and broker.topics.data_version.counter == v0.counter + 1
        assert (await broker.send(Message("Fresh", b"y"))).ok
        assert seen == ["Fresh"]


async def test_session_queue_by_multi_dispatch_and_delete_queue(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        woke = []

        async def waiter():
            woke.append(await broker.wait_for_messages("%LMQ%s1", 0, 0))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            r = await broker.send(Message("a", b"x", properties={"INNER_MULTI_DISPATCH": "%LMQ%s1,%LMQ%s2"}))
            assert r.ok
        assert woke == [True]
        for name in ("%LMQ%s1", "%LMQ%s2"):
            got = await broker.pull("G", name, 0, 0)
            [m] = got.messages()
            assert m.topic == "a" and m.msg_id == r.msg_id and got.queue_offsets == [0]
        raw = await broker.read_queue("%LMQ%s2", 0, 0)
        assert raw.entries == got.entries
        await broker.delete_queue("%LMQ%s1", 0)
        assert broker.max_offset("%LMQ%s1", 0) == 0
        assert broker.max_offset("%LMQ%s2", 0) == 1


async def test_running_broker_keeps_the_gil_switch_interval_short(broker_config, store_config):
    import sys

    from core.broker.broker import GIL_SWITCH_INTERVAL_S

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # CPython's default
    try:
        async with open_broker(broker_config, store_config):
            assert sys.getswitchinterval() <= GIL_SWITCH_INTERVAL_S
    finally:
        sys.setswitchinterval(old)
