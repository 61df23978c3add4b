"""ACL on: the C++ client's signed requests pass, a wrong secret or a denied topic is refused."""

import pytest

from harness import ClusterThread, create_topic, wait_for
from rocketmq.client import Message, Producer, PushConsumer, SendStatus
from rocketmq.exceptions import ProducerSendSyncFailed

ACL = """
[[accounts]]
accessKey = "cppclient"
secretKey = "cppsecret"
defaultTopicPerm = "PUB|SUB"
defaultGroupPerm = "SUB"
topicPerms = ["Forbidden=DENY"]
"""


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("interop-acl")
    (d / "acl.toml").write_text(ACL)
    c = ClusterThread(str(d / "store"), acl=str(d / "acl.toml")).start()
    yield c
    c.stop()


def producer(cluster, group, secret):
    p = Producer(group, timeout=2000)
    p.set_namesrv_addr(cluster.namesrv)
    p.set_session_credentials("cppclient", secret, "ALIYUN")
    p.start()
    return p


def msg(topic, body):
    m = Message(topic)
    m.set_body(body)
    return m


def test_signed_send_and_consume(acl_cluster, names):
    topic = names("AclTopic")
    create_topic(acl_cluster, topic, 2)
    p = producer(acl_cluster, names("PG"), "cppsecret")
    got = []
    c = PushConsumer(names("CG"))
    c.set_namesrv_addr(acl_cluster.namesrv)
    c.set_session_credentials("cppclient", "cppsecret", "ALIYUN")
    c.subscribe(topic, lambda m: got.append(m.body))
    c.start()
    try:
        assert p.send_sync(msg(topic, "signed")).status == SendStatus.OK
        assert wait_for(lambda: got == [b"signed"], 20), got
    finally:
        c.shutdown()
        p.shutdown()


def test_wrong_secret_and_denied_topic_are_refused(acl_cluster, names):
    topic = names("AclTopic2")
    create_topic(acl_cluster, topic, 2)
    create_topic(acl_cluster, "Forbidden", 2)
    bad = producer(acl_cluster, names("PG"), "not-the-secret")
    good = producer(acl_cluster, names("PG2"), "cppsecret")
    try:
        with pytest.raises(ProducerSendSyncFailed):
            bad.send_sync(msg(topic, "x"))
        with pytest.raises(ProducerSendSyncFailed):
            good.send_sync(msg("Forbidden", "x"))
        assert good.send_sync(msg(topic, "ok")).status == SendStatus.OK
    finally:
        bad.shutdown()
        good.shutdown()
