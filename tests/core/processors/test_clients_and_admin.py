"""Heartbeats, group membership notifications, locks, send-back, queries and admin codes."""

import json

import trio

from core.processors.clients import ClientTable, parse_heartbeat
from core.processors.locks import LockTable, MessageQueue
from core.remoting import LanguageCode, RemotingCommand, RequestCode, ResponseCode, decode_json
from core.remoting.client import open_remoting_client
from core.store.message import decode_messages, encode_properties

from wire import pull_req, send_req

CPP_HEARTBEAT = {
    "clientID": "1234-127.0.0.1@DEFAULT",
    "consumerDataSet": [{
        "groupName": "CG", "consumeFromWhere": 0, "consumeType": 1, "messageModel": 1,
        "subscriptionDataSet": [{"topic": "T1", "subString": "TagA || TagB", "subVersion": "1700000000000",
                                 "tagsSet": ["TagA", "TagB"], "codeSet": [2598919, 2598920]}],
    }],
}


def heartbeat(client_id, group="CG", sub="*", topic="T1"):
    hb = {"clientID": client_id, "producerDataSet": [{"groupName": "PG"}],
          "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                               "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
                               "subscriptionDataSet": [{"topic": topic, "subString": sub, "subVersion": 1,
                                                        "classFilterMode": False, "expressionType": "TAG"}]}]}
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())


def test_parse_cpp_heartbeat_enums():
    hb = parse_heartbeat(CPP_HEARTBEAT)
    (cd,) = hb.consumers
    assert (cd.consume_type, cd.message_model, cd.consume_from_where) == (
        "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
    assert cd.subscriptions[0].tags == ("TagA", "TagB")
    assert hb.producer_groups == ()


def test_client_table_membership_and_expiry():
    t = ClientTable()
    hb1 = parse_heartbeat(CPP_HEARTBEAT)
    assert t.heartbeat(hb1, "ch1", language="CPP", version=59, now_ms=0) == ["CG"]
    assert t.heartbeat(hb1, "ch1", language="CPP", version=59, now_ms=1000) == []  # no change, no notify
    hb2 = parse_heartbeat({**CPP_HEARTBEAT, "clientID": "other"})
    assert t.heartbeat(hb2, "ch2", language="CPP", version=59, now_ms=100_000) == ["CG"]
    assert t.consumer_ids("CG") == ["1234-127.0.0.1@DEFAULT", "other"]
    assert t.expired_channels(121_001) == {"ch1"}
    assert t.channel_closed("ch1") == ["CG"]
    assert t.unregister("ch2", producer_group=None, consumer_group="CG") == ["CG"]
    assert t.consumer_ids("CG") == []


def test_lock_table_lease():
    locks = LockTable(lease_ms=60_000)
    mqs = [MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)]
    assert locks.try_lock("G", mqs, "c1", 0) == set(mqs)
    assert locks.try_lock("G", mqs, "c2", 30_000) == set()
    assert locks.try_lock("G", mqs[:1], "c1", 50_000) == {mqs[0]}  # renewed
    assert locks.try_lock("G", mqs, "c2", 100_000) == {mqs[1]}  # mq1 expired, mq0 renewed at 50 s
    locks.unlock("G", mqs, "c1")
    assert locks.try_lock("G", mqs, "c2", 100_001) == set(mqs)


async def test_heartbeat_creates_retry_topic_and_notifies_members(cluster):
    a = cluster.broker_addr
    notified = []

    async def on_notify(addr, cmd):
        notified.append(cmd.ext_fields["consumerGroup"])

    handlers = {int(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED): on_notify}
    async with open_remoting_client(handlers=handlers) as c1, open_remoting_client(handlers=handlers) as c2:
        assert (await c1.invoke(a, heartbeat("c1"))).code == 0
        assert cluster.broker.get_topic("%RETRY%CG") is not None
        await c2.invoke(a, heartbeat("c2"))
        r = await c1.invoke(a, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"}))
        assert decode_json(r.body) == {"consumerIdList": ["c1", "c2"]}
        with trio.fail_after(5):
            while len(notified) < 3:  # c1 on its own join, c1 and c2 on c2's join
                await trio.sleep(0.01)
        # the C++ form of a heartbeat is understood too
        cpp = RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps({**CPP_HEARTBEAT, "clientID": "c3"}).encode())
        assert (await c2.invoke(a, cpp)).code == 0
        bad = RemotingCommand.request(RequestCode.HEART_BEAT, body=b"{not json")
        assert (await c2.invoke(a, bad)).code == ResponseCode.SYSTEM_ERROR
    # both connections closed: the group is empty
    async with open_remoting_client() as c:
        with trio.fail_after(5):
            while True:
                r = await c.invoke(a, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"}))
                if r.code == ResponseCode.SYSTEM_ERROR:
                    break
                await trio.sleep(0.01)


async def test_pull_uses_heartbeat_subscription(cluster):
    a = cluster.broker_addr
    c = cluster.client
    await c.invoke(a, send_req("T1", b"a", tags="TagA", queue_id=0))
    await c.invoke(a, send_req("T1", b"b", tags="TagB", queue_id=0))
    await c.invoke(a, heartbeat("c1", sub="TagB"))
    r = await c.invoke(a, pull_req("T1", 0, 0, group="CG", sys_flag=0))
    assert [m.body for m in decode_messages(r.body)] == [b"b"]


async def test_lock_batch_over_the_wire(cluster):
    a = cluster.broker_addr
    mq = {"brokerName": "broker-a", "queueId": 0, "topic": "T1"}
    body = lambda cid: json.dumps({"consumerGroup": "G", "clientId": cid, "mqSet": [mq]}).encode()
    r = await cluster.client.invoke(a, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body("c1")))
    assert decode_json(r.body) == {"lockOKMQSet": [mq]}
    r = await cluster.client.invoke(a, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body("c2")))
    assert decode_json(r.body) == {"lockOKMQSet": []}
    await cluster.client.invoke(a, RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=body("c1")))
    r = await cluster.client.invoke(a, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body("c2")))
    assert decode_json(r.body) == {"lockOKMQSet": [mq]}


