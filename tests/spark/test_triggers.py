"""Record-count trigger limits and small scans split over every core."""

import json
import os

from core.store.message import Message

SEGMENT = 8192


def _store(make_store, path, n, segment=SEGMENT):
    store = make_store(path, segment)
    store.positions = [store.append(Message(topic="devices", body=b'{"n": %d}' % i,
                                            properties={"mqttTopic": f"devices/d{i % 4}/telemetry"})).physical_offset
                       for i in range(n)]
    return store


def _run(spark, data, ckpt, sink, **options):
    q = (spark.readStream.format("commitlog").options(**options).load(str(data)).select("commitlog_offset")
         .writeStream.option("checkpointLocation", str(ckpt)).trigger(availableNow=True).foreachBatch(sink).start())
    q.awaitTermination(180)
    assert q.exception() is None
    return q


def test_max_offsets_per_trigger_caps_each_micro_batch(spark, make_store, tmp_path):
    store = _store(make_store, tmp_path / "data", 200)
    seen = []
    q = _run(spark, tmp_path / "data", tmp_path / "ckpt", lambda df, _id: seen.append(sorted(
        r.commitlog_offset for r in df.collect())), maxOffsetsPerTrigger="30")
    sizes = [len(b) for b in seen if b]
    assert sizes == [30] * 6 + [20]
    assert [p for b in seen for p in b] == store.positions
    assert all(p["numInputRows"] <= 30 for p in q.recentProgress)


def test_row_and_byte_caps_together(spark, make_store, tmp_path):
    store = _store(make_store, tmp_path / "data", 200)
    seen = []
    q = _run(spark, tmp_path / "data", tmp_path / "ckpt", lambda df, _id: seen.append(sorted(
        r.commitlog_offset for r in df.collect())), maxOffsetsPerTrigger="50", maxBytesPerTrigger="2k")
    batches = [b for b in seen if b]
    assert len(batches) > 200 // 50 and all(b[-1] - b[0] < 2048 for b in batches)
    assert [p for b in batches for p in b] == store.positions
    ends = [json.loads(p["sources"][0]["endOffset"])["pos"] for p in q.recentProgress]
    assert ends == sorted(ends)


def test_a_small_micro_batch_uses_every_core(spark, make_store, tmp_path):
    _store(make_store, tmp_path / "data", 30, segment=1 << 20)  # one segment, ~4 KiB
    tasks = []
    _run(spark, tmp_path / "data", tmp_path / "ckpt", lambda df, _id: tasks.append(df.rdd.getNumPartitions()))
    assert tasks[0] >= (os.cpu_count() or 1)
    tasks.clear()
    _run(spark, tmp_path / "data", tmp_path / "ckpt3", lambda df, _id: tasks.append(df.rdd.getNumPartitions()),
         minPartitions="3")
    assert 3 <= tasks[0] <= 4  # whole entries: as even as they allow


def test_a_small_batch_read_uses_every_core(spark, make_store, tmp_path):
    store = _store(make_store, tmp_path / "data", 30, segment=1 << 20)
    df = spark.read.format("commitlog").load(str(tmp_path / "data")).select("commitlog_offset")
    per_task = df.rdd.glom().map(len).collect()
    assert sum(per_task) == 30 and len([n for n in per_task if n]) >= min(2, os.cpu_count() or 1)
    assert sorted(r.commitlog_offset for r in df.collect()) == store.positions


def test_progress_reports_the_lag_behind_the_log_end(spark, make_store, tmp_path):
    store = _store(make_store, tmp_path / "data", 100)
    q = _run(spark, tmp_path / "data", tmp_path / "ckpt", lambda df, _id: df.count(), maxOffsetsPerTrigger="40")
    seen = [(json.loads(p["sources"][0]["endOffset"])["pos"], json.loads(p["sources"][0]["latestOffset"]))
            for p in q.recentProgress if p["numInputRows"]]
    end_of_log = store.positions[-1] + (store.positions[-1] - store.positions[-2])
    assert [latest["pos"] for _end, latest in seen] == [end_of_log] * 3
    assert [latest["lagBytes"] for _end, latest in seen] == [end_of_log - end for end, _latest in seen]
    assert seen[0][1]["lagBytes"] > 0 and seen[-1][1]["lagBytes"] == 0
    assert all(latest["skippedMessages"] == 0 for _end, latest in seen)
