"""readStream.format("commitlog"): live appends, restarts from a checkpoint, triggers."""

from core.store.message import Message, encode_message


def _append(w, first, n):
    for i in range(first, first + n):
        w.append(Message(topic="devices", body=b'{"n": %d}' % i, properties={"mqttTopic": f"devices/d{i % 4}/telemetry"}), 1_700_000_000_000 + i)


def _query(spark, data, out, ckpt, **trigger):
    return (
        spark.readStream.format("commitlog").load(str(data))
        .select("commitlog_offset", "mqtt_topic", "body")
        .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ckpt))
        .trigger(**trigger).start()
    )


def _sink_offsets(spark, out):
    return sorted(r.commitlog_offset for r in spark.read.parquet(str(out)).select("commitlog_offset").collect())


def test_appends_while_running_and_restart_neither_skip_nor_repeat(spark, log_writer, tmp_path):
    data, out, ckpt = tmp_path / "data", tmp_path / "out", tmp_path / "ckpt"
    w = log_writer(str(data), 8192)
    _append(w, 0, 120)
    q = _query(spark, data, out, ckpt, processingTime="200 milliseconds")
    try:
        q.processAllAvailable()
        _append(w, 120, 150)  # crosses segment boundaries while the query runs
        q.processAllAvailable()
        # an entry being written: only its first bytes are there
        nxt = encode_message(Message(topic="devices", body=b"late", properties={"mqttTopic": "devices/x/telemetry"}), 0, w.pos, 1)
        w.write_raw(nxt[:60])
        q.processAllAvailable()
    finally:
        q.stop()
    assert _sink_offsets(spark, out) == w.positions

    # while stopped: the torn entry completes, more arrive; restart from the checkpoint
    w.append(Message(topic="devices", body=b"late", properties={"mqttTopic": "devices/x/telemetry"}), 1)
    _append(w, 270, 90)
    q = _query(spark, data, out, ckpt, availableNow=True)
    q.awaitTermination(120)
    assert _sink_offsets(spark, out) == w.positions
    assert len(w.positions) == 361

    # nothing new: a restart reads nothing
    q = _query(spark, data, out, ckpt, availableNow=True)
    q.awaitTermination(120)
    assert sum(p["numInputRows"] for p in q.recentProgress) == 0
    assert _sink_offsets(spark, out) == w.positions


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