def send_back(offset, group="CG", delay=0):
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, {
        "offset": offset, "group": group, "delayLevel": delay, "originMsgId": "", "originTopic": "T2"})


async def test_send_back_retry_with_delay_then_dlq(cluster):
    a = cluster.broker_addr
    c = cluster.client
    cluster.broker.groups.update("CG", retry_max_times=2) if cluster.broker.get_group("CG") else None
    r = await c.invoke(a, send_req("T2", b"fail me", queue_id=0))
    stored = decode_messages((await c.invoke(a, pull_req("T2", 0, 0))).body)[0]
    offset = stored.physical_offset
    for expected_rc in (1, 2):
        assert (await c.invoke(a, send_back(offset))).code == 0
        # parked in SCHEDULE_TOPIC_XXXX first, then delivered to %RETRY%CG after the short delay
        with trio.fail_after(5):
            while cluster.broker.max_offset("%RETRY%CG", 0) < expected_rc:
                await trio.sleep(0.02)
        retry = decode_messages((await c.invoke(a, pull_req("%RETRY%CG", 0, expected_rc - 1))).body)[0]
        assert retry.reconsume_times == expected_rc and retry.body == b"fail me"
        assert retry.properties["RETRY_TOPIC"] == "T2"
        assert retry.properties["ORIGIN_MESSAGE_ID"] == stored.msg_id
        assert "DELAY" not in retry.properties and "REAL_TOPIC" not in retry.properties
        offset = retry.physical_offset
    assert (await c.invoke(a, send_back(offset))).code == 0
    dead = decode_messages((await c.invoke(a, pull_req("%DLQ%CG", 0, 0))).body)
    assert [m.reconsume_times for m in dead] == [3]
    r = await c.invoke(a, send_back(10**12))
    assert r.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in r.remark


async def test_delayed_send_and_delay_offsets_file(cluster):
    a = cluster.broker_addr
    c = cluster.client
    t0 = trio.current_time()
    await c.invoke(a, send_req("T3", b"later", queue_id=0, props={"DELAY": "2"}))
    assert cluster.broker.max_offset("T3", 0) == 0
    assert cluster.broker.max_offset("SCHEDULE_TOPIC_XXXX", 1) == 1
    with trio.fail_after(5):
        while cluster.broker.max_offset("T3", 0) < 1:
            await trio.sleep(0.01)
    assert trio.current_time() - t0 >= 0.19
    # the level's offset moves once its send has returned, which is after the message is in T3
    # (a poll can land in between, as in RocketMQ's ScheduleMessageService)
    with trio.fail_after(5):
        while (table := decode_json((await c.invoke(a, RemotingCommand.request(
                RequestCode.GET_ALL_DELAY_OFFSET))).body)) != {"offsetTable": {2: 1}}:
            assert table == {"offsetTable": {}}  # nothing else on the way
            await trio.sleep(0.01)
    await cluster.remoting.schedule.persist()
    text = (cluster.broker.config_dir / "delayOffset.json").read_text()
    assert text == '{"offsetTable":{2:1}}'


async def test_send_v2_short_names(cluster):
    ext = {"a": "PG", "b": "T4", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1", "h": "0",
           "i": encode_properties({"TAGS": "x"}), "j": "0", "k": "false"}
    r = await cluster.client.invoke(cluster.broker_addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"v2"))
    assert r.code == 0 and r.ext_fields["queueId"] == "1"


