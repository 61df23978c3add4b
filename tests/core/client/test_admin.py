"""``mqgate admin`` against the live broker, in-process (`run_admin`), JSON and table output."""

import io
import json
import time

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
    listener = Collector()
    async with open_push_consumer(cluster.namesrv, "GAdmin", {"AdminMsgs": "*"}, listener, consume_from=FIRST):
        await listener.until(6)
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


# ---- issue 18: mqadmin parity, errors, runtime ----------------------------------------------

async def admin_fails(cluster, *args, code=1):
    out, err = io.StringIO(), io.StringIO()
    assert await run_admin(["--namesrv", cluster.namesrv, *args], out, err) == code, (out.getvalue(), err.getvalue())
    assert out.getvalue() == "" and err.getvalue().count("\n") == 1, err.getvalue()  # one line, nothing on stdout
    return err.getvalue()


async def send_n(cluster, topic, n, start=0, **kw):
    async with open_producer(cluster.namesrv, "PG") as producer:
        return [await producer.send(Message(topic, f"{topic}-{i}", **kw)) for i in range(start, start + n)]


class Collector:
    """A push consumer's listener that keeps what arrives; `until(n)` waits for n in all."""

    def __init__(self) -> None:
        self.got: list = []
        self._arrived = trio.Semaphore(0)

    def __call__(self, msgs, ctx) -> None:
        self.got.extend(msgs)
        self._arrived.release()

    async def until(self, n: int) -> None:
        with trio.fail_after(10):
            while len(self.got) < n:
                await self._arrived.acquire()


async def consume_all(cluster, group, topic, n, **opts):
    listener = Collector()
    async with open_push_consumer(cluster.namesrv, group, {topic: "*"}, listener, consume_from=FIRST, **opts):
        await listener.until(n)
    return listener.got


async def test_global_options_anywhere_and_mqadmin_names(cluster):
    await send_n(cluster, "AnyWhere", 2)
    # the old parser refused --namesrv and --json after the verb
    out, err = io.StringIO(), io.StringIO()
    assert await run_admin(["topic", "list", "--namesrv", cluster.namesrv, "--json"], out, err) == 0, err.getvalue()
    assert "AnyWhere" in json.loads(out.getvalue())["topics"]
    out = io.StringIO()
    assert await run_admin(["topicRoute", "-t", "AnyWhere", "-n", cluster.namesrv], out, io.StringIO()) == 0
    assert "broker-a" in out.getvalue()
    status = await admin(cluster, "topicStatus", "-t", "AnyWhere")
    assert sum(q["maxOffset"] for q in status["queues"]) == 2
    assert (await admin(cluster, "clusterList"))["brokers"][0]["brokerName"] == "broker-a"


async def test_topic_status(cluster):
    before = int(time.time() * 1000)
    sent = await send_n(cluster, "StatusTopic", 5)
    after = int(time.time() * 1000)
    status = await admin(cluster, "topic", "status", "StatusTopic")
    rows = {q["queueId"]: q for q in status["queues"]}
    assert sorted(rows) == [0, 1, 2, 3] and all(q["brokerName"] == "broker-a" for q in rows.values())
    per_queue = {}
    for r in sent:
        per_queue[r.queue.queue_id] = per_queue.get(r.queue.queue_id, 0) + 1
    for qid, q in rows.items():
        assert (q["minOffset"], q["maxOffset"]) == (0, per_queue.get(qid, 0))
        if per_queue.get(qid):
            assert before <= q["lastUpdateTimestamp"] <= after
        else:
            assert q["lastUpdateTimestamp"] == 0
    text = await admin(cluster, "topic", "status", "StatusTopic", json_out=False)
    assert text.splitlines()[0].split() == ["brokerName", "queueId", "minOffset", "maxOffset", "lastUpdated"]
    assert "NoSuchTopic" in await admin_fails(cluster, "topic", "status", "NoSuchTopic")


