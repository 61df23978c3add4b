"""``format("rocketmq")`` planning without a cluster or a JVM: options, positions, ranges, trigger caps."""

from __future__ import annotations

import pytest

from spark.cluster import read_order
from spark.cluster_options import ClusterOptions, Position
from spark.rocketmq_source import QueueRange, RocketMQStreamReader, rate_limit, split

BASE = {"namesrv": "127.0.0.1:9876;10.0.0.2:9876", "topic": "Orders"}


def parse(mode="batch", **opts):
    return ClusterOptions.parse({**BASE, **opts}, None, mode)


def test_positions_parse_to_per_queue_offsets():
    o = parse(startingOffsets='{"Orders": {"broker-a:0": 12, "broker-b:3": -2}}',
              endingOffsets='{"Orders": {"broker-a:0": 40}}')
    assert o.starting == Position("queues", queues=(("broker-a:0", 12), ("broker-b:3", -2)))
    assert o.ending == Position("queues", queues=(("broker-a:0", 40),))
    assert parse(startingOffsets='{"timestamp": "2026-01-01T00:00:00"}').starting == Position("timestamp", 1767225600000)
    assert parse("stream", startingOffsets="latest").starting == Position("latest")
    assert parse().columns[-1] == "broker"


@pytest.mark.parametrize("opts, message", [
    ({"namesrv": ""}, "rocketmq: give the name servers"),
    ({"namesrv": "nohost"}, "rocketmq: namesrv must be host:port"),
    ({"topic": "a/b"}, "rocketmq: topic must be a broker topic name"),
    ({"subscribe": "Orders"}, "rocketmq: 'subscribe' does not apply to this source (use topic)"),
    ({"topic2": "x"}, "rocketmq: unknown option 'topic2'"),
    ({"endingOffsets": "earliest"}, "rocketmq: endingOffsets=earliest would make the read empty"),
    ({"endingOffsets": '{"Orders": {"broker-a:0": -2}}'}, "-2 (earliest) cannot end a read"),
    ({"startingOffsets": '{"Orders": {"broker-a:0": "x"}}'}, "needs a queue offset >= 0"),
    ({"startingOffsets": "12"}, "rocketmq: startingOffsets must be earliest, latest"),
    ({"maxOffsetsPerPartition": "0"}, "rocketmq: maxOffsetsPerPartition must be a positive whole number"),
    ({"mqttTopicFilter": "a/#/b"}, "rocketmq: mqttTopicFilter:"),
])
def test_bad_options_are_one_line_errors(opts, message):
    with pytest.raises(ValueError) as e:
        parse(**opts)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_ranges_cover_each_offset_once():
    spans = [("broker-a:0", 0, 10), ("broker-b:1", 5, 6)]
    parts = split(spans, 4, 1)
    assert [p[0] for p in parts] == [QueueRange("broker-a", 0, 0, 4), QueueRange("broker-a", 0, 4, 8),
                                     QueueRange("broker-a", 0, 8, 10), QueueRange("broker-b", 1, 5, 6)]
    fine = split(spans, 1000, 6)  # minPartitions: 11 offsets into tasks of at most 2
    assert sum(r.end - r.start for p in fine for r in p) == 11 and len(fine) >= 6


def test_trigger_cap_is_shared_by_backlog_and_never_exceeded():
    begin = {"a:0": 0, "a:1": 100, "b:0": 7}
    want = {"a:0": 300, "a:1": 200, "b:0": 7, "b:1": 0}
    assert rate_limit(begin, want, None) == want
    got = rate_limit(begin, want, 100)
    assert sum(got[k] - begin.get(k, 0) for k in got) == 100
    assert got["a:0"] == 75 and got["a:1"] == 125 and got["b:0"] == 7 and got["b:1"] == 0
    assert rate_limit(begin, want, 1000) == want


def test_replicas_are_asked_slaves_first():
    assert read_order({0: "master", 2: "slave-2", 1: "slave-1"}) == ["slave-1", "slave-2", "master"]
    assert read_order({0: "master"}) == ["master"]


def test_a_checkpoint_of_another_topic_is_refused():
    reader = RocketMQStreamReader(parse("stream"))
    assert reader._offsets({"Orders": {"broker-a:0": 3}}) == {"broker-a:0": 3}
    with pytest.raises(ValueError, match="rocketmq: the checkpoint holds offsets of topic 'Payments', this query reads 'Orders'"):
        reader._offsets({"Payments": {"broker-a:0": 3}})
