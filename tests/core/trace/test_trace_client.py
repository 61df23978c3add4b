"""Our client with ``enable_msg_trace``: producers, push consumers and transaction producers write
trace records to the trace topic over real sockets; the records follow the reference layout."""

import sys
from pathlib import Path

import trio

from core.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, open_producer, open_push_consumer
from core.client.pull_consumer import open_pull_consumer
from core.client.transaction import LocalTransactionState, open_transaction_producer
from core.trace import TRACE_TOPIC

sys.path.insert(0, str(Path(__file__).parent))
import reference_layout as ref  # noqa: E402

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
FAST = {"enable_msg_trace": True, "trace_flush_interval": 0.05}


async def trace_records(cluster, topic=TRACE_TOPIC, want=1, timeout=10.0):
    """Every record in ``topic`` (pulled over the wire), read with the reference layout."""
    records, keys = [], []
    async with open_pull_consumer(cluster.namesrv, "trace-reader", {topic: "*"}, consume_from=FIRST) as pull:
        with trio.fail_after(timeout):
            while len(records) < want:
                for m in await pull.poll(timeout=0.5):
                    records.extend(ref.read(m.body.decode()))
                    keys.append(set(m.keys))
    return records, keys


async def test_trace_topic_is_created_at_start_with_one_queue(cluster):
    cfg = cluster.broker.get_topic(TRACE_TOPIC)
    assert cfg is not None and cfg.write_queue_nums == 1 and cfg.read_queue_nums == 1


async def test_producer_and_push_consumer_records_with_a_retry(cluster):
    async with open_producer(cluster.namesrv, "PG-trace", **FAST) as producer:
        sent = [await producer.send(Message("TracedOrders", f"m{i}", tags="TagA", keys=[f"order-{i}"])) for i in range(3)]
    calls = []
    done = trio.Event()

    def listener(msgs, ctx):
        calls.append((msgs[0].msg_id, msgs[0].reconsume_times))
        if msgs[0].msg_id == sent[0].msg_id and msgs[0].reconsume_times == 0:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        if len(calls) >= 4:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async with open_push_consumer(cluster.namesrv, "CG-trace", {"TracedOrders": "*"}, listener, consume_from=FIRST,
                                  **FAST) as consumer:
        with trio.fail_after(20):
            await done.wait()
    assert consumer.tracer.discarded == 0
    records, keys = await trace_records(cluster, want=3 + 4 + 4)
    pubs = {r["msgId"]: r for r in records if r["type"] == "Pub"}
    assert set(pubs) == {r.msg_id for r in sent}
    p0 = pubs[sent[0].msg_id]
    assert p0["groupName"] == "PG-trace" and p0["topic"] == "TracedOrders" and p0["tags"] == "TagA"
    assert p0["keys"] == "order-0" and p0["storeHost"] == cluster.broker_addr and p0["success"] is True
    assert p0["offsetMsgId"] == sent[0].offset_msg_id and p0["bodyLength"] == 2 and p0["msgType"] == 0
    assert p0["regionId"] == "DefaultRegion" and p0["costTime"] >= 0
    befores = [r for r in records if r["type"] == "SubBefore" and r["msgId"] == sent[0].msg_id]
    afters = [r for r in records if r["type"] == "SubAfter" and r["msgId"] == sent[0].msg_id]
    assert sorted(r["retryTimes"] for r in befores) == [0, 1]
    assert {r["groupName"] for r in befores + afters} == {"CG-trace"}
    by_request = {r["requestId"]: r for r in afters}
    first = by_request[next(r["requestId"] for r in befores if r["retryTimes"] == 0)]
    again = by_request[next(r["requestId"] for r in befores if r["retryTimes"] == 1)]
    assert (first["success"], first["contextCode"]) == (False, 4)   # RECONSUME_LATER: ConsumeReturnType.FAILED
    assert (again["success"], again["contextCode"]) == (True, 0)
    # every trace message is keyed by the traced ids and keys (the index file finds them)
    all_keys = set().union(*keys)
    assert {r.msg_id for r in sent} | {"order-0", "order-1", "order-2"} <= all_keys


async def test_custom_trace_topic_and_transaction_records(cluster):
    class Listener:
        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.COMMIT_MESSAGE

        def check_local_transaction(self, msg):
            return LocalTransactionState.COMMIT_MESSAGE

    async with open_transaction_producer(cluster.namesrv, "TXG-trace", Listener(), trace_topic="MyTrace",
                                         **FAST) as tx:
        r = await tx.send_message_in_transaction(Message("TracedPay", b"debit", keys=["pay-1"]))
    records, _ = await trace_records(cluster, "MyTrace", want=2)
    pub = next(x for x in records if x["type"] == "Pub")
    end = next(x for x in records if x["type"] == "EndTransaction")
    assert pub["msgType"] == 1 and pub["msgId"] == r.msg_id            # Trans_Msg_Half
    assert end["msgId"] == r.msg_id and end["transactionState"] == "COMMIT_MESSAGE"
    assert end["groupName"] == "TXG-trace" and end["keys"] == "pay-1" and end["msgType"] == 2
    assert end["fromTransactionCheck"] is False and end["storeHost"] == cluster.broker_addr


async def test_a_failing_trace_topic_never_fails_or_blocks_the_users_sends(cluster):
    async with open_producer(cluster.namesrv, "PG-broken-trace", trace_topic="no such topic!", **FAST) as producer:
        results = [await producer.send(Message("StillWorks", f"m{i}")) for i in range(5)]
        with trio.fail_after(10):
            while producer.tracer.failed == 0:
                await trio.sleep(0.05)
    assert all(r.ok for r in results)
    assert producer.tracer.sent_records == 0 and producer.tracer.failed >= 1


