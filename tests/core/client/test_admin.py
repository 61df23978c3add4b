"""``mqgate admin`` against the live broker, in-process (`run_admin`), JSON and table output."""

import io
import json

import trio

from core.admin import run_admin
from core.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, open_producer, open_push_consumer

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


async def admin(cluster, *args, json_out=True):
    out, err = io.StringIO(), io.StringIO()
    argv = ["--namesrv", cluster.namesrv] + (["--json"] if json_out else []) + list(args)
    code = await run_admin(argv, out, err)
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue()) if json_out else out.getvalue()


async def test_topic_create_list_route(cluster):
    created = await admin(cluster, "topic", "create", "AdminTopic", "--queues", "3", "--order")
    assert created["brokers"] == ["broker-a"]
    assert cluster.broker.get_topic("AdminTopic").write_queue_nums == 3
    assert "AdminTopic" in (await admin(cluster, "topic", "list"))["topics"]  # create waited for the route
    route = await admin(cluster, "topic", "route", "AdminTopic")
    assert route["queueDatas"][0]["writeQueueNums"] == 3 and route["orderTopicConf"] == "broker-a:3"
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": cluster.broker_addr}
    text = await admin(cluster, "topic", "route", "AdminTopic", json_out=False)
    assert "broker-a" in text and "orderTopicConf: broker-a:3" in text


async def test_group_progress_and_message_queries(cluster):
    async with open_producer(cluster.namesrv, "PG") as producer:
        sent = [await producer.send(Message("AdminMsgs", f"m{i}", keys=[f"order-{i % 2}"])) for i in range(6)]
    got = []
    arrived = trio.Semaphore(0)

    def listener(msgs, ctx):
        got.extend(msgs)
        arrived.release()

    async with open_push_consumer(cluster.namesrv, "GAdmin", {"AdminMsgs": "*"}, listener, consume_from=FIRST):
        with trio.fail_after(10):
            while len(got) < 6:
                await arrived.acquire()
    progress = await admin(cluster, "group", "progress", "GAdmin")
    rows = [r for r in progress["queues"] if r["topic"] == "AdminMsgs"]
    assert sum(r["brokerOffset"] for r in rows) == 6 and progress["totalLag"] == 0
    assert all(r["consumerOffset"] == r["brokerOffset"] for r in rows)
    table = await admin(cluster, "group", "progress", "GAdmin", json_out=False)
    assert "total lag: 0" in table

    by_key = await admin(cluster, "message", "key", "AdminMsgs", "order-1")
    assert sorted(m["body"] for m in by_key["messages"]) == ["m1", "m3", "m5"]
    by_offset_id = await admin(cluster, "message", "id", sent[2].offset_msg_id)
    assert by_offset_id["messages"][0]["body"] == "m2"
    by_uniq = await admin(cluster, "message", "id", sent[4].msg_id, "--topic", "AdminMsgs")
    assert by_uniq["messages"][0]["body"] == "m4"
    runtime = await admin(cluster, "broker", "runtime")
    assert runtime["brokers"]["broker-a"]["brokerName"] == "broker-a"


async def test_dlq_resend(cluster):
    async with open_producer(cluster.namesrv, "PG") as producer:
        for i in range(3):
            await producer.send(Message("AdminDlq", f"d{i}", tags="T", keys=[f"k{i}"]))
    # max_reconsume_times=0: the first RECONSUME_LATER sends the message straight to %DLQ%GDlq
    async with open_push_consumer(cluster.namesrv, "GDlq", {"AdminDlq": "*"},
                                  lambda m, c: ConsumeConcurrentlyStatus.RECONSUME_LATER,
                                  consume_from=FIRST, max_reconsume_times=0):
        with trio.fail_after(10):
            while cluster.broker.max_offset("%DLQ%GDlq", 0) < 3:
                await cluster.broker.queue_changed("%DLQ%GDlq", 0).wait()
    before = sum(cluster.broker.max_offset("AdminDlq", q) for q in range(4))
    first = await admin(cluster, "dlq", "resend", "GDlq", "--max", "2")
    assert [r["topic"] for r in first["resent"]] == ["AdminDlq", "AdminDlq"]
    rest = await admin(cluster, "dlq", "resend", "GDlq")
    assert [r["dlqOffset"] for r in rest["resent"]] == [2]  # progress kept between runs
    assert (await admin(cluster, "dlq", "resend", "GDlq"))["resent"] == []
    assert sum(cluster.broker.max_offset("AdminDlq", q) for q in range(4)) == before + 3
    back = await admin(cluster, "message", "key", "AdminDlq", "k1")
    assert len(back["messages"]) == 2  # the original and the re-sent copy
    assert all(m["tags"] == "T" and "RETRY_TOPIC" not in m["properties"] for m in back["messages"][1:])


async def test_errors_and_usage(cluster):
    err = io.StringIO()
    assert await run_admin(["--namesrv", cluster.namesrv, "topic", "route", "NoSuchTopic"], io.StringIO(), err) == 1
    assert "NoSuchTopic" in err.getvalue()
    assert await run_admin(["frobnicate"], io.StringIO(), io.StringIO()) == 2
