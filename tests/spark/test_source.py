"""format("commitlog") batch reads through Spark."""

import pytest

from core.store.message import Message, decode_message


def _messages(n):
    for i in range(n):
        if i % 10 == 9:
            msg = Message(topic="orders", body=b"native %d" % i, properties={"TAGS": "t", "KEYS": "a b"})
        else:
            msg = Message(
                topic="devices",
                body=b'{"v": %d}' % i,
                properties={"mqttTopic": f"devices/d{i % 3}/{'telemetry' if i % 2 else 'status'}"},
            )
        msg.born_timestamp = 1_700_000_000_000 + i * 1000
        yield msg


def _write(log_writer, path, n=300, segment_size=8192):
    """With the test writer (store timestamps = born timestamps)."""
    w = log_writer(str(path), segment_size)
    for msg in _messages(n):
        w.append(msg, msg.born_timestamp)
    return w


def _store(make_store, path, n=300, segment_size=8192):
    """With the real store; returns the positions of what it wrote."""
    store = make_store(path, segment_size)
    return [store.append(msg).physical_offset for msg in _messages(n)]


def test_reads_what_the_store_wrote_once_with_reference_values(spark, make_store, tmp_path):
    positions = _store(make_store, tmp_path)
    df = spark.read.format("commitlog").option("maxBytesPerPartition", "3k").load(str(tmp_path))
    assert df.rdd.getNumPartitions() > len(list((tmp_path / "commitlog").iterdir()))
    rows = sorted(df.collect(), key=lambda r: r.commitlog_offset)
    assert [r.commitlog_offset for r in rows] == positions
    files = {p.name: p.read_bytes() for p in (tmp_path / "commitlog").iterdir()}
    for r in rows[:40]:
        base = max(int(n) for n in files if int(n) <= r.commitlog_offset)
        m = decode_message(files[f"{base:020d}"], r.commitlog_offset - base)
        assert (r.topic, r.queue_offset, r.body, r.properties) == (m.topic, m.queue_offset, m.body, m.properties)
        assert r.mqtt_topic == m.properties.get("mqttTopic")
        assert (r.tags, r.keys) == (m.properties.get("TAGS"), m.properties.get("KEYS"))
        assert round(r.store_ts.timestamp() * 1000) == m.store_timestamp
        assert round(r.born_ts.timestamp() * 1000) == m.born_timestamp


def test_options(spark, log_writer, tmp_path):
    _write(log_writer, tmp_path)
    read = lambda **o: spark.read.format("commitlog").options(**o).load(str(tmp_path))  # noqa: E731
    assert read(topics="orders").count() == 30
    assert read(topics="orders, devices").count() == 300
    native = [i for i in range(300) if i % 10 == 9]
    assert read(mqttTopicFilter="devices/+/telemetry").count() == len([i for i in range(300) if i % 2 and i not in native])
    assert read(mqttTopicFilter="devices/d1/#").count() == len([i for i in range(300) if i % 3 == 1 and i not in native])
    assert read(mqttTopicFilter="#", topics="orders").count() == 0
    start, end = 1_700_000_000_000 + 100_000, 1_700_000_000_000 + 150_000
    assert read(startingTimestamp=str(start), endingTimestamp=str(end)).count() == 50
    assert read(startingTimestamp="2023-11-14T22:15:00").count() == 300 - 100


def test_system_topics_only_when_asked(spark, make_store, tmp_path):
    store = make_store(tmp_path)
    for t in ("devices", "%RETRY%g", "%DLQ%g", "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel", "RMQ_SYS_TRANS_HALF_TOPIC", "%LMQ%s1"):
        assert store.append(Message(topic=t, body=b"x")).ok
    store.append(Message(topic="devices", body=b"half", sysflag=0x4))
    store.append(Message(topic="devices", body=b"rolled back", sysflag=0xC))
    store.append(Message(topic="devices", body=b"committed", sysflag=0x8))
    df = spark.read.format("commitlog").load(str(tmp_path))
    assert sorted(r.body for r in df.collect()) == [b"committed", b"x"]
    assert spark.read.format("commitlog").option("includeSystemTopics", "true").load(str(tmp_path)).count() == 10


def test_torn_tail_and_empty_log(spark, log_writer, tmp_path):
    w = _write(log_writer, tmp_path, n=20)
    w.write_raw(b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + b"\x01" * 30)
    assert spark.read.format("commitlog").load(str(tmp_path)).count() == 20
    empty = tmp_path / "empty"
    (empty / "commitlog").mkdir(parents=True)  # a store that has written nothing yet (no commitlog/: an error)
    assert spark.read.format("commitlog").load(str(empty)).count() == 0


def test_a_user_schema_picks_columns(spark, make_store, tmp_path):
    positions = _store(make_store, tmp_path, n=50)
    df = spark.read.format("commitlog").schema("body binary, commitlog_offset bigint").load(str(tmp_path))
    rows = df.collect()
    assert df.columns == ["body", "commitlog_offset"]
    assert [r.commitlog_offset for r in rows] == positions
    with pytest.raises(Exception, match="commitlog: a user schema"):
        spark.read.format("commitlog").schema("body string").load(str(tmp_path)).collect()


def test_store_directory_of_mqgate_serve(spark, make_store, tmp_path):
    _store(make_store, tmp_path / "store", n=10)
    assert spark.read.format("commitlog").load(str(tmp_path)).count() == 10


@pytest.mark.parametrize(
    "opts",
    [{"mqttTopicFilter": "a/#/b"}, {"maxBytesPerPartition": "-3"}, {"includeSystemTopics": "maybe"}, {"startingTimestamp": "yesterday"}],
)
def test_bad_options_fail_on_the_driver(spark, tmp_path, opts):
    with pytest.raises(Exception, match="commitlog"):
        spark.read.format("commitlog").options(**opts).load(str(tmp_path)).count()