async def test_blocking_producer_traces_too(cluster):
    from core.client import Producer

    def produce():
        p = Producer(cluster.namesrv, "PG-blocking", enable_msg_trace=True, trace_flush_interval=0.05).start()
        try:
            return p.send(Message("TracedBlocking", b"x", keys=["blk-1"]))
        finally:
            p.shutdown()  # sends what is buffered

    sent = await trio.to_thread.run_sync(produce)
    records, keys = await trace_records(cluster, want=1)
    (pub,) = [r for r in records if r["msgId"] == sent.msg_id]
    assert pub["groupName"] == "PG-blocking" and pub["keys"] == "blk-1" and {"blk-1", sent.msg_id} <= set().union(*keys)


async def test_admin_trace_answers_bad_requests_with_one_line(cluster):
    import io

    from core.admin import run_admin

    async def run(*args):
        out, err = io.StringIO(), io.StringIO()
        code = await run_admin(["--namesrv", cluster.namesrv, *args], out, err)
        return code, err.getvalue()

    code, err = await run("trace", "0" * 32)
    assert code == 1 and err.count("\n") == 1 and "no trace record for " + "0" * 32 + " in RMQ_SYS_TRACE_TOPIC" in err
    code, err = await run("trace", "0" * 32, "--key", "k", "--topic", "T")
    assert code == 2 and "not both" in err
    code, err = await run("trace", "--key", "k")
    assert code == 2 and "--key needs --topic" in err
    code, err = await run("trace", "--key", "nothing-here", "--topic", "TracedOrders")
    assert code == 1 and "no message with key 'nothing-here' in topic TracedOrders" in err


async def test_an_end_transaction_answering_a_broker_check_is_traced_as_from_check(nursery, tmp_path):
    from cluster import broker_cluster

    class Listener:
        def __init__(self):
            self.checked = trio.Event()

        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.UNKNOW

        def check_local_transaction(self, msg):
            self.checked.set()
            return LocalTransactionState.COMMIT_MESSAGE

    listener = Listener()
    async with broker_cluster(nursery, tmp_path, trace_topic_enable=True, transaction_timeout=300,
                              transaction_check_interval=300) as c:
        async with open_transaction_producer(c.namesrv, "TXG-check", listener, **FAST) as tx:
            await tx.prepare("TracedCheck")
            r = await tx.send_message_in_transaction(Message("TracedCheck", b"later"))
            with trio.fail_after(20):
                await listener.checked.wait()
            while tx.checks_answered == 0:
                await trio.sleep(0.05)
        records, _ = await trace_records(c, want=3)
    ends = [x for x in records if x["type"] == "EndTransaction" and x["msgId"] == r.msg_id]
    assert [(e["transactionState"], e["fromTransactionCheck"]) for e in ends] == [
        ("UNKNOW", False), ("COMMIT_MESSAGE", True)]


async def test_a_batch_send_makes_one_pub_record_per_message(cluster):
    async with open_producer(cluster.namesrv, "PG-batch", **FAST) as producer:
        r = await producer.send_batch([Message("TracedBatch", f"b{i}", keys=[f"bk-{i}"]) for i in range(3)])
    records, _ = await trace_records(cluster, want=3)
    pubs = {p["msgId"]: p for p in records if p["type"] == "Pub"}
    assert set(pubs) == set(r.msg_id.split(","))
    assert sorted(p["keys"] for p in pubs.values()) == ["bk-0", "bk-1", "bk-2"]
    assert sorted(p["offsetMsgId"] for p in pubs.values()) == sorted(r.offset_msg_id.split(","))


async def test_native_sends_carry_msg_region_and_trace_on_and_trace_on_false_silences_tracing(nursery, tmp_path):
    from cluster import broker_cluster

    got = []
    done = trio.Event()

    def listener(msgs, ctx):
        got.extend(msgs)
        done.set()

    async with broker_cluster(nursery, tmp_path, trace_topic_enable=True, trace_on=False, region_id="eu-1") as c:
        async with open_producer(c.namesrv, "PG-off", **FAST) as producer:
            await producer.send(Message("QuietTopic", b"q"))
        async with open_push_consumer(c.namesrv, "CG-off", {"QuietTopic": "*"}, listener, consume_from=FIRST,
                                      **FAST) as consumer:
            with trio.fail_after(20):
                await done.wait()
    assert got[0].properties["MSG_REGION"] == "eu-1" and got[0].properties["TRACE_ON"] == "false"
    # the broker said TRACE_ON=false in the answer and in the message: neither client made a record
    assert producer.tracer.sent_records == 0 and consumer.tracer.sent_records == 0
    assert producer.tracer.failed == 0 and consumer.tracer.failed == 0


async def test_consumer_records_carry_the_region_the_broker_stamped(nursery, tmp_path):
    from cluster import broker_cluster

    done = trio.Event()
    async with broker_cluster(nursery, tmp_path, trace_topic_enable=True, region_id="eu-1") as c:
        async with open_producer(c.namesrv, "PG-eu", **FAST) as producer:
            await producer.send(Message("EuTopic", b"e"))
        async with open_push_consumer(c.namesrv, "CG-eu", {"EuTopic": "*"}, lambda m, ctx: done.set(),
                                      consume_from=FIRST, **FAST):
            with trio.fail_after(20):
                await done.wait()
        records, _ = await trace_records(c, want=3)
    assert {r["type"]: r["regionId"] for r in records if "regionId" in r} == {"Pub": "eu-1", "SubBefore": "eu-1"}
