"""SYSTEM_BUSY ``[PC_SYNCHRONIZED]``: while a commit-log flush has run longer
than ``osPageCacheBusyTimeOutMills``, new sends are turned away at once
instead of queueing behind a disk that cannot keep up.

The flush is held up for real: every worker thread of the broker's trio
loop is taken, so the flusher's fsync cannot start (a broker whose disk
stalls looks the same from the send path: a flush that does not finish)."""

import pytest
import trio

from cluster import broker_cluster
from core.broker import FlushDiskType
from core.remoting import ResponseCode
from wire import send_req


@pytest.fixture
async def cluster(nursery, tmp_path):
    async with broker_cluster(nursery, tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                              os_page_cache_busy_time_out_mills=100, sync_flush_timeout=1500) as c:
        yield c


async def test_sends_while_a_flush_is_stuck_get_pc_synchronized_and_are_not_stored(cluster):
    send = lambda body: cluster.client.invoke(cluster.broker_addr, send_req("TopicPC", body, queue_id=0), 10)  # noqa: E731
    assert (await send(b"first")).code == ResponseCode.SUCCESS
    limiter = trio.to_thread.current_default_thread_limiter()
    holders = [object() for _ in range(int(limiter.total_tokens))]
    for h in holders:
        await limiter.acquire_on_behalf_of(h)
    try:
        async with trio.open_nursery() as nursery:
            stuck: list = []

            async def waits_for_the_flush() -> None:
                stuck.append(await send(b"stuck"))

            nursery.start_soon(waits_for_the_flush)  # appended; its fsync cannot run
            await trio.sleep(0.3)
            busy = await send(b"turned away")
            assert busy.code == ResponseCode.SYSTEM_BUSY
            assert busy.remark == "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
    finally:
        for h in holders:
            limiter.release_on_behalf_of(h)
    assert stuck[0].code == ResponseCode.FLUSH_DISK_TIMEOUT  # stored, not known durable in time
    with trio.fail_after(10):  # as a client retries SYSTEM_BUSY: the flush that was held up runs now
        while (ok := await send(b"after")).code == ResponseCode.SYSTEM_BUSY:
            await trio.sleep(0.05)
    assert ok.code == ResponseCode.SUCCESS
    # the turned-away send took no place in the queue: first, stuck, after
    assert ok.ext_fields["queueOffset"] == "2"


async def test_fast_failure_can_be_turned_off(nursery, tmp_path):
    async with broker_cluster(nursery, tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                              os_page_cache_busy_time_out_mills=1, broker_fast_failure_enable=False,
                              sync_flush_timeout=400) as c:
        assert (await c.client.invoke(c.broker_addr, send_req("TopicPC", b"topic", queue_id=0), 10)).code == 0
        limiter = trio.to_thread.current_default_thread_limiter()
        holders = [object() for _ in range(int(limiter.total_tokens))]
        for h in holders:
            await limiter.acquire_on_behalf_of(h)
        try:
            async with trio.open_nursery() as n:
                n.start_soon(c.client.invoke, c.broker_addr, send_req("TopicPC", b"a", queue_id=0), 10)
                await trio.sleep(0.1)
                r = await c.client.invoke(c.broker_addr, send_req("TopicPC", b"b", queue_id=0), 10)
        finally:
            for h in holders:
                limiter.release_on_behalf_of(h)
        assert r.code == ResponseCode.FLUSH_DISK_TIMEOUT  # waited like any SYNC_FLUSH send