async def test_query_view_and_admin(cluster):
    a = cluster.broker_addr
    c = cluster.client
    r = await c.invoke(a, send_req("T5", b"findme", queue_id=0, props={"KEYS": "order-42"}))
    msg_id = r.ext_fields["msgId"]
    q = RemotingCommand.request(RequestCode.QUERY_MESSAGE, {"topic": "T5", "key": "order-42", "maxNum": 32,
                                                             "beginTimestamp": 0, "endTimestamp": 2**62})
    with trio.fail_after(5):
        while (r := await c.invoke(a, q)).code != 0:  # the index is written off the send path
            await trio.sleep(0.02)
    assert [m.body for m in decode_messages(r.body)] == [b"findme"]
    q.ext_fields["key"] = "nope"
    assert (await c.invoke(a, q)).code == ResponseCode.QUERY_NOT_FOUND
    offset = int(msg_id[16:], 16)
    r = await c.invoke(a, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}))
    assert decode_messages(r.body)[0].body == b"findme"
    assert decode_messages(r.body)[0].msg_id == msg_id
    r = await c.invoke(a, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "Created", "defaultTopic": "TBW102", "readQueueNums": 3, "writeQueueNums": 3, "perm": 6,
        "topicFilterType": "SINGLE_TAG"}))
    assert r.code == 0
    with trio.fail_after(5):
        while (r := await c.invoke(cluster.namesrv, RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Created"}))).code != 0:
            await trio.sleep(0.01)
    assert decode_json(r.body)["queueDatas"][0]["readQueueNums"] == 3
    r = await c.invoke(a, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "bad topic!", "defaultTopic": "TBW102", "readQueueNums": 3, "writeQueueNums": 3, "perm": 6}))
    assert r.code == ResponseCode.SYSTEM_ERROR
    r = await c.invoke(a, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
    assert decode_json(r.body)["topicConfigTable"]["Created"]["writeQueueNums"] == 3
    r = await c.invoke(a, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    table = decode_json(r.body)["table"]
    assert table["brokerName"] == "broker-a" and all(isinstance(v, str) for v in table.values())
    assert table["commitLogMaxOffset"].isdigit() and int(table["commitLogMaxOffset"]) > 0


async def test_topic_stats_connections_reset_and_delete_over_the_wire(cluster):
    """202, 203, 222 (with 220 to each live client in its language's body form) and 215, as mqadmin sends them."""
    a = cluster.broker_addr
    c = cluster.client
    for i in range(3):
        assert (await c.invoke(a, send_req("TW", b"m%d" % i, queue_id=0))).code == 0
    r = await c.invoke(a, RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "TW"}))
    table = decode_json(r.body)["offsetTable"]  # MessageQueue objects as keys (fastjson)
    q0 = table[(("brokerName", "broker-a"), ("queueId", 0), ("topic", "TW"))]
    assert (q0["minOffset"], q0["maxOffset"]) == (0, 3) and q0["lastUpdateTimestamp"] > 0
    r = await c.invoke(a, RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"}))
    assert r.code == ResponseCode.TOPIC_NOT_EXIST

    got: dict[str, list] = {"JAVA": [], "CPP": []}

    def on_reset(lang):
        async def handler(addr, cmd):
            got[lang].append((cmd.ext_fields, decode_json(cmd.body)))
        return {int(RequestCode.RESET_CONSUMER_CLIENT_OFFSET): handler}

    reset = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                                    {"topic": "TW", "group": "CG", "timestamp": 0, "isForce": True})
    r = await c.invoke(a, reset)
    assert r.code == ResponseCode.SYSTEM_ERROR and "<CG> not exist" in r.remark  # nobody knows CG yet
    async with open_remoting_client(handlers=on_reset("JAVA"), language=LanguageCode.JAVA) as java, \
            open_remoting_client(handlers=on_reset("CPP"), language=LanguageCode.CPP) as cpp:
        assert (await java.invoke(a, heartbeat("java-1", topic="TW"))).code == 0
        assert (await cpp.invoke(a, heartbeat("cpp-1", topic="TW"))).code == 0
        r = await c.invoke(a, RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "CG"}))
        conn = decode_json(r.body)
        assert sorted((x["clientId"], x["language"]) for x in conn["connectionSet"]) == [("cpp-1", "CPP"), ("java-1", "JAVA")]
        assert conn["subscriptionTable"]["TW"]["subString"] == "*" and conn["messageModel"] == "CLUSTERING"
        await c.invoke(a, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET,
                                                  {"consumerGroup": "CG", "topic": "TW", "queueId": 0, "commitOffset": 3}))
        r = await c.invoke(a, reset)
        assert r.code == 0
        mq0 = (("brokerName", "broker-a"), ("queueId", 0), ("topic", "TW"))
        assert decode_json(r.body)["offsetTable"][mq0] == 0
        with trio.fail_after(5):
            while not (got["JAVA"] and got["CPP"]):
                await trio.sleep(0.01)
        (ext, body), = got["JAVA"]
        assert ext["group"] == "CG" and ext["topic"] == "TW" and ext["timestamp"] == "0" and ext["isForce"] == "true"
        assert body["offsetTable"][mq0] == 0
        (ext, body), = got["CPP"]  # ResetOffsetBodyForC: what the C++ client parses
        assert {"brokerName": "broker-a", "offset": 0, "queueId": 0, "topic": "TW"} in body["offsetTable"]
        assert cluster.broker.query_offset("CG", "TW", 0) == 3  # the clients move and commit, not the broker
    with trio.fail_after(5):
        while (r := await c.invoke(a, reset)).code != ResponseCode.CONSUMER_NOT_ONLINE:
            await trio.sleep(0.01)
    assert decode_json(r.body)["offsetTable"][mq0] == 0  # the offsets the admin tool then commits

    r = await c.invoke(a, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TW"}))
    assert r.code == 0 and cluster.broker.get_topic("TW") is None and cluster.broker.query_offset("CG", "TW", 0) is None
    r = await c.invoke(a, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TW"}))
    assert r.code == 0  # idempotent, like Java
    r = await c.invoke(a, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "SCHEDULE_TOPIC_XXXX"}))
    assert r.code == ResponseCode.SYSTEM_ERROR and "system topic" in r.remark


