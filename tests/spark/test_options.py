"""Options are a closed list: unknown, misspelt and Kafka-only ones are errors, checked on the driver."""

import pytest

from core.store.message import Message


@pytest.fixture
def data(make_store, tmp_path):
    store = make_store(tmp_path / "data", 8192)
    for i in range(30):
        store.append(Message(topic="devices" if i % 3 else "orders", body=b'{"v": %d}' % i,
                             properties={"mqttTopic": f"devices/d{i % 2}/telemetry"} if i % 3 else {}))
    return tmp_path / "data"


def _parse(options, mode="batch"):
    from spark.commitlog_source import ScanOptions

    return ScanOptions.parse(options, None, mode)


@pytest.mark.parametrize("given, says", [
    ({"topic": "devices"}, r"unknown option 'topic' \(did you mean topics\?\); known options: path, topics"),
    ({"startingOffset": "latest"}, r"did you mean startingOffsets\?"),
    ({"foo": "1"}, r"unknown option 'foo'; known options: .*maxBytesPerPartition"),
    ({"subscribe": "devices"}, r"'subscribe' is a Kafka-source option that does not apply here \(use topics\)"),
    ({"kafka.bootstrap.servers": "h:9092"}, "Kafka-source option"),
])
def test_unknown_misspelt_and_kafka_options_name_the_known_ones(data, given, says):
    with pytest.raises(ValueError, match=says):
        _parse({"path": str(data), **given})


def test_options_of_the_other_kind_of_read_are_errors(data):
    with pytest.raises(ValueError, match="endingOffsets applies to batch reads"):
        _parse({"path": str(data), "endingOffsets": "latest"}, "stream")
    with pytest.raises(ValueError, match=r"maxBytesPerTrigger applies to streaming reads \(spark.readStream\) only"):
        _parse({"path": str(data), "maxBytesPerTrigger": "1m"}, "batch")
    # names are case-insensitive, as Spark's are
    assert _parse({"PATH": str(data), "TOPICS": "devices", "startingoffsets": "earliest"}).rows.topics == ("devices",)


def test_a_directory_without_a_commit_log_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no commitlog/ directory"):
        _parse({"path": str(tmp_path / "empty")})


def test_errors_surface_through_spark_before_any_row(spark, data, tmp_path):
    def read():  # a DataFrameReader keeps the options it was given: a fresh one each time
        return spark.read.format("commitlog")

    with pytest.raises(Exception, match=r"commitlog: unknown option 'topic' \(did you mean topics\?\)"):
        read().option("topic", "orders").load(str(data)).count()
    with pytest.raises(Exception, match="commitlog: maxBytesPerTrigger applies to streaming reads"):
        read().option("maxBytesPerTrigger", "10k").load(str(data)).count()
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception, match="holds no commitlog/ directory"):
        spark.read.format("commitlog").load(str(tmp_path / "empty")).count()
    with pytest.raises(Exception, match="endingOffsets applies to batch reads"):
        q = (spark.readStream.format("commitlog").option("endingOffsets", "latest").load(str(data))
             .writeStream.format("noop").start())
        try:
            q.awaitTermination(60)
        finally:
            q.stop()
    assert read().option("topics", "orders").load(str(data)).count() == 10


def test_every_option_is_documented_with_its_default():
    import pathlib
    import re

    from spark.options import OPTIONS

    from spark.cluster_options import OPTIONS as CLUSTER_OPTIONS

    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "SPARK.md").read_text()
    for heading, options in (("## Options", OPTIONS), ("## Cluster options", CLUSTER_OPTIONS)):
        section = doc.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
        table = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", section, re.M))
        assert sorted(table) == sorted(options), heading
        assert all(v.strip() for v in table.values())
