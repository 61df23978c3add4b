"""Send, pull, offsets and routes through the broker's remoting role."""

import trio

from core.remoting import RemotingCommand, RequestCode, ResponseCode, decode_json
from core.store.batch import encode_batch
from core.store.message import decode_messages

from wire import pull_req, send_req


async def test_send_then_pull(cluster):
    c = cluster.client
    resp = await c.invoke(cluster.broker_addr, send_req("TopicA", b"hello", queue_id=1))
    assert resp.code == 0, resp
    assert resp.ext_fields["queueId"] == "1" and resp.ext_fields["queueOffset"] == "0"
    assert len(resp.ext_fields["msgId"]) == 32
    pulled = await c.invoke(cluster.broker_addr, pull_req("TopicA", 1, 0))
    assert pulled.code == 0 and pulled.remark == "FOUND"
    assert pulled.ext_fields["nextBeginOffset"] == "1" and pulled.ext_fields["maxOffset"] == "1"
    msgs = decode_messages(pulled.body)
    assert [m.body for m in msgs] == [b"hello"]
    assert msgs[0].born_host[:4] == bytes([127, 0, 0, 1])
    # the new topic was registered with the name server right away
    with trio.fail_after(5):
        while True:
            r = await c.invoke(cluster.namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}))
            if r.code == 0:
                break
            await trio.sleep(0.02)
    assert decode_json(r.body)["queueDatas"][0]["writeQueueNums"] == 4


async def test_long_poll_wakes_on_send(cluster):
    c = cluster.client
    await c.invoke(cluster.broker_addr, send_req("TopicB", b"first", queue_id=0))
    got = []

    async def poll():
        got.append(await c.invoke(cluster.broker_addr, pull_req("TopicB", 0, 1, suspend_ms=10000), timeout=15))

    async with trio.open_nursery() as n:
        n.start_soon(poll)
        await trio.sleep(0.3)
        assert not got
        t0 = trio.current_time()
        await c.invoke(cluster.broker_addr, send_req("TopicB", b"second", queue_id=0))
    assert trio.current_time() - t0 < 2
    assert got[0].code == 0 and [m.body for m in decode_messages(got[0].body)] == [b"second"]


async def test_pull_status_table(cluster):
    c = cluster.client
    await c.invoke(cluster.broker_addr, send_req("TopicC", b"x", queue_id=0))
    r = await c.invoke(cluster.broker_addr, pull_req("TopicC", 0, 1))
    assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext_fields["nextBeginOffset"] == "1"
    r = await c.invoke(cluster.broker_addr, pull_req("TopicC", 0, 5))
    assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.ext_fields["nextBeginOffset"] == "0"  # min is 0 (Java nextOffsetCorrection)
    r = await c.invoke(cluster.broker_addr, pull_req("TopicC", 0, 0, sub="Other"))
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.ext_fields["nextBeginOffset"] == "1"
    r = await c.invoke(cluster.broker_addr, pull_req("TopicC", 0, 0, sys_flag=0))
    assert r.code == ResponseCode.SUBSCRIPTION_NOT_EXIST


async def test_cpp_batch_flag_stores_each_message(cluster):
    c = cluster.client
    body = encode_batch([(b"m%d" % i, 0, {"UNIQ_KEY": "%032d" % i}) for i in range(5)])
    r = await c.invoke(cluster.broker_addr, send_req("TopicD", body, queue_id=0, batch="1"))
    assert r.code == 0 and r.ext_fields["msgId"].count(",") == 4
    r = await c.invoke(cluster.broker_addr, pull_req("TopicD", 0, 0))
    assert [m.body for m in decode_messages(r.body)] == [b"m%d" % i for i in range(5)]


async def test_offsets(cluster):
    c = cluster.client
    a = cluster.broker_addr
    for i in range(3):
        await c.invoke(a, send_req("TopicE", b"x", queue_id=2))
    q = lambda code, **ext: c.invoke(a, RemotingCommand.request(code, {"topic": "TopicE", "queueId": 2, **ext}))
    assert (await q(RequestCode.GET_MAX_OFFSET)).ext_fields["offset"] == "3"
    assert (await q(RequestCode.GET_MIN_OFFSET)).ext_fields["offset"] == "0"
    r = await q(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="NEW")
    assert r.code == 0 and r.ext_fields["offset"] == "0"
    await c.invoke_oneway(a, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "topic": "TopicE", "queueId": 2, "consumerGroup": "NEW", "commitOffset": 2}))
    with trio.fail_after(5):
        while (await q(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="NEW")).ext_fields["offset"] != "2":
            await trio.sleep(0.01)
    r = await q(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=0)
    assert r.code == 0 and r.ext_fields["offset"] == "0"
    r = await q(RequestCode.GET_EARLIEST_MSG_STORETIME)
    assert r.code == 0 and int(r.ext_fields["timestamp"]) > 0


async def test_unknown_code(cluster):
    r = await cluster.client.invoke(cluster.broker_addr, RemotingCommand.request(12345))
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_a_read_of_many_sends_keeps_order_and_answers_each(cluster):
    """Frames of one write go through the batch path: order kept, a bad header answered alone."""
    from core.remoting import FrameDecoder, encode_frame

    await cluster.client.invoke(cluster.broker_addr, send_req("TopicF", b"create", queue_id=0))
    reqs = []
    for i in range(40):
        if i == 10:
            r = send_req("TopicF", b"bad")
            del r.ext_fields["queueId"]
        elif i == 20:
            r = send_req("TopicNewInBatch", b"new", queue_id=0)  # auto-created: served alone, in place
        else:
            r = send_req("TopicF", b"%d" % i, queue_id=0)
        r.opaque = 1000 + i
        reqs.append(r)
    host, port = cluster.broker_addr.split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(b"".join(encode_frame(r) for r in reqs))
    dec, got = FrameDecoder(), []
    with trio.fail_after(5):
        while len(got) < 40:
            dec.receive_data(await stream.receive_some(65536))
            got.extend(dec.frames())
    await stream.aclose()
    assert [g.opaque for g in got] == [1000 + i for i in range(40)]
    assert got[10].code == ResponseCode.SYSTEM_ERROR and "queueId" in got[10].remark
    assert all(g.code == 0 for i, g in enumerate(got) if i != 10)
    r = await cluster.client.invoke(cluster.broker_addr, pull_req("TopicF", 0, 1))
    bodies = [m.body for m in decode_messages(r.body)]
    assert bodies == [b"%d" % i for i in range(40) if i not in (10, 20)][:32]