async def test_topic_delete_from_broker_and_name_server(cluster):
    await admin(cluster, "topic", "create", "DoomedTopic", "--queues", "2", "--order")
    await send_n(cluster, "DoomedTopic", 4)
    await consume_all(cluster, "GDoomed", "DoomedTopic", 4)
    assert cluster.broker.query_offset("GDoomed", "DoomedTopic", 0) is not None
    deleted = await admin(cluster, "topic", "delete", "DoomedTopic")
    assert deleted["brokers"] == ["broker-a"] and deleted["namesrvs"] == [cluster.namesrv]
    assert cluster.broker.get_topic("DoomedTopic") is None
    assert cluster.broker.query_offset("GDoomed", "DoomedTopic", 0) is None  # offsets go with it
    assert "DoomedTopic" not in (await admin(cluster, "topic", "list"))["topics"]  # delete waited for the route
    assert "DoomedTopic does not exist" in await admin_fails(cluster, "topic", "route", "DoomedTopic")
    assert "DoomedTopic does not exist" in await admin_fails(cluster, "deleteTopic", "-t", "DoomedTopic")
    # created again, it is not ordered any more: ORDER_TOPIC_CONFIG went with it
    await admin(cluster, "topic", "create", "DoomedTopic", "--queues", "2")
    assert (await admin(cluster, "topic", "route", "DoomedTopic"))["orderTopicConf"] is None
    assert "conflict with system topic" in await admin_fails(cluster, "topic", "delete", "TBW102")
    assert cluster.broker.get_topic("TBW102") is not None


async def test_cluster_list_and_broker_runtime_earliest_message(cluster):
    empty = await admin(cluster, "broker", "runtime")
    assert empty["brokers"]["broker-a"]["earliestMessageTimeStamp"] == "-1"  # nothing stored yet
    before = int(time.time() * 1000)
    await send_n(cluster, "EarlyTopic", 3)
    runtime = await admin(cluster, "broker", "runtime")
    earliest = int(runtime["brokers"]["broker-a"]["earliestMessageTimeStamp"])  # was 0 with messages stored
    assert before <= earliest <= int(time.time() * 1000)
    listed = await admin(cluster, "cluster", "list")
    (row,) = listed["brokers"]
    assert (row["cluster"], row["brokerName"], row["brokerId"], row["addr"]) == (
        "DefaultCluster", "broker-a", 0, cluster.broker_addr)
    assert row["version"] == "V4_9_8" and row["role"] == "ASYNC_MASTER" and 0 <= row["hours"] < 1
    text = await admin(cluster, "cluster", "list", json_out=False)
    assert cluster.broker_addr in text.splitlines()[1]


async def test_unknown_group_is_an_error(cluster):
    await send_n(cluster, "GroupTopic", 1)
    # the old tree printed an empty table, "total lag: 0", and exited 0
    assert "consumer group nosuchgroup is unknown" in await admin_fails(cluster, "group", "progress", "nosuchgroup")
    assert "nosuchgroup is unknown" in await admin_fails(cluster, "consumerProgress", "-g", "nosuchgroup")
    assert "no client online" in await admin_fails(cluster, "group", "connections", "nosuchgroup")
    assert "nosuchgroup is unknown" in await admin_fails(cluster, "group", "reset-offset", "nosuchgroup", "GroupTopic", "now")
    assert "NoTopic does not exist" in await admin_fails(cluster, "group", "reset-offset", "G", "NoTopic", "now")
    assert "cannot read the time" in await admin_fails(cluster, "group", "reset-offset", "G", "GroupTopic", "yesterday",
                                                       code=2)


