"""Vectorised decoding against `core.store.message.decode_message`, row by row."""

import random

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import _parse_datatype_string

from core.store.encoder import encode_message
from core.store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    Message,
    decode_message,
    pack_host,
)
from spark.commitlog_source import SCHEMA
from spark.decode import ARROW_SCHEMA, CHUNK_ROWS, RowFilter, decode_range
from spark.entries import gather_var, walk_sizes
from spark.topicfilter import to_regex

PROPS = [
    {},
    {"mqttTopic": "devices/d1/telemetry", "contentType": "application/json"},
    {"TAGS": "tagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"},
    {"é": "ü", "mqttTopic": "ü/🙂"},
    {"a": "x\x01y"},  # value holding the name/value separator
]


def _log(n=500, seed=3, origin=0):
    rnd = random.Random(seed)
    parts, pos = [], origin
    for i in range(n):
        props = dict(rnd.choice(PROPS))
        if rnd.random() < 0.5:
            props["UNIQ_KEY"] = f"U{i}"
        msg = Message(
            topic=rnd.choice(["devices", "plant", "%RETRY%g1", "%DLQ%g1", "SCHEDULE_TOPIC_XXXX", "rmq_sys_x", "RMQ_SYS_TRANS_HALF_TOPIC", "%LMQ%q", "%MQGATE%DELETE_QUEUE"]),
            body=bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 1, 30, 700]))),
            queue_id=rnd.randrange(8),
            properties=props,
            sysflag=rnd.choice([0, 0, 0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE]),
            born_timestamp=1_700_000_000_000 + i,
            born_host=pack_host(rnd.choice(["10.0.0.1", "fe80::1"]), 1234),
            store_host=pack_host(rnd.choice(["10.0.0.2", "::1"]), 10911),
        )
        data = encode_message(msg, i, pos, 1_700_000_100_000 + i * 10)
        parts.append(data)
        pos += len(data)
    buf = b"".join(parts)
    starts, end = walk_sizes(buf, 0, len(buf))
    assert end == len(buf)
    return buf, np.array(starts, dtype=np.int64)


def _rows(buf, starts, origin=0, **flt):
    batches = list(decode_range(np.frombuffer(buf, np.uint8), starts, origin, RowFilter(**flt)))
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA).to_pylist()


def _ms(ts):
    return round(ts.timestamp() * 1000)


def test_arrow_schema_is_what_pyspark_expects(spark):
    assert to_arrow_schema(_parse_datatype_string(SCHEMA), timezone="UTC").equals(ARROW_SCHEMA)


def test_every_field_matches_the_reference_decoder():
    origin = 1 << 30
    buf, starts = _log(origin=origin)
    rows = _rows(buf, starts, origin, include_system=True)
    assert len(rows) == len(starts)
    for row, s in zip(rows, starts):
        m = decode_message(buf, int(s))
        assert row["commitlog_offset"] == m.physical_offset == origin + s
        assert (row["topic"], row["queue_id"], row["queue_offset"]) == (m.topic, m.queue_id, m.queue_offset)
        assert (_ms(row["born_ts"]), _ms(row["store_ts"])) == (m.born_timestamp, m.store_timestamp)
        assert dict(row["properties"]) == m.properties
        assert row["tags"] == m.properties.get("TAGS")
        assert row["keys"] == m.properties.get("KEYS")
        assert row["mqtt_topic"] == m.properties.get("mqttTopic")
        assert row["body"] == m.body


def test_system_topics_and_unfinished_transactions_are_hidden_by_default():
    buf, starts = _log()
    kept = {r["commitlog_offset"] for r in _rows(buf, starts)}
    for s in starts:
        m = decode_message(buf, int(s))
        hidden = m.topic.startswith(("%RETRY%", "%DLQ%", "SCHEDULE_TOPIC_XXXX", "rmq_sys_", "RMQ_SYS_", "%LMQ%", "%MQGATE%")) or (
            m.transaction_type in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
        )
        assert (int(s) not in kept) is hidden


@pytest.mark.parametrize(
    "flt,keep",
    [
        (dict(topics=("plant",)), lambda m: m.topic == "plant"),
        (dict(mqtt_regex=to_regex("devices/+/telemetry")), lambda m: m.properties.get("mqttTopic") == "devices/d1/telemetry"),
        (dict(mqtt_regex=to_regex("#")), lambda m: "mqttTopic" in m.properties),
        (dict(start_ms=1_700_000_101_000, end_ms=1_700_000_102_000), lambda m: 1_700_000_101_000 <= m.store_timestamp < 1_700_000_102_000),
    ],
)
def test_filters(flt, keep):
    buf, starts = _log()
    got = [r["commitlog_offset"] for r in _rows(buf, starts, include_system=True, **flt)]
    want = [int(s) for s in starts if keep(decode_message(buf, int(s)))]
    assert got == want and want


