"""CommitLogFlusher over a real store: a SYNC_FLUSH waiter is woken by the
commit-log fsync that covers its entry, and never waits for a periodic full
flush (queues, index, checkpoint) that runs meanwhile (issue 13, S2)."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import trio

from core.broker import BrokerRole, FlushDiskType, open_broker
from core.broker.flush import CommitLogFlusher
from core.store import MessageStore
from core.store.message import Message

from .conftest import small_store_config


async def test_a_waiter_is_woken_by_its_log_fsync_while_a_full_flush_runs(tmp_path):
    store = MessageStore(small_store_config(tmp_path / "store"))
    store.start()
    entered, release = threading.Event(), threading.Event()

    def held_full_flush() -> int:
        # The real full flush, held at its start as a slow disk would hold it.
        entered.set()
        release.wait(30)
        return store.flush()

    flusher = CommitLogFlusher(held_full_flush, lambda: store.max_phy_offset, interval_s=0.01,
                               flushed=store.flushed_offset, flush_log=store.flush_log)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(flusher.run)
            put = store.append(Message("T", b"acked only once durable"))
            assert put.ok and store.flushed_offset < put.end_offset
            assert await trio.to_thread.run_sync(entered.wait, 10), "the periodic full flush did not start"
            assert flusher.flush_started is not None  # page_cache_busy_ms sees the running flush
            with trio.fail_after(5):  # before the change it waited for the held full flush
                durable = await flusher.wait_flushed(put.end_offset, trio.current_time() + 10)
            # the ack's condition: the log is on disk past the entry, by the log's own fsync
            assert durable and store.flushed_offset >= put.end_offset
            assert flusher.flushed_offset >= put.end_offset and not release.is_set()
            assert flusher.flush_count == 1
            release.set()
            nursery.cancel_scope.cancel()  # waits for the full flush's thread to return
    finally:
        release.set()
        store.shutdown()


async def test_waiters_of_one_flush_are_woken_together(tmp_path):
    """Entries appended by several senders before a flush: one fsync wakes them all."""
    store = MessageStore(small_store_config(tmp_path / "store"))
    store.start()
    flusher = CommitLogFlusher(store.flush, lambda: store.max_phy_offset, interval_s=60.0,
                               flushed=store.flushed_offset, flush_log=store.flush_log)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(flusher.run)
            ends = [store.append(Message("T", b"m%d" % i)).end_offset for i in range(8)]
            woken = []

            async def waiter(end: int) -> None:
                assert await flusher.wait_flushed(end, trio.current_time() + 10)
                assert store.flushed_offset >= end  # never before its fsync
                woken.append(end)

            async with trio.open_nursery() as waiters:
                for end in ends:
                    waiters.start_soon(waiter, end)
            assert sorted(woken) == ends and flusher.flush_count == 1
            nursery.cancel_scope.cancel()
    finally:
        store.shutdown()


async def test_a_failed_flush_fails_its_task_and_wakes_nobody(tmp_path):
    """The flush's exception comes back to the flusher's task (the broker's
    nursery fails loudly) and no waiter hears "durable"."""
    store = MessageStore(small_store_config(tmp_path / "store"))
    store.start()

    def broken() -> int:
        raise OSError(5, "Input/output error")

    flusher = CommitLogFlusher(broken, lambda: store.max_phy_offset, interval_s=None,
                               flushed=store.flushed_offset)
    end = store.append(Message("T", b"never durable")).end_offset
    woken = []
    try:
        with pytest.RaisesGroup(pytest.RaisesExc(OSError, match="Input/output"), flatten_subgroups=True):
            async with trio.open_nursery() as nursery:
                await nursery.start(flusher.run)

                async def waiter() -> None:
                    woken.append(await flusher.wait_flushed(end, trio.current_time() + 10))

                nursery.start_soon(waiter)
        assert woken == [] and flusher.flushed_offset < end
    finally:
        store.shutdown()


async def test_async_flush_syncs_the_log_on_its_own_period_and_the_rest_on_theirs(tmp_path):
    """ASYNC_FLUSH (no waiters): a flush every ``log_interval_s``, the full one
    (queues, index, checkpoint: a page of the index's slot table per message)
    once every ``interval_s``, the log's alone the other times
    (flushIntervalCommitLog 0.5 s and flushIntervalConsumeQueue 1 s by
    default, as in RocketMQ); nothing when nothing was written."""
    store = MessageStore(small_store_config(tmp_path / "store"))
    store.start()
    calls = {"log": 0, "full": 0}

    def counted(kind, fn):
        def flush() -> int:
            calls[kind] += 1
            return fn()
        return flush

    async def flushed_by(log_interval_s: float | None, interval_s: float, expected: dict) -> dict:
        calls.update(log=0, full=0)
        flusher = CommitLogFlusher(counted("full", store.flush), lambda: store.max_phy_offset, interval_s=interval_s,
                                   flushed=store.flushed_offset, flush_log=counted("log", store.flush_log),
                                   log_interval_s=log_interval_s)
        async with trio.open_nursery() as nursery:
            await nursery.start(flusher.run)
            end = store.append(Message("T", b"flushed by a period")).end_offset
            with trio.fail_after(10):
                while calls != expected or flusher.flushed_offset < end:  # counted as it starts
                    await trio.sleep(0.01)
            assert store.flushed_offset >= end
            await trio.sleep(0.3)  # several periods of the short one: nothing new written, no flush
            nursery.cancel_scope.cancel()
        return dict(calls)

    try:
        expected = {"log": 1, "full": 0}
        assert await flushed_by(0.05, 600, expected) == expected
        # one period in two is the full flush's: the log's first, then queues, index and checkpoint
        expected = {"log": 1, "full": 1}
        assert await flushed_by(0.05, 0.1, expected) == expected
        expected = {"log": 0, "full": 1}
        assert await flushed_by(None, 0.05, expected) == expected
    finally:
        store.shutdown()


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SYNC_MASTER"])
async def test_an_async_flush_broker_flushes_its_log_on_flush_interval_commit_log(broker_config, store_config, role):
    """ASYNC_FLUSH in either master role (a SYNC_MASTER's sends wait for the
    slave, not for the disk): the log is flushed every flushIntervalCommitLog,
    whatever flushIntervalConsumeQueue says."""
    cfg = dataclasses.replace(broker_config, broker_role=BrokerRole[role], flush_disk_type=FlushDiskType.ASYNC_FLUSH,
                              flush_interval_commit_log=50, flush_interval_consume_queue=10**9, listen_port=0)
    async with open_broker(cfg, store_config) as broker:
        await broker.send(Message(topic="T", body=b"flushed within 50 ms or so"))
        end = broker.store.max_phy_offset
        with trio.fail_after(10):  # the full flush's period is out of reach
            while broker.store.flushed_offset < end:
                await trio.sleep(0.01)