async def test_group_list_and_connections(cluster):
    await admin(cluster, "topic", "create", "ConnTopic", "--queues", "4")  # returns once routed
    await send_n(cluster, "ConnTopic", 4)
    listener = Collector()
    async with open_push_consumer(cluster.namesrv, "GConn", {"ConnTopic": "TagA || TagB"}, listener,
                                  consume_from=FIRST) as consumer:
        conns = await admin(cluster, "group", "connections", "GConn")
        (c,) = conns["connections"]
        assert c["clientId"] == consumer.client_id and c["language"] == "PYTHON" and c["version"] == 405
        assert c["clientAddr"].startswith("127.0.0.1:")
        subs = {s["topic"]: s["subExpression"] for s in conns["subscriptions"]}
        assert subs == {"ConnTopic": "TagA || TagB", "%RETRY%GConn": "*"}
        assert (conns["consumeType"], conns["messageModel"]) == ("CONSUME_PASSIVELY", "CLUSTERING")
        assert conns == await admin(cluster, "consumerConnection", "-g", "GConn")
        listed = {g["group"]: g for g in (await admin(cluster, "group", "list"))["groups"]}
        assert listed["GConn"]["clients"] == 1 and listed["GConn"]["messageModel"] == "CLUSTERING"
    listed = {g["group"]: g for g in (await admin(cluster, "consumerProgress"))["groups"]}
    assert listed["GConn"]["clients"] == 0 and "ConnTopic" in listed["GConn"]["topics"]
    assert isinstance(listed["GConn"]["lag"], int)
    assert "GConn has no client online" in await admin_fails(cluster, "group", "connections", "GConn")


async def test_reset_offset_with_no_client_online_sets_the_stored_offsets(cluster):
    await send_n(cluster, "ResetOff", 3)
    await trio.sleep(0.05)  # store times are wall-clock ms: leave a gap
    mark = int(time.time() * 1000)
    await trio.sleep(0.05)
    await send_n(cluster, "ResetOff", 3, start=3)
    await consume_all(cluster, "GResetOff", "ResetOff", 6)
    assert (await admin(cluster, "group", "progress", "GResetOff", "--topic", "ResetOff"))["totalLag"] == 0
    back = await admin(cluster, "group", "reset-offset", "GResetOff", "ResetOff", str(mark))
    assert {r["appliedBy"] for r in back["queues"]} == {"stored"} and not back["clientsOnline"]
    assert (await admin(cluster, "group", "progress", "GResetOff", "--topic", "ResetOff"))["totalLag"] == 3
    again = await consume_all(cluster, "GResetOff", "ResetOff", 3)
    assert sorted(m.body for m in again) == [f"ResetOff-{i}".encode() for i in range(3, 6)]
    # to the beginning (mqadmin's date form), then --no-force towards now changes nothing
    await admin(cluster, "resetOffsetByTime", "-g", "GResetOff", "-t", "ResetOff", "-s", "2000-01-01#00:00:00:000")
    assert (await admin(cluster, "group", "progress", "GResetOff", "--topic", "ResetOff"))["totalLag"] == 6
    await admin(cluster, "group", "reset-offset", "GResetOff", "ResetOff", "now", "--no-force")
    assert (await admin(cluster, "group", "progress", "GResetOff", "--topic", "ResetOff"))["totalLag"] == 6
    await admin(cluster, "group", "reset-offset", "GResetOff", "ResetOff", "now")
    assert (await admin(cluster, "group", "progress", "GResetOff", "--topic", "ResetOff"))["totalLag"] == 0


async def test_reset_offset_reaches_live_clients(cluster):
    """RESET_CONSUMER_CLIENT_OFFSET (220) to a running push consumer: it goes back and consumes again."""
    await send_n(cluster, "ResetLive", 4)
    listener = Collector()
    got = listener.got
    async with open_push_consumer(cluster.namesrv, "GResetLive", {"ResetLive": "*"}, listener, consume_from=FIRST):
        await listener.until(4)
        result = await admin(cluster, "group", "reset-offset", "GResetLive", "ResetLive", "0")
        assert {r["appliedBy"] for r in result["queues"]} == {"clients"} and result["clientsOnline"]
        await listener.until(8)
        assert sorted(m.body for m in got[4:]) == sorted(m.body for m in got[:4])
        with trio.fail_after(10):  # the consumer commits where it went (not only at shutdown)
            while sum(cluster.broker.query_offset("GResetLive", "ResetLive", q) or 0 for q in range(4)) < 4:
                await trio.sleep(0.05)


