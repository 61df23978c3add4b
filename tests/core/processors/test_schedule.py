"""Delay levels: parsing, parking, and delivery resumed after a restart from delayOffset.json."""

import pytest
import trio

from core.broker import Broker, BrokerConfig
from core.delay_levels import DEFAULT_DELAY_LEVELS, ScheduleService, parse_delay_levels
from core.store import StoreConfig
from core.store.message import Message


def test_parse_levels():
    levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    assert len(levels) == 18 and levels[:3] == [1000, 5000, 10000] and levels[-1] == 7_200_000
    assert parse_delay_levels("100ms 2m 1d") == [100, 120_000, 86_400_000]
    with pytest.raises(ValueError):
        parse_delay_levels("1x")


async def run_broker(tmp_path, levels, fn):
    broker = Broker(BrokerConfig(listen_port=0), StoreConfig(store_path_root_dir=str(tmp_path / "store")))
    async with trio.open_nursery() as n:
        await n.start(broker.run)
        sched = ScheduleService(broker, levels)
        sched.install()
        await n.start(sched.run)
        try:
            return await fn(broker, sched)
        finally:
            n.cancel_scope.cancel()


async def test_parked_message_survives_restart_and_is_delivered_once(tmp_path):
    async def first(broker, sched):
        r = await broker.send(Message("Real", b"first", properties={"DELAY": "1"}), 2)
        assert r.ok
        r2 = await broker.send(Message("Real", b"second", properties={"DELAY": "30"}), 1)  # clamped to level 2
        assert r2.ok
        assert broker.max_offset("SCHEDULE_TOPIC_XXXX", 0) == 1
        assert broker.max_offset("SCHEDULE_TOPIC_XXXX", 1) == 1
        with trio.fail_after(5):
            while broker.max_offset("Real", 2) < 1 or sched.offsets.get(1) != 1:
                await trio.sleep(0.01)
        return dict(sched.offsets)

    offsets = await run_broker(tmp_path, "200ms 1s", first)
    assert offsets == {1: 1}
    text = (tmp_path / "store" / "config" / "delayOffset.json").read_text()
    assert text.startswith('{"offsetTable":{1:1')

    async def second(broker, sched):
        with trio.fail_after(5):
            while broker.max_offset("Real", 1) < 1:
                await trio.sleep(0.01)
        await trio.sleep(0.3)
        got = (await broker.read_queue("Real", 1, 0, 32)).messages()
        assert [m.body for m in got] == [b"second"]
        assert "DELAY" not in got[0].properties and "REAL_QID" not in got[0].properties
        assert broker.max_offset("Real", 2) == 1  # level 1 was not delivered again
        while sched.offsets.get(2) != 1:
            await trio.sleep(0.01)
        return dict(sched.offsets)

    assert await run_broker(tmp_path, "200ms 1s", second) == {1: 1, 2: 1}
