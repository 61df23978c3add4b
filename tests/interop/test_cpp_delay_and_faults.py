"""Delay level 3 with the default levels (10 s), and malformed frames next to a working C++ client."""

import socket
import struct
import time

import pytest

from harness import ClusterThread, create_topic, wait_for
from rocketmq.client import Message, Producer, PushConsumer, SendStatus


@pytest.fixture(scope="module")
def default_levels_cluster(tmp_path_factory):
    c = ClusterThread(str(tmp_path_factory.mktemp("interop-delay"))).start()  # default 4.x levels
    yield c
    c.stop()


def test_delay_level_3_arrives_about_10s_after_store(default_levels_cluster, names):
    cluster = default_levels_cluster
    topic, pg, cg = names("TopicDelay"), names("PG"), names("CG")
    create_topic(cluster, topic, 4)
    got = []
    c = PushConsumer(cg)
    c.set_namesrv_addr(cluster.namesrv)
    c.subscribe(topic, lambda m: got.append((time.time(), m.body, m.store_timestamp, m.delay_time_level)))
    c.start()
    p = Producer(pg)
    p.set_namesrv_addr(cluster.namesrv)
    p.start()
    try:
        time.sleep(0.5)
        m = Message(topic)
        m.set_body("later")
        m.set_delay_time_level(3)
        sent_at = time.time()
        assert p.send_sync(m).status == SendStatus.OK
        plain = Message(topic)
        plain.set_body("now")
        p.send_sync(plain)
        assert wait_for(lambda: any(b == b"now" for _, b, *_ in got), 10)
        assert not any(b == b"later" for _, b, *_ in got)
        assert wait_for(lambda: any(b == b"later" for _, b, *_ in got), 15)
        (arrived, _b, _st, _lvl), = [g for g in got if g[1] == b"later"]
        assert 9.5 <= arrived - sent_at <= 12.0, arrived - sent_at
    finally:
        c.shutdown()
        p.shutdown()


BAD = {
    "length_lies": struct.pack(">ii", 2, 0),
    "header_longer_than_frame": struct.pack(">ii", 10, 100) + b"x" * 6,
    "bad_json": struct.pack(">ii", 4 + 7, 7) + b"{nope:1",
    "over_16_MiB": struct.pack(">ii", 16 * 1024 * 1024 + 10, 5),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_malformed_frame_closes_only_that_connection(cluster, names, kind):
    topic, pg = names("TopicFault"), names("PG")
    p = Producer(pg)
    p.set_namesrv_addr(cluster.namesrv)
    p.start()
    try:
        assert p.send_sync(_msg(topic, "before")).status == SendStatus.OK
        for addr in (cluster.broker_addr, cluster.namesrv):
            host, port = addr.split(":")
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(BAD[kind])
            assert s.recv(1024) == b""  # the server closed this connection
            s.close()
        assert p.send_sync(_msg(topic, "after")).status == SendStatus.OK
    finally:
        p.shutdown()


def _msg(topic, body):
    m = Message(topic)
    m.set_body(body)
    return m