async def test_message_id_uniq_key_without_topic_and_malformed_ids(cluster):
    sent = await send_n(cluster, "IdTopic", 2)
    # a UNIQ_KEY without --topic: looked up (it was decoded as an address and dialled)
    found = await admin(cluster, "message", "id", sent[1].msg_id)
    assert found["kind"] == "uniqKey" and [m["body"] for m in found["messages"]] == ["IdTopic-1"]
    assert (await admin(cluster, "queryMsgById", "-i", sent[0].offset_msg_id))["messages"][0]["body"] == "IdTopic-0"
    by_uniq = await admin(cluster, "queryMsgByUniqueKey", "-i", sent[0].msg_id, "-t", "IdTopic")
    assert by_uniq["messages"][0]["body"] == "IdTopic-0"
    # the C++ client's layout: its ip backwards (1.0.0.127), then pid and a random number;
    # as an offset id it names a broker nobody runs
    cpp_like = "0100007F" + "3A9C0000" + "51D20000" + "0F2A6B1C" + "0001"[:0]
    cpp_like = (cpp_like + "0" * 32)[:32]
    started = trio.current_time()
    err = await admin_fails(cluster, "message", "id", cpp_like)
    assert "no message with id" in err and "1.0.0.127" in err and trio.current_time() - started < 3
    async with open_producer(cluster.namesrv, "PG") as producer:
        await producer.send(Message("IdTopic", "from C++", properties={"UNIQ_KEY": cpp_like}))
    assert (await admin(cluster, "message", "id", cpp_like))["messages"][0]["body"] == "from C++"
    for bad in ("xyz", "0100007F", "G" * 32, sent[0].msg_id + "00"):
        assert "is not a message id" in await admin_fails(cluster, "message", "id", bad, code=2)


async def test_group_status_asks_each_client_through_the_broker(cluster):
    await admin(cluster, "topic", "create", "StatusTopic", "--queues", "4")
    await send_n(cluster, "StatusTopic", 6)
    listener = Collector()
    failing = {"n": 0}

    def listen(msgs, ctx):
        listener(msgs, ctx)
        if msgs[0].body == b"StatusTopic-0" and failing["n"] == 0:  # one failure, for the failed count
            failing["n"] += 1
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return None

    async with open_push_consumer(cluster.namesrv, "GStatus", {"StatusTopic": "*"}, listen,
                                  consume_from=FIRST) as consumer:
        await listener.until(6)
        summary = await admin(cluster, "group", "status", "GStatus")
        (row,) = summary["clients"]
        assert row["clientId"] == consumer.client_id and row["version"] == "V4_9_8" and not row["orderly"]
        assert row["queues"] >= 4  # StatusTopic's 4 and the retry queue
        assert row["consumeFailedMsgs"] == 1 and summary["sameSubscriptions"]
        one = await admin(cluster, "group", "status", "GStatus", "--client", consumer.client_id)
        queues = {(q["topic"], q["queueId"]): q for q in one["queues"]}
        assert {("StatusTopic", q) for q in range(4)} <= set(queues)
        assert sum(queues[("StatusTopic", q)]["commitOffset"] for q in range(4)) == 6
        assert all(q["brokerName"] == "broker-a" and not q["droped"] for q in one["queues"])
        status = {s["topic"]: s for s in one["status"]}
        assert status["StatusTopic"]["pullTPS"] > 0 and status["StatusTopic"]["consumeOKTPS"] > 0
        assert one["properties"]["consumerGroup"] == "GStatus"
        assert one["properties"]["PROP_NAMESERVER_ADDR"] == cluster.namesrv
        assert {s["topic"] for s in one["subscriptions"]} == {"StatusTopic", "%RETRY%GStatus"}
        stacks = await admin(cluster, "consumerStatus", "-g", "GStatus", "-i", consumer.client_id, "-s")
        assert "MainThread" in stacks["jstack"]
        text = await admin(cluster, "group", "status", "GStatus", json_out=False)
        assert consumer.client_id in text and "the same on every client" in text
        missing = await admin_fails(cluster, "group", "status", "GStatus", "--client", "10.0.0.1@nobody")
        assert "not online in consumer group GStatus" in missing
    assert "GStatus has no client online" in await admin_fails(cluster, "group", "status", "GStatus")