async def test_update_and_create_subscription_group_keeps_known_keys(cluster):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) as Java mqadmin updateSubGroup sends it."""
    a, c = cluster.broker_addr, cluster.client
    body = json.dumps({"groupName": "OrderedGroup", "consumeEnable": True, "consumeMessageOrderly": True,
                       "retryMaxTimes": 3, "groupSysFlag": 0, "consumeTimeoutMinute": 15}).encode()
    r = await c.invoke(a, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body))
    assert r.code == ResponseCode.SUCCESS
    r = await c.invoke(a, RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    group = decode_json(r.body)["subscriptionGroupTable"]["OrderedGroup"]
    assert (group["consumeMessageOrderly"], group["retryMaxTimes"]) == (True, 3)
    for bad in (b"not json", json.dumps({"consumeEnable": True}).encode()):
        r = await c.invoke(a, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, bad))
        assert r.code == ResponseCode.SYSTEM_ERROR and "\n" not in r.remark


async def test_consume_stats_as_mqadmin_consumer_progress_asks(cluster):
    """208: per read queue broker offset, committed offset, last consumed store time,
    MessageQueue objects as keys; the group's topics from its offsets, narrowed to what
    its online clients subscribe to; consumeTps from the group's pulls."""
    a = cluster.broker_addr
    c = cluster.client
    for i in range(5):
        assert (await c.invoke(a, send_req("CS", b"m%d" % i, queue_id=0))).code == 0
    assert (await c.invoke(a, send_req("CS2", b"x", queue_id=0))).code == 0
    r = await c.invoke(a, pull_req("CS", 0, 0, group="CSG"))
    assert r.code == 0
    for topic, committed in (("CS", 3), ("CS2", 1)):
        await c.invoke(a, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "CSG", "topic": topic, "queueId": 0, "commitOffset": committed}))

    def stats(**ext):
        return RemotingCommand.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CSG", **ext})

    body = decode_json((await c.invoke(a, stats(topic="CS"))).body)
    table = body["offsetTable"]
    q0 = table[(("brokerName", "broker-a"), ("queueId", 0), ("topic", "CS"))]
    assert (q0["brokerOffset"], q0["consumerOffset"], q0["pullOffset"]) == (5, 3, 3)
    assert q0["lastTimestamp"] > 0
    q1 = table[(("brokerName", "broker-a"), ("queueId", 1), ("topic", "CS"))]
    assert (q1["brokerOffset"], q1["consumerOffset"], q1["lastTimestamp"]) == (0, 0, 0)
    assert body["consumeTps"] > 0  # the pull of 5 above
    both = decode_json((await c.invoke(a, stats())).body)["offsetTable"]
    assert {dict(k)["topic"] for k in both} == {"CS", "CS2"}
    listed = decode_json((await c.invoke(a, stats(topicList="CS2;Nope"))).body)["offsetTable"]
    assert {dict(k)["topic"] for k in listed} == {"CS2"}
    async with open_remoting_client() as member:  # an online client subscribing to CS only
        assert (await member.invoke(a, heartbeat("m-1", group="CSG", topic="CS"))).code == 0
        narrowed = decode_json((await c.invoke(a, stats())).body)["offsetTable"]
        assert {dict(k)["topic"] for k in narrowed} == {"CS"}
