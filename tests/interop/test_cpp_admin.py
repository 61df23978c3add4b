"""`mqgate admin` with the C++ client (PyPI `rocketmq` 0.4.4) on the other side: its
message ids, and an offset reset that reaches a live C++ push consumer (RESET_CONSUMER_CLIENT_OFFSET
with the ResetOffsetBodyForC body it parses)."""

import io
import json

from harness import create_topic, wait_for
from test_cpp_client import Inbox, consumer, msg, producer

from core.admin import run_admin


def admin(cluster, *args):
    out, err = io.StringIO(), io.StringIO()
    code = cluster.call(run_admin, ["--namesrv", cluster.namesrv, "--json", *args], out, err)
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


def test_message_id_of_a_cpp_producer(cluster, names):
    """The C++ client's UNIQ_KEY starts with its ip written backwards; as an offset id it names
    1.0.0.127 (the issue: `message id` dialled it). It is found by its UNIQ_KEY, with or without --topic."""
    topic = names("TopicCppId")
    create_topic(cluster, topic)
    p = producer(cluster, names("PG"))
    try:
        sent = p.send_sync(msg(topic, "find me by id"))
    finally:
        p.shutdown()
    for args in ((sent.msg_id,), (sent.msg_id, "--topic", topic)):
        found = admin(cluster, "message", "id", *args)
        assert found["kind"] == "uniqKey" and [m["body"] for m in found["messages"]] == ["find me by id"]


def test_reset_offset_reaches_a_live_cpp_consumer(cluster, names):
    topic, cg = names("TopicCppReset"), names("CG")
    create_topic(cluster, topic)
    p = producer(cluster, names("PG"))
    try:
        for i in range(6):
            p.send_sync(msg(topic, f"r{i}"))
    finally:
        p.shutdown()
    inbox = Inbox()
    c = consumer(cluster, cg, topic, inbox)
    try:
        assert wait_for(lambda: len(inbox) >= 6, 30), len(inbox)
        assert wait_for(lambda: admin(cluster, "group", "progress", cg, "--topic", topic)["totalLag"] == 0, 20)
        result = admin(cluster, "group", "reset-offset", cg, topic, "0")
        assert {q["appliedBy"] for q in result["queues"]} == {"clients"}
        assert wait_for(lambda: len(inbox) >= 12, 30), len(inbox)
        assert sorted(inbox.bodies()[6:]) == sorted(inbox.bodies()[:6])
    finally:
        c.shutdown()


def test_group_status_of_a_live_cpp_consumer(cluster, names):
    """GET_CONSUMER_RUNNING_INFO (307) reaches the C++ push consumer through the broker, and
    its own ConsumerRunningInfo comes back: its queues and their commit offsets."""
    topic, cg = names("TopicCppStatus"), names("CG")
    create_topic(cluster, topic)
    p = producer(cluster, names("PG"))
    try:
        for i in range(4):
            p.send_sync(msg(topic, f"s{i}"))
    finally:
        p.shutdown()
    inbox = Inbox()
    c = consumer(cluster, cg, topic, inbox)
    try:
        assert wait_for(lambda: len(inbox) >= 4, 30), len(inbox)
        assert wait_for(lambda: admin(cluster, "group", "progress", cg, "--topic", topic)["totalLag"] == 0, 20)
        (row,) = admin(cluster, "group", "status", cg)["clients"]
        assert row["queues"] >= 4
        report = admin(cluster, "group", "status", cg, "--client", row["clientId"])
        mine = [q for q in report["queues"] if q["topic"] == topic]
        assert len(mine) == 4 and sum(q["commitOffset"] for q in mine) == 4
        assert topic in {s["topic"] for s in report["subscriptions"]}
        assert report["properties"]["PROP_NAMESERVER_ADDR"] == cluster.namesrv
    finally:
        c.shutdown()
