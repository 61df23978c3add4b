"""RouteTable: registration, routes, expiry (pure, no sockets)."""

from core.namesrv import DataVersion, RouteTable, TopicConfig
from core.namesrv.register_body import RegisterBrokerBody, decode_register_body, encode_register_body

import pytest


def reg(table, addr="10.0.0.1:10911", name="broker-a", bid=0, topics=("T",), now=0, dv=1, channel=None):
    return table.register_broker(
        cluster="C", broker_addr=addr, broker_name=name, broker_id=bid, ha_server_addr=addr.replace("10911", "10912"),
        data_version=DataVersion(dv, dv), topic_configs={t: TopicConfig(t, 4, 4, 6) for t in topics},
        channel=channel, now_ms=now,
    )


def test_register_and_route():
    t = RouteTable()
    reg(t, topics=("T", "TBW102"))
    route = t.route("T")
    assert route == {
        "brokerDatas": [{"brokerAddrs": {0: "10.0.0.1:10911"}, "brokerName": "broker-a", "cluster": "C"}],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}],
    }
    assert t.route("nope") is None
    assert t.topic_list() == ["T", "TBW102"]
    assert t.cluster_info()["clusterAddrTable"] == {"C": ["broker-a"]}


def test_slave_gets_master_and_does_not_change_topics():
    t = RouteTable()
    reg(t)
    r = reg(t, addr="10.0.0.2:10911", bid=1, topics=("OTHER",))
    assert (r.master_addr, r.ha_server_addr) == ("10.0.0.1:10911", "10.0.0.1:10912")
    assert t.route("OTHER") is None
    assert t.route("T")["brokerDatas"][0]["brokerAddrs"] == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}


def test_master_reregistration_replaces_its_topics_only_on_new_version():
    t = RouteTable()
    reg(t, topics=("A", "B"), dv=1)
    reg(t, name="broker-b", addr="10.0.0.3:10911", topics=("B",))
    reg(t, topics=("A",), dv=1)  # same data version: nothing changes
    assert t.route("B") is not None and len(t.route("B")["queueDatas"]) == 2
    reg(t, topics=("A",), dv=2)
    assert [q["brokerName"] for q in t.route("B")["queueDatas"]] == ["broker-b"]


def test_promoted_slave_address_listed_once():
    t = RouteTable()
    reg(t, addr="10.0.0.2:10911", bid=1)
    reg(t, addr="10.0.0.2:10911", bid=0)
    assert t.brokers["broker-a"].addrs == {0: "10.0.0.2:10911"}


def test_expiry_and_channel_close():
    t = RouteTable()
    reg(t, now=0, channel="ch1")
    reg(t, name="broker-b", addr="10.0.0.3:10911", now=100_000, channel="ch2")
    assert t.expire(120_001) == ["10.0.0.1:10911"]
    assert [b["brokerName"] for b in t.route("T")["brokerDatas"]] == ["broker-b"]
    assert t.on_channel_closed("ch2") == ["10.0.0.3:10911"]
    assert t.route("T") is None and t.brokers == {} and t.clusters == {}


def test_delete_topic_of_every_broker_or_of_one_cluster():
    t = RouteTable()
    reg(t, addr="10.0.0.1:10911", name="broker-a", topics=("T", "U"))
    t.register_broker(cluster="Other", broker_addr="10.0.0.2:10911", broker_name="broker-b", broker_id=0,
                      ha_server_addr="", data_version=DataVersion(1, 1),
                      topic_configs={"T": TopicConfig("T", 2, 2, 6)}, now_ms=0)
    assert t.delete_topic("T", "Other") is True
    assert [q["brokerName"] for q in t.route("T")["queueDatas"]] == ["broker-a"]
    assert t.delete_topic("T", "NoCluster") is False
    assert t.delete_topic("T") is True and t.route("T") is None and t.topic_list() == ["U"]
    assert t.delete_topic("T") is False
    reg(t, addr="10.0.0.1:10911", name="broker-a", topics=("T", "U"), dv=2)  # a broker that still has it
    assert t.route("T") is not None


def test_unregister():
    t = RouteTable()
    reg(t)
    reg(t, addr="10.0.0.2:10911", bid=1)
    t.unregister_broker(cluster="C", broker_addr="10.0.0.2:10911", broker_name="broker-a", broker_id=1)
    assert t.brokers["broker-a"].addrs == {0: "10.0.0.1:10911"}
    t.unregister_broker(cluster="C", broker_addr="10.0.0.1:10911", broker_name="broker-a", broker_id=0)
    assert t.route("T") is None and t.live == {}


@pytest.mark.parametrize("compressed", [False, True])
def test_register_body_round_trip(compressed):
    body = RegisterBrokerBody(DataVersion(123, 4), {"T": TopicConfig("T", 2, 3, 7, "MULTI_TAG")}, [])
    raw = encode_register_body(body, compressed=compressed)
    back = decode_register_body(raw, compressed=compressed)
    assert back.data_version == body.data_version
    assert back.topic_configs["T"] == body.topic_configs["T"]


def test_register_body_java_json():
    raw = (b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":2,"timestamp":99},'
           b'"topicConfigTable":{"TopicTest":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",'
           b'"topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4}}}}')
    body = decode_register_body(raw, compressed=False)
    assert body.data_version == DataVersion(99, 2)
    assert body.topic_configs["TopicTest"].write_queue_nums == 4
