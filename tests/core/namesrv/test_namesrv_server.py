"""The name server over real sockets: registration, routes in both JSON forms, expiry."""

import trio
import trio.testing

from core.namesrv import BrokerIdentity, BrokerRegistrar, NameServer, run_namesrv
from core.remoting import RemotingCommand, RequestCode, ResponseCode, decode_json
from core.remoting.client import open_remoting_client
from core.remoting.server import RemotingServer

WRAPPER = {
    "dataVersion": {"counter": 1, "timestamp": 5},
    "topicConfigTable": {
        "TBW102": {"perm": 7, "readQueueNums": 8, "topicName": "TBW102", "writeQueueNums": 8},
        "TopicTest": {"perm": 6, "readQueueNums": 4, "topicName": "TopicTest", "writeQueueNums": 4},
    },
}


async def dead_port():
    """A port with nothing listening on it."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()
    return port


async def route(client, addr, topic, **kw):
    req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, **kw.pop("ext", {})})
    if "version" in kw:
        req.version = kw["version"]
    return await client.invoke(addr, req)


async def test_register_with_every_namesrv_and_route_forms(nursery):
    p1 = await nursery.start(run_namesrv, "127.0.0.1", 0)
    p2 = await nursery.start(run_namesrv, "127.0.0.1", 0)
    down = await dead_port()
    addrs = [f"127.0.0.1:{p1}", f"127.0.0.1:{down}", f"127.0.0.1:{p2}"]
    async with open_remoting_client() as client:
        reg = BrokerRegistrar(client, addrs, BrokerIdentity("DefaultCluster", "broker-a", "127.0.0.1:10911"),
                              lambda: WRAPPER, timeout=2, compressed=True)
        results = await reg.register_all()
        assert isinstance(results[addrs[1]], Exception)
        assert results[addrs[0]].code == 0 and results[addrs[2]].code == 0
        async with open_remoting_client(version=59) as cpp:
            for a in (addrs[0], addrs[2]):
                old = await route(cpp, a, "TopicTest")
                assert old.code == 0
                assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in old.body
                assert b" " not in old.body
                doc = decode_json(old.body)
                assert doc["queueDatas"][0]["writeQueueNums"] == 4
        async with open_remoting_client(version=397) as java:
            new = await route(java, addrs[0], "TopicTest")
            assert b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in new.body
        async with open_remoting_client(version=59) as cpp:
            std = await route(cpp, addrs[0], "TopicTest", ext={"acceptStandardJsonOnly": "true"})
            assert b'{"0":' in std.body
            missing = await route(cpp, addrs[0], "Nope")
            assert missing.code == ResponseCode.TOPIC_NOT_EXIST
            ci = await cpp.invoke(addrs[0], RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert decode_json(ci.body)["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
            tl = await cpp.invoke(addrs[0], RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
            assert decode_json(tl.body) == {"topicList": ["TBW102", "TopicTest"]}
            tc = await cpp.invoke(addrs[0], RemotingCommand.request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"}))
            assert decode_json(tc.body) == {"topicList": ["TBW102", "TopicTest"]}


async def test_broker_removed_when_its_connection_closes(nursery):
    port = await nursery.start(run_namesrv, "127.0.0.1", 0)
    addr = f"127.0.0.1:{port}"
    async with open_remoting_client() as broker_side:
        reg = BrokerRegistrar(broker_side, [addr], BrokerIdentity("C", "b", "127.0.0.1:1"), lambda: WRAPPER)
        await reg.register_all()
        async with open_remoting_client() as client:
            assert (await route(client, addr, "TopicTest")).code == 0
    async with open_remoting_client() as client:
        with trio.fail_after(5):
            while (await route(client, addr, "TopicTest")).code == 0:
                await trio.sleep(0.01)


async def test_bad_register_body_is_an_error_not_a_crash(nursery):
    port = await nursery.start(run_namesrv, "127.0.0.1", 0)
    async with open_remoting_client() as client:
        req = RemotingCommand.request(RequestCode.REGISTER_BROKER, {
            "brokerName": "b", "brokerAddr": "1.2.3.4:5", "clusterName": "C", "haServerAddr": "", "brokerId": "0",
            "compressed": "true"}, b"not zlib")
        resp = await client.invoke(f"127.0.0.1:{port}", req)
        assert resp.code == ResponseCode.SYSTEM_ERROR
        req = RemotingCommand.request(RequestCode.REGISTER_BROKER, {"brokerName": "b"}, b"{}")
        resp = await client.invoke(f"127.0.0.1:{port}", req)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "is null" in resp.remark


def test_expiry_after_120s_without_registration():
    async def main():
        ns = NameServer()
        server = RemotingServer(ns.routes(), idle_timeout=0)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve, "127.0.0.1", 0)
            async with open_remoting_client() as client:
                reg = BrokerRegistrar(client, [f"127.0.0.1:{port}"], BrokerIdentity("C", "b", "127.0.0.1:1"), lambda: WRAPPER)
                await reg.register_all()
                await trio.sleep(119)
                assert ns.expire() == []
                await trio.sleep(2)
                assert ns.expire() == ["127.0.0.1:1"]
                assert ns.table.route("TopicTest") is None
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
