"""Pop state snapshot records (`core.proxy.pop_log`) in a real broker's store."""

from __future__ import annotations

import pytest

from core.broker import BrokerConfig, open_broker
from core.proxy import pop_log
from core.store import StoreConfig


@pytest.fixture
async def broker(tmp_path):
    store = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=1 << 22)
    async with open_broker(BrokerConfig(), store) as b:
        yield b


def _table(n: int) -> dict:
    return {"seq": n, "savedAt": n, "queues": [{"group": "G", "topic": "T", "queueId": 0, "nextOffset": n,
                                                 "inflight": [[i, 10_000 + i, 1, i] for i in range(n)]}]}


async def test_the_newest_complete_snapshot_wins_and_a_torn_one_is_skipped(broker, monkeypatch):
    assert await pop_log.latest(broker) is None
    assert await pop_log.write(broker, _table(3))
    monkeypatch.setattr(pop_log, "PART_BYTES", 64)  # several parts per snapshot
    big = _table(500)
    assert len(pop_log.snapshot_messages(big)) > 2
    assert await pop_log.write(broker, big)
    assert await pop_log.latest(broker) == big
    # a snapshot whose last part never made it (a crash between parts cannot happen in one
    # append, but a record can be cut by recovery): the one before is used
    torn = pop_log.snapshot_messages(_table(700))
    await broker.send_many(torn[:-1], internal=True)
    assert await pop_log.latest(broker) == big


async def test_a_record_that_is_no_snapshot_part_is_skipped(broker):
    from core.store import Message

    await pop_log.write(broker, _table(1))
    await broker.send(Message(topic=pop_log.POP_TOPIC, body=b"not ours", properties={"POP_PART": "x"}), 0)
    await broker.send(Message(topic=pop_log.POP_TOPIC, body=b"not ours either"), 0)
    assert await pop_log.latest(broker) == _table(1)
