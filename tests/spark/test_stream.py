"""readStream.format("commitlog"): live appends, restarts from a checkpoint, triggers."""

import pytest

from core.store import MessageStore
from core.store.encoder import encode_message
from core.store.message import Message


def _msg(i):
    return Message(topic="devices", body=b'{"n": %d}' % i, properties={"mqttTopic": f"devices/d{i % 4}/telemetry"})


def _append(w, first, n):
    """Through the real store (`MessageStore`) or the test writer (`LogWriter`)."""
    for i in range(first, first + n):
        if isinstance(w, MessageStore):
            w.positions.append(w.append(_msg(i)).physical_offset)
        else:
            w.append(_msg(i), 1_700_000_000_000 + i)


def _query(spark, data, out, ckpt, **trigger):
    return (
        spark.readStream.format("commitlog").load(str(data))
        .select("commitlog_offset", "mqtt_topic", "body")
        .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ckpt))
        .trigger(**trigger).start()
    )


def _sink_offsets(spark, out):
    return sorted(r.commitlog_offset for r in spark.read.parquet(str(out)).select("commitlog_offset").collect())


def test_appends_while_running_and_restart_neither_skip_nor_repeat(spark, make_store, tmp_path):
    data, out, ckpt = tmp_path / "data", tmp_path / "out", tmp_path / "ckpt"
    store = make_store(data, 8192)
    store.positions = []
    _append(store, 0, 120)
    q = _query(spark, data, out, ckpt, processingTime="200 milliseconds")
    try:
        q.processAllAvailable()
        _append(store, 120, 150)  # crosses segment boundaries while the query runs
        q.processAllAvailable()
    finally:
        q.stop()
    assert _sink_offsets(spark, out) == store.positions

    _append(store, 270, 90)  # while stopped; then restart from the checkpoint
    q = _query(spark, data, out, ckpt, availableNow=True)
    q.awaitTermination(120)
    assert _sink_offsets(spark, out) == store.positions
    assert len(store.positions) == 360

    # nothing new: a restart reads nothing
    q = _query(spark, data, out, ckpt, availableNow=True)
    q.awaitTermination(120)
    assert sum(p["numInputRows"] for p in q.recentProgress) == 0
    assert _sink_offsets(spark, out) == store.positions


def test_a_torn_tail_waits_until_it_is_complete(spark, log_writer, tmp_path):
    data, out, ckpt = tmp_path / "data", tmp_path / "out", tmp_path / "ckpt"
    w = log_writer(str(data), 8192)
    _append(w, 0, 50)
    late = Message(topic="devices", body=b"late", properties={"mqttTopic": "devices/x/telemetry"})
    w.write_raw(encode_message(late, 0, w.pos, 1)[:60])  # only its first bytes are there
    q = _query(spark, data, out, ckpt, availableNow=True)
    q.awaitTermination(120)
    assert _sink_offsets(spark, out) == w.positions
    w.append(late, 1)  # the entry completes, more follow
    _append(w, 50, 10)
    q = _query(spark, data, out, ckpt, availableNow=True)
    q.awaitTermination(120)
    assert _sink_offsets(spark, out) == w.positions and len(w.positions) == 61


def test_max_bytes_per_trigger_splits_available_now(spark, log_writer, tmp_path):
    data, out, ckpt = tmp_path / "data", tmp_path / "out", tmp_path / "ckpt"
    w = log_writer(str(data), 8192)
    _append(w, 0, 200)
    q = (
        spark.readStream.format("commitlog").option("maxBytesPerTrigger", "10k").load(str(data))
        .select("commitlog_offset").writeStream.format("parquet").option("path", str(out))
        .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start()
    )
    q.awaitTermination(120)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert len(sizes) >= 2 and sum(sizes) == 200
    assert _sink_offsets(spark, out) == w.positions


def test_starting_offsets_latest(spark, log_writer, tmp_path):
    data, out, ckpt = tmp_path / "data", tmp_path / "out", tmp_path / "ckpt"
    w = log_writer(str(data), 8192)
    _append(w, 0, 50)
    before = len(w.positions)
    q = (
        spark.readStream.format("commitlog").option("startingOffsets", "latest").load(str(data))
        .select("commitlog_offset").writeStream.format("parquet").option("path", str(out))
        .option("checkpointLocation", str(ckpt)).trigger(processingTime="200 milliseconds").start()
    )
    try:
        q.processAllAvailable()
        _append(w, 50, 30)
        q.processAllAvailable()
    finally:
        q.stop()
    assert _sink_offsets(spark, out) == w.positions[before:]


def test_deleted_segments_fail_the_query_unless_allowed(spark, log_writer, tmp_path):
    data, out, ckpt = tmp_path / "data", tmp_path / "out", tmp_path / "ckpt"
    w = log_writer(str(data), 8192)
    _append(w, 0, 20)
    q = _query(spark, data, out, ckpt, availableNow=True)
    q.awaitTermination(120)
    _append(w, 20, 200)
    (data / "commitlog" / f"{0:020d}").unlink()  # retention removed what the query has yet to read
    q = _query(spark, data, out, ckpt, availableNow=True)
    with pytest.raises(Exception, match="failOnDataLoss"):
        q.awaitTermination(120)
    q = (
        spark.readStream.format("commitlog").option("failOnDataLoss", "false").load(str(data))
        .select("commitlog_offset", "mqtt_topic", "body")
        .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True).start()
    )
    q.awaitTermination(120)
    assert _sink_offsets(spark, out) == w.positions[:20] + [p for p in w.positions if p >= 8192]
