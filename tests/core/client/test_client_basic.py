"""Sync send then push-consume everything; async and oneway sends; batches; tags."""

import io

import trio

from core.admin import run_admin
from core.broker import Broker, BrokerConfig
from core.client import Message, open_producer, open_push_consumer
from core.client.model import ConsumeFromWhere, SendStatus
from core.processors import BrokerRemoting
from core.store import StoreConfig


class Collector:
    def __init__(self):
        self.msgs = []
        self.changed = trio.Event()

    def __call__(self, msgs, ctx):
        self.msgs.extend(msgs)
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, n, timeout=10.0):
        with trio.fail_after(timeout):
            while len(self.msgs) < n:
                await self.changed.wait()


async def test_sync_send_then_push_consume_all(cluster):
    async with open_producer(cluster.namesrv, "PG") as producer:
        results = [await producer.send(Message("TopicSync", f"m{i}", keys=[f"k{i}"])) for i in range(20)]
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert len({r.msg_id for r in results}) == 20 and all(len(r.msg_id) == 32 for r in results)
    assert len({r.queue.queue_id for r in results}) == 4  # round robin over the 4 default queues
    got = Collector()
    async with open_push_consumer(cluster.namesrv, "GSync", {"TopicSync": "*"}, got,
                                  consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET):
        await got.until(20)
    assert sorted(m.body for m in got.msgs) == sorted(f"m{i}".encode() for i in range(20))
    assert {m.msg_id for m in got.msgs} == {r.msg_id for r in results}


async def test_async_and_oneway_sends(cluster):
    done = []
    async with open_producer(cluster.namesrv, "PG") as producer:
        futs = [producer.send_async(Message("TopicAsync", f"a{i}"), lambda r, e: done.append((r, e))) for i in range(10)]
        results = [await f.result() for f in futs]
        for i in range(10):
            await producer.send_oneway(Message("TopicAsync", f"o{i}"))
    assert all(r.ok for r in results) and len(done) == 10 and all(e is None for _r, e in done)
    got = Collector()
    async with open_push_consumer(cluster.namesrv, "GAsync", {"TopicAsync": "*"}, got,
                                  consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET):
        await got.until(20)
    assert sorted(m.body for m in got.msgs) == sorted([f"a{i}".encode() for i in range(10)] + [f"o{i}".encode() for i in range(10)])


async def test_batch_send_lands_in_one_queue_in_order(cluster):
    async with open_producer(cluster.namesrv, "PG") as producer:
        r = await producer.send_batch([Message("TopicBatch", f"b{i}", tags="T") for i in range(10)])
    assert r.ok and len(r.msg_id.split(",")) == 10 and len(r.offset_msg_id.split(",")) == 10
    got = Collector()
    async with open_push_consumer(cluster.namesrv, "GBatch", {"TopicBatch": "*"}, got,
                                  consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, consume_concurrency=1):
        await got.until(10)
    assert {m.queue for m in got.msgs} == {r.queue}
    assert sorted(m.queue_offset for m in got.msgs) == list(range(r.queue_offset, r.queue_offset + 10))
    assert sorted(m.msg_id for m in got.msgs) == sorted(r.msg_id.split(","))


async def test_tag_subscription(cluster):
    async with open_producer(cluster.namesrv, "PG") as producer:
        for i in range(12):
            await producer.send(Message("TopicTags", f"t{i}", tags="TagA TagB TagC".split()[i % 3]), selector=lambda qs, m, a: qs[0])
    got = Collector()
    # one queue, and the whole pull in one listener call: a TagB would arrive with the last TagC
    async with open_push_consumer(cluster.namesrv, "GTags", {"TopicTags": "TagA || TagC"}, got, consume_batch_size=32,
                                  consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as consumer:
        await got.until(8)
        assert consumer.offsets.read(got.msgs[0].queue) == 12  # past the filtered tail too
    assert [m.tags for m in got.msgs] == ["TagA", "TagC"] * 4


async def test_slow_listener_gets_batches_concurrently(cluster):
    async with open_producer(cluster.namesrv, "PG") as producer:
        for i in range(8):
            await producer.send(Message("TopicSlow", f"s{i}"), selector=lambda qs, m, a: qs[0])
    in_listener = 0
    peak = 0
    four_in = trio.Event()
    got = Collector()

    async def slow(msgs, ctx):
        nonlocal in_listener, peak
        in_listener += 1
        peak = max(peak, in_listener)
        if in_listener >= 4:
            four_in.set()
        await four_in.wait()  # blocks until 4 batches of one pull are in the listener at once
        in_listener -= 1
        got(msgs, ctx)

    async with open_push_consumer(cluster.namesrv, "GSlow", {"TopicSlow": "*"}, slow, consume_concurrency=4,
                                  consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET):
        await got.until(8)
    assert peak == 4  # and never more than consume_concurrency


async def test_send_retries_on_another_broker(cluster, tmp_path):
    cfg = BrokerConfig(listen_port=0, broker_ip1="127.0.0.1", broker_name="broker-b")
    scfg = StoreConfig(store_path_root_dir=str(tmp_path / "store-b"), mapped_file_size_commit_log=4 * 1024 * 1024)
    async with open_producer(cluster.namesrv, "PG", retry_times=2) as producer:
        async with trio.open_nursery() as b_side:
            broker_b = Broker(cfg, scfg)
            await b_side.start(broker_b.run)
            await b_side.start(BrokerRemoting(broker_b, "127.0.0.1", 0, [cluster.namesrv]).run)
            assert await run_admin(["--namesrv", cluster.namesrv, "topic", "create", "TopicTwo", "--queues", "2"],
                                   io.StringIO(), io.StringIO()) == 0
            queues = await producer.fetch_publish_queues("TopicTwo")
            assert sorted({mq.broker_name for mq in queues}) == ["broker-a", "broker-b"]
            b_side.cancel_scope.cancel()  # broker-b goes away; the producer's route still lists it
        results = [await producer.send(Message("TopicTwo", f"r{i}")) for i in range(8)]
    assert {r.queue.broker_name for r in results} == {"broker-a"} and all(r.ok for r in results)


async def test_big_body_is_compressed_and_restored(cluster):
    body = bytes(range(256)) * 64  # 16 KiB, over compress_over (4 KiB)
    async with open_producer(cluster.namesrv, "PG") as producer:
        r = await producer.send(Message("TopicBig", body))
    stored = await cluster.broker.view_message(r.offset_msg_id)
    assert stored.sysflag & 0x1 and len(stored.body) < len(body)  # zlib on the wire and on disk
    got = Collector()
    async with open_push_consumer(cluster.namesrv, "GBig", {"TopicBig": "*"}, got,
                                  consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET):
        await got.until(1)
    assert got.msgs[0].body == body