def test_chunks_cover_large_ranges():
    msg = Message(topic="devices", body=b"{}", properties={"mqttTopic": "devices/x"})
    one = encode_message(msg)
    n = CHUNK_ROWS + 1000
    buf = b"".join(encode_message(msg, i, i * len(one), i) for i in range(n))
    starts = np.arange(n, dtype=np.int64) * len(one)
    batches = list(decode_range(np.frombuffer(buf, np.uint8), starts, 0, RowFilter()))
    assert [b.num_rows for b in batches] == [CHUNK_ROWS, 1000]
    assert pa.Table.from_batches(batches).column("queue_offset").to_pylist() == list(range(n))


def test_properties_that_are_not_utf8_do_not_stop_a_scan():
    good = encode_message(Message(topic="t", body=b"a", properties={"k": "v"}), 0, 0, 1)
    bad = bytearray(encode_message(Message(topic="t", body=b"b", properties={"k": "vv"}), 1, len(good), 2))
    bad[-1] = 0xFF  # last byte of the properties text
    rows = _rows(good + bytes(bad), np.array([0, len(good)]))
    assert dict(rows[0]["properties"]) == {"k": "v"}
    assert dict(rows[1]["properties"]) == {"k": "v\ufffd"}


def test_topic_that_is_not_utf8_does_not_stop_a_scan():
    good = encode_message(Message(topic="t", body=b"a"), 0, 0, 1)
    bad = bytearray(encode_message(Message(topic="u", body=b"b"), 1, len(good), 2))
    at = bad.index(b"u", len(bad) - 4)  # the topic byte, just before the 2-byte properties length
    bad[at] = 0xFF
    rows = _rows(good + bytes(bad), np.array([0, len(good)]), include_system=True)
    assert [r["topic"] for r in rows] == ["t", "\ufffd"]


@pytest.mark.parametrize("seed", range(5))
def test_gather_var_copies_each_span(seed):
    rnd = random.Random(seed)
    buf = bytes(rnd.randrange(256) for _ in range(3000))
    pos, length, at = [], [], 0
    while True:
        at += rnd.choice([0, 0, 1, 7, 40])
        n = rnd.choice([0, 1, 5, 12, 13, 16, 200])
        if at + n > len(buf):
            break
        pos.append(at)
        length.append(n)
        at += n
    if seed % 2:  # a span that ends exactly at the end of the buffer
        pos.append(len(buf) - 3)
        length.append(3)
        pos, length = zip(*[(p, n) for p, n in zip(pos, length) if p + n <= len(buf) - 3 or p == len(buf) - 3])
    b = np.frombuffer(buf, np.uint8)
    got = gather_var(b, np.array(pos, dtype=np.int64), np.array(length, dtype=np.int64))
    assert got.type == pa.binary()
    assert got.to_pylist() == [buf[p : p + n] for p, n in zip(pos, length)]


def test_gather_var_strings_check_utf8():
    b = np.frombuffer("añb".encode() + b"\xff\xfe", np.uint8)
    ok = gather_var(b, np.array([0]), np.array([4]), pa.string())
    assert ok.type == pa.string() and ok.to_pylist() == ["añb"]
    with pytest.raises(pa.ArrowInvalid):
        gather_var(b, np.array([0]), np.array([5]), pa.string())
    assert gather_var(b, np.zeros(0, np.int64), np.zeros(0, np.int64), pa.string()).equals(pa.array([], pa.string()))


@pytest.mark.parametrize(
    "pos,length",
    [([5, 0], [2, 2]), ([0, 1], [3, 3]), ([8], [3]), ([-1], [2]), ([2], [-1])],
    ids=["out of order", "overlapping", "past the end", "before the start", "negative length"],
)
def test_gather_var_refuses_spans_it_cannot_read(pos, length):
    b = np.frombuffer(b"0123456789", np.uint8)
    with pytest.raises(ValueError):
        gather_var(b, np.array(pos), np.array(length))


@pytest.mark.parametrize("columns", [("body",), ("mqtt_topic", "commitlog_offset"), ("properties", "topic"), ("store_ts",)])
def test_only_asked_columns_are_decoded(columns):
    buf, starts = _log()
    flt = RowFilter(mqtt_regex=to_regex("#"))
    full = pa.Table.from_batches(decode_range(np.frombuffer(buf, np.uint8), starts, 0, flt))
    part = pa.Table.from_batches(decode_range(np.frombuffer(buf, np.uint8), starts, 0, flt, columns))
    assert part.schema.names == list(columns)
    assert part.equals(full.select(list(columns)))
