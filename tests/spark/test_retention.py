"""Segments deleted by the store's retention: data loss, never corruption nor FileNotFoundError."""

import json

import pytest

from core.store.message import Message

SEGMENT = 8192
FAR_FUTURE_MS = 10**15  # every segment but the newest has expired


def _append(store, first, n):
    out = []
    for i in range(first, first + n):
        r = store.append(Message(topic="devices", body=b'{"n": %d}' % i, queue_id=i % 2,
                                 properties={"mqttTopic": f"devices/d{i % 4}/telemetry"}))
        assert r.ok
        out.append(r.physical_offset)
    return out


def _retain(store):
    """Run the store's retention; the positions that are left start at the returned offset."""
    assert store.delete_expired(FAR_FUTURE_MS)
    return min(int(p.name) for p in (store.data / "commitlog").iterdir())


def _store(make_store, tmp_path, n):
    s = make_store(tmp_path / "data", SEGMENT)
    s.data = tmp_path / "data"
    s.positions = _append(s, 0, n)
    return s


@pytest.fixture
def store(make_store, tmp_path):
    """200 messages over several segments."""
    return _store(make_store, tmp_path, 200)


@pytest.fixture
def small(make_store, tmp_path):
    """20 messages in the first segment; a stream reads them, then more come."""
    return _store(make_store, tmp_path, 20)


def _offsets(df):
    return [r.commitlog_offset for r in df.select("commitlog_offset").collect()]


def test_a_batch_start_deleted_by_retention(spark, store):
    start = store.positions[5]
    oldest = _retain(store)
    assert start < oldest
    lost = len([p for p in store.positions if start <= p < oldest])
    read = lambda **o: spark.read.format("commitlog").options(startingOffsets=str(start), **o).load(str(store.data))  # noqa: E731
    with pytest.raises(Exception, match=rf"commitlog: .*positions {start}..{oldest} \({lost} messages\) were deleted "
                                        r"by retention \(data loss.*set failOnDataLoss=false"):
        read().count()
    assert _offsets(read(failOnDataLoss="false")) == [p for p in store.positions if p >= oldest]


def test_segments_deleted_after_planning_are_data_loss_not_a_missing_file(spark, store):
    strict = spark.read.format("commitlog").load(str(store.data))
    lenient = spark.read.format("commitlog").option("failOnDataLoss", "false").load(str(store.data))
    assert strict.count() == lenient.count() == 200  # both planned over every segment
    oldest = _retain(store)
    with pytest.raises(Exception, match=r"were deleted by retention \(data loss") as e:
        strict.count()
    assert "FileNotFoundError" not in str(e.value) and "corrupt" not in str(e.value).lower()
    assert _offsets(lenient) == [p for p in store.positions if p >= oldest]


def _stream(spark, store, out, ckpt, fail=True, sink=None, **options):
    df = (spark.readStream.format("commitlog").option("failOnDataLoss", str(fail).lower()).options(**options)
          .load(str(store.data)).select("commitlog_offset"))
    w = df.writeStream.option("checkpointLocation", str(ckpt)).trigger(availableNow=True)
    if sink is not None:
        return w.foreachBatch(sink).start()
    return w.format("parquet").option("path", str(out)).start()


def _sink(spark, out):
    return sorted(r.commitlog_offset for r in spark.read.parquet(str(out)).collect())


def test_a_stream_behind_retention_fails_or_skips_and_reports_how_many(spark, small, tmp_path):
    store, out, ckpt = small, tmp_path / "out", tmp_path / "ckpt"
    q = _stream(spark, store, out, ckpt)
    q.awaitTermination(120)
    more = _append(store, 20, 200)
    oldest = _retain(store)
    lost = len([p for p in more if p < oldest])
    assert lost > 0
    q = _stream(spark, store, out, ckpt)
    with pytest.raises(Exception, match=r"were deleted by retention \(data loss.*failOnDataLoss=false"):
        q.awaitTermination(120)
    q = _stream(spark, store, out, ckpt, fail=False)
    q.awaitTermination(120)
    assert _sink(spark, out) == store.positions + [p for p in more if p >= oldest]
    latest = [json.loads(p["sources"][0]["latestOffset"]) for p in q.recentProgress]
    assert max(int(m["skippedMessages"]) for m in latest) == lost
    assert latest[-1]["lagBytes"] == 0


@pytest.mark.parametrize("fail", [True, False])
def test_a_query_killed_mid_batch_whose_segments_went_recovers(spark, small, tmp_path, fail):
    store, out, ckpt = small, tmp_path / "out", tmp_path / "ckpt"
    first = store.positions
    q = _stream(spark, store, out, ckpt)  # batch 0: 20 messages, committed
    q.awaitTermination(120)
    more = _append(store, 20, 200)

    def dies(df, batch_id):
        raise RuntimeError("killed mid-batch")

    # batch 1 planned (in the offset log, inside the first segment), never committed
    q = _stream(spark, store, out, ckpt, sink=dies, maxBytesPerTrigger="2k")
    with pytest.raises(Exception, match="killed mid-batch"):
        q.awaitTermination(120)
    assert sorted(p.name for p in (ckpt / "offsets").iterdir() if p.name.isdigit()) == ["0", "1"]
    assert sorted(p.name for p in (ckpt / "commits").iterdir() if p.name.isdigit()) == ["0"]
    oldest = _retain(store)  # the planned batch's segment is gone
    if fail:
        q = _stream(spark, store, out, ckpt, fail=True)
        with pytest.raises(Exception, match=r"were deleted by retention \(data loss.*failOnDataLoss=false") as e:
            q.awaitTermination(120)
        assert "CorruptLogError" not in str(e.value) and "FileNotFoundError" not in str(e.value)
    q = _stream(spark, store, out, ckpt, fail=False)
    q.awaitTermination(120)
    assert q.exception() is None
    assert _sink(spark, out) == first + [p for p in more if p >= oldest]
    _append(store, 400, 10)  # and it goes on, also under failOnDataLoss=true
    q = _stream(spark, store, out, ckpt, fail=True)
    q.awaitTermination(120)
    assert q.exception() is None and len(_sink(spark, out)) == len(first) + len([p for p in more if p >= oldest]) + 10