async def test_a_message_consumed_directly_by_one_client(cluster):
    async with open_producer(cluster.namesrv, "PG") as producer:
        sent = [await producer.send(Message("DirectTopic", f"d{i}")) for i in range(3)]
    listener = Collector()
    async with open_push_consumer(cluster.namesrv, "GDirect", {"DirectTopic": "*"}, listener,
                                  consume_from=FIRST) as consumer:
        await listener.until(3)
        before = cluster.broker.query_offset("GDirect", "DirectTopic", sent[1].queue.queue_id)
        got = await admin(cluster, "message", "id", sent[1].offset_msg_id, "--group", "GDirect",
                          "--client", consumer.client_id)
        assert got["consumed"]["consumeResult"] == "CR_SUCCESS" and got["consumed"]["order"] is False
        assert [m.body for m in listener.got[3:]] == [b"d1"]  # handed over once more
        assert listener.got[3].msg_id == sent[1].msg_id and listener.got[3].topic == "DirectTopic"
        assert cluster.broker.query_offset("GDirect", "DirectTopic", sent[1].queue.queue_id) == before
        alias = await admin(cluster, "queryMsgById", "-i", sent[2].msg_id, "-t", "DirectTopic",
                            "-g", "GDirect", "-d", consumer.client_id)
        assert alias["consumed"]["consumeResult"] == "CR_SUCCESS" and listener.got[4].body == b"d2"
        wrong_group = await admin_fails(cluster, "message", "id", sent[0].offset_msg_id, "--group", "GOther",
                                        "--client", consumer.client_id)
        assert "The Consumer <GOther>" in wrong_group and "not online" in wrong_group
        assert "go together" in await admin_fails(cluster, "message", "id", sent[0].offset_msg_id,
                                                   "--group", "GDirect", code=2)

    def boom(msgs, ctx):
        raise ValueError("listener says no")

    async with open_push_consumer(cluster.namesrv, "GBoom", {"DirectTopic": "*"}, boom,
                                  consume_from=FIRST) as consumer:
        got = await admin(cluster, "message", "id", sent[0].offset_msg_id, "--group", "GBoom",
                          "--client", consumer.client_id)
        assert got["consumed"]["consumeResult"] == "CR_THROW_EXCEPTION"
        assert "ValueError: listener says no" in got["consumed"]["remark"]


async def test_group_update_keeps_the_rest_of_the_config_and_mqadmin_spells_it_update_sub_group(cluster):
    cluster.broker.groups.get_or_create("Upd")
    cluster.broker.groups.update("Upd", retry_max_times=5)
    done = await admin(cluster, "group", "update", "Upd", "--orderly", "true")
    assert done == {"group": "Upd", "brokers": [{"brokerName": "broker-a", "consumeMessageOrderly": True}]}
    g = cluster.broker.get_group("Upd")
    assert (g.consume_message_orderly, g.retry_max_times) == (True, 5)  # what was not given is kept
    await admin(cluster, "updateSubGroup", "-g", "NewGroup", "-o", "false", "-r", "2")
    g = cluster.broker.get_group("NewGroup")
    assert (g.consume_message_orderly, g.retry_max_times, g.consume_enable) == (False, 2, True)
    assert "nothing to change" in await admin_fails(cluster, "group", "update", "Upd", code=2)
    assert await run_admin(["--namesrv", cluster.namesrv, "group", "update", "Upd", "--orderly", "yes"],
                           io.StringIO(), io.StringIO()) == 2  # argparse: "expected true or false, not 'yes'"
