"""Batch startingOffsets / endingOffsets, entry-boundary checks, and reading to the log end per action."""

import time

import pytest

from core.store.message import Message

SEGMENT = 8192


def _append(store, first, n):
    out = []
    for i in range(first, first + n):
        r = store.append(Message(topic="devices" if i % 5 else "orders", body=b'{"v": %d}' % i, queue_id=i % 2,
                                 properties={"mqttTopic": f"devices/d{i % 3}/telemetry"}))
        assert r.ok
        out.append(r.physical_offset)
    return out


@pytest.fixture
def log(make_store, tmp_path):
    """A real store's log over several 8 KiB segments; ``log.positions`` in order."""
    store = make_store(tmp_path / "data", SEGMENT)
    store.positions = _append(store, 0, 150)
    store.data = tmp_path / "data"
    return store


def _read(spark, log, **options):
    return spark.read.format("commitlog").options(**options).load(str(log.data))


def _offsets(df):
    return [r.commitlog_offset for r in df.select("commitlog_offset").collect()]


def test_positions_start_and_end_a_batch_read(spark, log):
    p = log.positions
    assert p[-1] > 2 * SEGMENT
    assert _offsets(_read(spark, log, startingOffsets=str(p[40]), endingOffsets=str(p[120]))) == p[40:120]
    assert _offsets(_read(spark, log, startingOffsets='{"pos": %d}' % p[7])) == p[7:]
    assert _offsets(_read(spark, log, startingOffsets="earliest", endingOffsets="latest")) == p
    first_of_segment_2 = next(x for x in p if x >= 2 * SEGMENT)
    assert first_of_segment_2 == 2 * SEGMENT  # a segment start is a boundary too
    assert _offsets(_read(spark, log, endingOffsets=str(first_of_segment_2))) == [x for x in p if x < 2 * SEGMENT]
    with pytest.raises(Exception, match=r"commitlog: endingOffsets \(\d+\) is before startingOffsets"):
        _read(spark, log, startingOffsets=str(p[50]), endingOffsets=str(p[10])).count()
    with pytest.raises(Exception, match="startingOffsets=latest is for streams"):
        _read(spark, log, startingOffsets="latest").count()


@pytest.mark.parametrize("where", ["older segment", "newest segment"])
def test_a_start_inside_an_entry_is_refused_at_once(spark, log, where):
    p = log.positions
    i = 20 if where == "older segment" else len(p) - 3
    inside = p[i] + 5
    with pytest.raises(Exception, match=rf"startingOffsets {inside} is not the start of an entry; "
                                        rf"the nearest are {p[i]} and {p[i + 1]}"):
        _read(spark, log, startingOffsets=str(inside)).count()
    with pytest.raises(Exception, match=rf"endingOffsets {inside} is not the start of an entry"):
        _read(spark, log, endingOffsets=str(inside)).count()
    with pytest.raises(Exception, match=r"is past the end of the log"):
        _read(spark, log, startingOffsets=str(p[-1] + 10_000)).count()


def test_a_stream_start_inside_an_entry_fails_the_query_at_once(spark, log, tmp_path):
    inside = log.positions[-3] + 5
    q = (spark.readStream.format("commitlog").option("startingOffsets", str(inside)).load(str(log.data))
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    try:
        with pytest.raises(Exception, match=rf"startingOffsets {inside} is not the start of an entry"):
            q.awaitTermination(60)
    finally:
        q.stop()


def test_timestamps_seek(spark, make_store, tmp_path):
    store = make_store(tmp_path / "data", SEGMENT)
    groups = []
    for g in range(3):
        groups.append(_append(store, g * 60, 60))
        time.sleep(0.005)  # the next group is stored at a later millisecond
    rows = spark.read.format("commitlog").load(str(tmp_path / "data")).select("commitlog_offset", "store_ts").collect()
    ms = {r.commitlog_offset: round(r.store_ts.timestamp() * 1000) for r in rows}
    t1, t2 = ms[groups[1][0]], ms[groups[2][0]]
    assert t1 > ms[groups[0][-1]] and t2 > ms[groups[1][-1]]
    df = (spark.read.format("commitlog").option("startingOffsets", '{"timestamp": %d}' % t1)
          .option("endingOffsets", '{"timestamp": %d}' % t2).load(str(tmp_path / "data")))
    assert _offsets(df) == groups[1]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t2 // 1000)) + ".%03d" % (t2 % 1000)
    df = spark.read.format("commitlog").option("startingOffsets", '{"timestamp": "%s"}' % iso).load(str(tmp_path / "data"))
    assert _offsets(df) == groups[2]
    later = spark.read.format("commitlog").option("startingOffsets", '{"timestamp": %d}' % (t2 + 60_000))
    assert later.load(str(tmp_path / "data")).count() == 0


def test_per_queue_offsets_like_kafka(spark, log):
    every = _read(spark, log).select("commitlog_offset", "topic", "queue_id", "queue_offset").collect()
    df = _read(spark, log, startingOffsets='{"devices": {"0": 10, "1": -2}, "orders": {"1": 4}}',
               endingOffsets='{"devices": {"1": 30}}')

    def inside(r):
        if (r.topic, r.queue_id) == ("devices", 0):
            return r.queue_offset >= 10
        if (r.topic, r.queue_id) == ("devices", 1):
            return r.queue_offset < 30
        if (r.topic, r.queue_id) == ("orders", 1):
            return r.queue_offset >= 4
        return True  # queues not named: the whole log

    want = [r.commitlog_offset for r in every if inside(r)]
    assert 0 < len(want) < len(every)
    assert _offsets(df) == want
    with pytest.raises(Exception, match=r"-1 \(latest\) cannot start a queue"):
        _read(spark, log, startingOffsets='{"devices": {"0": -1}}').count()


def test_every_action_reads_to_the_log_end_of_its_moment(spark, log):
    df = _read(spark, log).select("commitlog_offset")
    assert df.count() == 150
    more = _append(log, 150, 120)  # crosses segments after the DataFrame was planned
    assert _offsets(df) == log.positions + more
    df.createOrReplaceTempView("log_now")
    more2 = _append(log, 270, 5)
    assert spark.sql("select count(*) as n from log_now").first().n == 275
    assert len(more2) == 5
    # a fixed end stays fixed
    fixed = _read(spark, log, endingOffsets=str(more[10]))
    n = fixed.count()
    _append(log, 275, 5)
    assert fixed.count() == n == 160
