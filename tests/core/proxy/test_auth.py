"""The gRPC access check (`core.proxy.auth`): signatures as the 5.x clients make them,
against plain-ACL accounts, and the permission each call needs."""

from __future__ import annotations

import pytest

from core.processors.acl import PlainAcl
from core.proxy import pb
from core.proxy.auth import AccessCheck, grpc_signature, resources

ACL = PlainAcl({
    "globalWhiteRemoteAddresses": ["10.9.*"],
    "accounts": [
        {"accessKey": "rocketmq2", "secretKey": "12345678", "defaultTopicPerm": "PUB|SUB",
         "defaultGroupPerm": "SUB", "topicPerms": ["secret=DENY"]},
        {"accessKey": "readonly1", "secretKey": "87654321", "defaultTopicPerm": "SUB", "defaultGroupPerm": "SUB",
         "whiteRemoteAddress": "10.1.1.*"},
    ],
})


def headers(ak: str, sk: str, date: str = "20261126T230000Z", signed: str = "x-mq-date-time") -> list:
    auth = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders={signed}, Signature={grpc_signature(sk, date)}"
    return [("x-mq-date-time", date), ("authorization", auth)]


def send(topic: str) -> pb.SendMessageRequest:
    req = pb.SendMessageRequest()
    req.messages.add().topic.name = topic
    return req


def receive(topic: str, group: str) -> pb.ReceiveMessageRequest:
    req = pb.ReceiveMessageRequest()
    req.message_queue.topic.name, req.group.name = topic, group
    return req


@pytest.mark.parametrize("md, method, req, peer, code", [
    (headers("rocketmq2", "12345678"), "SendMessage", send("orders"), "ipv4:127.0.0.1:5000", None),
    (headers("rocketmq2/cn-hangzhou/", "12345678"), "SendMessage", send("orders"), "ipv4:127.0.0.1:5", None),
    (headers("rocketmq2", "wrong"), "SendMessage", send("orders"), "ipv4:127.0.0.1:5000", pb.UNAUTHORIZED),
    (headers("rocketmq2", "12345678", signed="x-other"), "QueryRoute", pb.QueryRouteRequest(),
     "ipv4:127.0.0.1:5", pb.UNAUTHORIZED),
    ([], "QueryRoute", pb.QueryRouteRequest(), "ipv4:127.0.0.1:5000", pb.UNAUTHORIZED),
    (headers("nobody12", "12345678"), "Telemetry", None, "ipv4:127.0.0.1:5000", pb.UNAUTHORIZED),
    (headers("rocketmq2", "12345678"), "SendMessage", send("secret"), "ipv4:127.0.0.1:5000", pb.FORBIDDEN),
    (headers("readonly1", "87654321"), "SendMessage", send("orders"), "ipv4:127.0.0.1:5000", pb.FORBIDDEN),
    (headers("readonly1", "87654321"), "ReceiveMessage", receive("orders", "G"), "ipv4:127.0.0.1:5", None),
    (headers("readonly1", "bad"), "ReceiveMessage", receive("orders", "G"), "ipv6:[::ffff:10.1.1.7]:5", None),
    ([], "SendMessage", send("secret"), "ipv4:10.9.0.1:5000", None),  # a global white address
])
def test_signatures_and_permissions(md, method, req, peer, code):
    got = AccessCheck(ACL).refusal(method, req, md, peer)
    assert (got.code if got is not None else None) == code
    assert got is None or "\n" not in got.message


def test_no_acl_lets_everything_through_and_resources_name_topics_and_groups():
    assert AccessCheck(None).refusal("SendMessage", send("x"), [], "ipv4:1.2.3.4:5") is None
    assert resources("ReceiveMessage", receive("T", "G")) == {"T": 8, "%RETRY%G": 8}
    assert resources("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="T"))) == {"T": 4 | 8}
