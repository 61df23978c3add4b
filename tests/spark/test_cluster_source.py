"""``format("rocketmq")`` over a real cluster: a name server, two broker groups, etcd.

Real processes on loopback, started once for this module: etcd, a name
server, group ``g1`` (two brokers with etcd failover: a SYNC_MASTER and a
slave, whichever etcd elects) and group ``g2`` (one ASYNC_MASTER). Messages
are sent with our client (`core.client.Producer`) and counted by message id
(the ``UNIQ_KEY`` property the client sets).

Shown, in this order (the last test fails a master over, so it runs last):
- options are checked like the commitlog source's (unknown, Kafka-only,
  wrong kind of read, malformed positions); a batch read returns every
  message once with the documented columns, per-queue JSON positions bound
  the read, each action reads to the end of its moment, and g1's slave
  serves the reads (its master never sees a pull);
- `mqgate telemetry --namesrv --topic` aggregates over the cluster;
- a streaming query writing parquet with a checkpoint counts every message
  exactly once across a stop and restart of the query, a `maxOffsetsPerTrigger`
  cap, and a SIGKILL of g1's master while the query runs.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter

import pytest
import trio

from core.client import Message, Producer
from core.client.api import open_client_api
from core.client.model import MessageQueue
from etcd_process import EtcdProcess
from ha_group import Group, ha_status, wait_until
from spark import cluster, telemetry

LEASE = {"haLeaseTtlMs": 3000}
QUEUES = 4


class TwoGroups:
    def __init__(self, root):
        self.etcd = EtcdProcess(root / "etcd").start()
        self.g1 = Group(root, "g1")
        self.g2 = Group(root, "g2")
        self.g2.ns_port = self.g1.ns_port  # one name server for both groups
        self.g1.start_namesrv()
        for label, bid in (("a0", 0), ("a1", 1)):
            self.g1.broker(label, bid, "SYNC_MASTER" if bid == 0 else "SLAVE", etcdEndpoints=self.etcd.endpoint,
                           **LEASE).start()
        # g2 runs its retention check every 0.3 s at any hour: a test ages segments to make data loss
        self.g2.broker("b0", 0, "ASYNC_MASTER", deleteWhen="*", cleanResourceInterval=300).start()
        self.master = trio.run(self._elected, ["a0", "a1"])
        self.created: set[str] = set()

    @property
    def namesrv(self) -> str:
        return self.g1.namesrv

    async def _elected(self, labels) -> str:
        async def master():
            for label in labels:
                st = await ha_status(self.g1.addr(label))
                if st and st["role"].endswith("MASTER") and any(s["inSync"] for s in st["slaves"]):
                    return label
            return None

        return await wait_until(master, 60, "g1 elects a master and its slave follows")

    def create_topic(self, topic: str) -> None:
        async def create():
            async with open_client_api(5.0) as api:
                for addr in (self.g1.addr(self.master), self.g2.addr("b0")):
                    await api.create_topic(addr, topic, QUEUES, QUEUES)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:  # both groups registered the topic with the name server
                    route = await api.get_route(self.namesrv, topic)
                    if route is not None and {q.broker_name for q in route.queue_datas} == {"g1", "g2"}:
                        return
                    await trio.sleep(0.2)
                raise AssertionError(f"{topic}: not routed to both groups")

        trio.run(create)
        self.created.add(topic)

    def send(self, topic: str, n: int, tag: str, props=None) -> list[str]:
        """``n`` messages; the ids of those stored. A status other than SEND_OK (SLAVE_NOT_AVAILABLE: a
        SYNC_MASTER whose slave is gone) still means stored, as in RocketMQ; an exception fails the test."""
        ids = []
        self.statuses = Counter()
        with Producer(self.namesrv, f"PG_{tag}", send_timeout=5.0, retry_times=3) as p:
            for i in range(n):
                body = props(i)[1] if props else f"{tag}-{i}".encode()
                msg = Message(topic, body, properties=props(i)[0] if props else None)
                r = p.send(msg)
                self.statuses[r.status.name] += 1
                ids.append(r.msg_id)
        return ids

    def stop(self) -> None:
        self.g2.stop_all()
        self.g1.stop_all()
        self.etcd.kill()


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    c = TwoGroups(tmp_path_factory.mktemp("two-groups"))
    yield c
    c.stop()


def _ids(df) -> Counter:
    return Counter(r[0] for r in df.selectExpr("properties['UNIQ_KEY']").collect())


def test_batch_read_options_positions_and_each_action_to_the_end(spark, groups):
    groups.create_topic("SparkBatch")
    sent = groups.send("SparkBatch", 120, "batch")
    assert len(sent) == 120

    def read(**opts):
        r = spark.read.format("rocketmq").option("namesrv", groups.namesrv).option("topic", "SparkBatch")
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load()

    slave = "a1" if groups.master == "a0" else "a0"

    async def slave_has_topic():
        async with open_client_api(5.0) as api:
            return await api.topic_stats(groups.g1.addr(slave), "SparkBatch") is not None

    trio.run(wait_until, slave_has_topic, 30, "g1's slave has the topic (metadata sync)")
    df = read()
    assert df.columns == ["topic", "queue_id", "queue_offset", "commitlog_offset", "born_ts", "store_ts", "tags",
                          "keys", "properties", "mqtt_topic", "body", "broker"]
    got = _ids(df)
    assert set(got) == set(sent) and max(got.values()) == 1
    per_queue = {(r.broker, r.queue_id): r[2] for r in df.groupBy("broker", "queue_id").count()
                 .selectExpr("broker", "queue_id", "count").collect()}
    assert {b for b, _q in per_queue} == {"g1", "g2"} and sum(per_queue.values()) == 120
    # every queue holds offsets 0..n-1, each once
    offs = df.groupBy("broker", "queue_id").agg({"queue_offset": "max"}).collect()
    assert all(r[2] == per_queue[(r.broker, r.queue_id)] - 1 for r in offs)

    # slaves first: g1's master never saw a pull (a pull auto-creates the group on the broker it reaches)
    async def groups_of(addr):
        async with open_client_api(5.0) as api:
            return set(await api.all_subscription_groups(addr))

    assert "MQGATE_SPARK" in trio.run(groups_of, groups.g2.addr("b0"))  # g2 has no slave: its master serves
    assert "MQGATE_SPARK" not in trio.run(groups_of, groups.g1.addr(groups.master))

    # each action reads to the end of its moment
    more = groups.send("SparkBatch", 10, "batch2")
    got = _ids(df)
    assert set(got) == set(sent + more) and max(got.values()) == 1

    # per-queue JSON: g1:0 from offset 2, g2:1 up to offset 3 (exclusive); others whole
    n10, n21 = per_queue[("g1", 0)], per_queue[("g2", 1)]
    bounded = read(startingOffsets=json.dumps({"SparkBatch": {"g1:0": 2}}),
                   endingOffsets=json.dumps({"SparkBatch": {"g2:1": 3}}))
    rows = bounded.select("broker", "queue_id", "queue_offset").collect()
    assert min(r.queue_offset for r in rows if (r.broker, r.queue_id) == ("g1", 0)) == 2
    assert sorted(r.queue_offset for r in rows if (r.broker, r.queue_id) == ("g2", 1)) == [0, 1, 2]
    assert n10 > 2 and n21 > 3
    assert read(startingOffsets=json.dumps({"timestamp": int(time.time() * 1000) + 60_000})).count() == 0
    assert read(mqttTopicFilter="x/#").count() == 0  # native messages have no MQTT topic

    for opts, msg in [
        ({"topics": "SparkBatch"}, "rocketmq: 'topics' does not apply to this source (use topic (one topic per read))"),
        ({"startingOffset": "earliest"}, "rocketmq: unknown option 'startingOffset' (did you mean startingOffsets?)"),
        ({"maxOffsetsPerTrigger": "10"}, "rocketmq: maxOffsetsPerTrigger applies to streaming reads"),
        ({"startingOffsets": "latest"}, "rocketmq: startingOffsets=latest is for streams"),
        ({"startingOffsets": '{"SparkBatch": {"g9:0": 1}}'}, "rocketmq: startingOffsets: SparkBatch has no queue g9:0"),
        ({"startingOffsets": '{"Other": {"g1:0": 1}}'}, "the topic read is 'SparkBatch'"),
        ({"startingOffsets": '{"SparkBatch": {"g1-0": 1}}'}, "a queue is named '<broker>:<queue id>'"),
        ({"failOnDataLoss": "maybe"}, "rocketmq: failOnDataLoss must be true or false"),
        ({"startingOffsets": '{"SparkBatch": {"g1:0": 100000}}'}, "rocketmq: startingOffsets: queue g1:0 offset 100000 is past its end"),
    ]:
        with pytest.raises(Exception, match="(?i)" + re.escape(msg)):  # Spark lower-cases names
            read(**opts).count()
    with pytest.raises(Exception, match="rocketmq: the name servers know no topic 'NoSuchTopic'"):
        spark.read.format("rocketmq").option("namesrv", groups.namesrv).option("topic", "NoSuchTopic").load().count()
    with pytest.raises(Exception, match="rocketmq: give the topic to read"):
        spark.read.format("rocketmq").option("namesrv", groups.namesrv).load().count()


def test_telemetry_job_over_the_cluster(spark, groups, tmp_path):
    groups.create_topic("devices")

    def telemetry_msg(i):
        device = f"d{i % 3}"
        return {"mqttTopic": f"devices/{device}/telemetry"}, json.dumps({"temp": i, "seq": i}).encode()

    sent = groups.send("devices", 60, "tele", telemetry_msg)
    assert len(sent) == 60
    groups.send("devices", 1, "tele-bad", lambda i: ({"mqttTopic": "devices/d9/telemetry"}, b"{broken"))
    out = tmp_path / "out"
    argv = ["--namesrv", groups.namesrv, "--topic", "devices", "--out", str(out), "--filter", "devices/+/telemetry",
            "--window", "1 hour"]
    assert telemetry.main(argv, session=spark) == 0
    rows = spark.read.parquet(str(out / "aggregates")).collect()
    by_device: dict[str, list] = {}
    for r in rows:
        assert r.field == "temp"  # seq is ignored by default
        by_device.setdefault(r.device, []).append(r)
    for d in range(3):
        want = [i for i in range(60) if i % 3 == d]
        got = by_device[f"d{d}"]
        assert sum(r["count"] for r in got) == len(want)
        assert min(r["min"] for r in got) == min(want) and max(r["max"] for r in got) == max(want)
    assert [r.device for r in spark.read.parquet(str(out / "rejects")).collect()] == ["d9"]
    # the streaming job over the cluster: the reject is appended at once, offsets are in the checkpoint
    out2 = tmp_path / "out2"
    assert telemetry.main([*argv[:argv.index("--out")], "--out", str(out2), "--stream", "--once"], session=spark) == 0
    assert [r.device for r in spark.read.schema(telemetry.REJECTS_SCHEMA).parquet(str(out2 / "rejects")).collect()] == ["d9"]
    offsets = sorted((out2 / "_checkpoints" / "rejects" / "offsets").iterdir())
    assert '"devices": {"g1:0":' in offsets[-1].read_text()
    with pytest.raises(SystemExit):
        telemetry.parse_args(["--namesrv", groups.namesrv, "--out", str(out)])  # --topic is required with it


def test_offsets_deleted_by_retention_are_data_loss(spark, groups):
    topic = "SparkLoss"
    groups.create_topic(topic)
    mq = MessageQueue(topic, "g2", 0)
    with Producer(groups.namesrv, "PG_loss") as p:  # 40 x 64 KiB into g2:0: more than two 1 MiB segments
        for i in range(40):
            p.send(Message(topic, os.urandom(65536)), queue=mq)

    def read(**opts):
        r = spark.read.format("rocketmq").option("namesrv", groups.namesrv).option("topic", topic)
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load()

    from_zero = json.dumps({topic: {"g2:0": 0}})
    planned = read(startingOffsets=from_zero)
    planned_lenient = read(startingOffsets=from_zero, failOnDataLoss="false")
    assert planned.count() == 40
    # age g2's sealed segments past fileReservedTime (72 h): its retention deletes them
    seg_dir = groups.g2.brokers["b0"].data_dir / "commitlog"
    segs = sorted(seg_dir.iterdir())
    old = time.time() - 100 * 3600
    for seg in segs[:-1]:
        os.utime(seg, (old, old))

    async def min_offset():
        async with open_client_api(5.0) as api:
            return await api.min_offset(groups.g2.addr("b0"), mq)

    async def moved():
        return await min_offset() > 0

    trio.run(wait_until, moved, 20, "g2's retention deletes the aged segments")
    lost = trio.run(min_offset)
    # a task's pulls meet the loss (what a range planned before the deletion does)
    with pytest.raises(cluster.QueueDataLossError, match=rf"offsets 0..{lost} \({lost} messages\)"):
        list(cluster.pull_range(groups.namesrv, topic, "g2", 0, 0, 40))
    assert sum(c.count for c in cluster.pull_range(groups.namesrv, topic, "g2", 0, 0, 40,
                                                   fail_on_data_loss=False)) == 40 - lost
    # planned before the deletion, read after: the task meets the loss
    with pytest.raises(Exception, match=rf"rocketmq: {topic} queue g2:0: offsets 0..{lost} \({lost} messages\) were "
                                        r"deleted by the broker's retention \(data loss"):
        planned.count()
    assert planned_lenient.count() == 40 - lost
    # a start below the min offset, found when planning
    with pytest.raises(Exception, match=r"were deleted by the broker's retention .*set failOnDataLoss=false"):
        read(startingOffsets=from_zero).count()
    assert read(startingOffsets=from_zero, failOnDataLoss="false").count() == 40 - lost
    assert read().count() == 40 - lost  # earliest is the oldest left
    # a stream starting below the min offset skips and reports how many in its progress
    q = (spark.readStream.format("rocketmq").option("namesrv", groups.namesrv).option("topic", topic)
         .option("startingOffsets", from_zero).option("failOnDataLoss", "false").load()
         .writeStream.format("noop").trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    assert sum(p["numInputRows"] for p in progress) == 40 - lost
    assert json.loads(progress[-1]["sources"][0]["latestOffset"])["skippedMessages"] == lost


def _wait_rows(spark, out, n: int, query, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    got = 0
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        try:
            got = spark.read.parquet(out).count()
        except Exception as e:  # noqa: BLE001  (no file written yet: no schema to infer)
            if "UNABLE_TO_INFER_SCHEMA" not in str(e) and "PATH_NOT_FOUND" not in str(e):
                raise
        if got >= n:
            return got
        time.sleep(1.0)
    raise AssertionError(f"{got} rows of {n} within {timeout} s")


def test_stream_counts_each_message_once_across_a_restart_and_a_failover(spark, groups, tmp_path):
    topic = "SparkStream"
    groups.create_topic(topic)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def start(**opts):
        r = (spark.readStream.format("rocketmq").option("namesrv", groups.namesrv).option("topic", topic)
             .option("startingOffsets", "earliest"))
        for k, v in opts.items():
            r = r.option(k, v)
        return (r.load().select("broker", "queue_id", "queue_offset", "properties", "body")
                .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
                .trigger(processingTime="1 second").start())

    sent = groups.send(topic, 200, "s1")
    q = start(maxOffsetsPerTrigger="60")
    try:
        _wait_rows(spark, out, len(sent), q)
        progress = [p for p in q.recentProgress if p["numInputRows"]]
        assert progress and max(p["numInputRows"] for p in progress) <= 60  # the trigger cap holds
        latest = json.loads(q.lastProgress["sources"][0]["latestOffset"])
        assert set(latest[topic]) == {f"g{g}:{i}" for g in (1, 2) for i in range(QUEUES)}
    finally:
        q.stop()
    sent += groups.send(topic, 150, "s2")  # while the query is stopped
    q = start()
    try:
        _wait_rows(spark, out, len(sent), q)
        sent += groups.send(topic, 100, "s3")  # while it runs
        _wait_rows(spark, out, len(sent), q)
        # fail g1's master over while the query runs
        old = groups.master
        killed_at = time.monotonic()
        groups.g1.brokers[old].proc.kill()
        groups.g1.brokers[old].proc.wait()
        other = "a1" if old == "a0" else "a0"

        async def promoted():
            st = await ha_status(groups.g1.addr(other))
            return bool(st and st["role"].endswith("MASTER"))

        trio.run(wait_until, promoted, 30, "g1's slave is elected master")
        elected_s = time.monotonic() - killed_at
        groups.master = other
        after = groups.send(topic, 150, "s4")
        print("sends after the failover:", dict(groups.statuses))
        sent += after
        _wait_rows(spark, out, len(sent), q)
        print(f"failover: g1 master {old} killed; {other} elected after {elected_s:.1f} s; the stream had every "
              f"message sent after it {time.monotonic() - killed_at:.1f} s after the kill")
        time.sleep(3)  # a few more triggers: nothing may come twice
    finally:
        q.stop()
    df = spark.read.parquet(out)
    got = _ids(df)
    dup = {k: v for k, v in got.items() if v > 1}
    assert not dup, f"{len(dup)} messages twice"
    assert set(got) == set(sent), f"missing {len(set(sent) - set(got))}, extra {len(set(got) - set(sent))}"
    assert df.count() == len(sent) == 600
    # messages sent to g1 after the failover were written by the new master (no slave left) and read from it
    on_g1 = set(_ids(df.where("broker = 'g1'")))
    assert on_g1 & set(after)
