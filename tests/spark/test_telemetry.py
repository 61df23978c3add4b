"""The telemetry job against a plain-Python computation of the same data."""

import json
import math
import os
from collections import defaultdict

import msgpack
import pytest

from core.store.message import Message
from spark import telemetry
from spark.payload import PayloadError, numeric_fields

T0 = 1_700_000_040_000  # a minute boundary
DEVICES = ["d0", "d1", "d2", "d3"]


def _good(i):
    """(device, payload dict, encoding, content type) of the i-th good message."""
    device = DEVICES[i % 4]
    payload = {"temp": 20 + (i * 7) % 13 - 0.5 * (i % 3), "hum": (i * 5) % 31, "ok": True, "name": "x",
               "env": {"lux": i % 9}}
    if i % 11 == 0:
        del payload["hum"]
    fmt = ["json", "msgpack", "json-ct", "msgpack-ct"][i % 4]
    return device, payload, fmt


def _encode(payload, fmt):
    if fmt.startswith("json"):
        return json.dumps(payload).encode(), ("application/json" if fmt == "json-ct" else None)
    return msgpack.packb(payload), ("application/msgpack" if fmt == "msgpack-ct" else None)


MALFORMED = [
    (b"{bad json", None, "invalid json"),
    (b"[1, 2]", None, "not an object"),
    (b'{"s": "x", "b": false}', None, "no numeric field"),
    (b"\x81\xa1t\xc1", "application/msgpack", "invalid msgpack"),
    (msgpack.packb({"t": 1}), "application/json", "invalid json"),
    (b"", None, "empty payload"),
    (b"plain text", None, "unknown payload format"),
]


def _write_day(store, first, n, t_start):
    """n good messages, every 9th followed by a malformed one; returns what was written.

    Event time is the born timestamp, which the test sets."""
    good, bad = [], []

    def append(topic, body, props, ts):
        r = store.append(Message(topic=topic, body=body, properties=props, born_timestamp=ts))
        assert r.ok
        return r.physical_offset

    for i in range(first, first + n):
        device, payload, fmt = _good(i)
        body, ctype = _encode(payload, fmt)
        props = {"mqttTopic": f"devices/{device}/telemetry"}
        if ctype:
            props["contentType"] = ctype
        ts = t_start + (i - first) * 1700
        pos = append("devices", body, props, ts)
        good.append((pos, ts, device, payload))
        if i % 9 == 0:
            body, ctype, reason = MALFORMED[(i // 9) % len(MALFORMED)]
            props = {"mqttTopic": f"devices/{device}/telemetry"} | ({"contentType": ctype} if ctype else {})
            bad.append((append("devices", body, props, ts), reason))
        if i % 10 == 0:  # not telemetry: another MQTT topic, and a native message
            append("devices", b'{"v": 1}', {"mqttTopic": f"devices/{device}/status"}, ts)
            append("orders", b'{"v": 1}', {}, ts)
    return good, bad


def _flat(payload):
    out = {}
    for k, v in payload.items():
        if isinstance(v, dict):
            out.update({f"{k}.{k2}": v2 for k2, v2 in v.items()})
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(v)
    return out


def _expected(good, window_ms=60_000):
    groups = defaultdict(list)
    for pos, ts, device, payload in good:
        for field, value in _flat(payload).items():
            groups[(device, ts - ts % window_ms, field)].append((ts, pos, value))
    out = {}
    for key, vals in groups.items():
        values = [v for _, _, v in vals]
        out[key] = (len(values), min(values), max(values), sum(values) / len(values), max(vals)[2])
    return out


def _actual(spark, out):
    rows = spark.read.parquet(os.path.join(out, "aggregates")).collect()
    got = {}
    for r in rows:
        key = (r.device, round(r.window_start.timestamp() * 1000), r.field)
        assert key not in got, f"duplicate aggregate {key}"
        assert r.window_end.timestamp() - r.window_start.timestamp() == 60
        assert str(r.date) == r.window_start.strftime("%Y-%m-%d")
        got[key] = (r["count"], r["min"], r["max"], r["avg"], r["last"])
    return got


def _same(got, want):
    assert got.keys() == want.keys()
    for key, (c, lo, hi, avg, last) in want.items():
        gc, glo, ghi, gavg, glast = got[key]
        assert (gc, glo, ghi, glast) == (c, lo, hi, last), key
        assert math.isclose(gavg, avg, rel_tol=1e-12), key


def test_batch_job_matches_python_and_rejects_malformed(spark, make_store, tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "out"
    good, bad = _write_day(make_store(data, 16384), 0, 160, T0)
    argv = ["--data-dir", str(data), "--out", str(out), "--filter", "devices/+/telemetry", "--device-level", "2", "--window", "1 minute"]
    assert telemetry.main(argv, session=spark) == 0
    _same(_actual(spark, str(out)), _expected(good))

    rejects = {r.commitlog_offset: r for r in spark.read.parquet(str(out / "rejects")).collect()}
    assert sorted(rejects) == sorted(pos for pos, _ in bad)
    for pos, reason in bad:
        assert reason in rejects[pos].reason
        assert rejects[pos].device in DEVICES and rejects[pos].body is not None
    printed = capsys.readouterr().out
    assert "device" in printed and "d3" in printed and f"rejects: {len(bad)}" in printed


def test_device_level_out_of_range_is_a_reject(spark, make_store, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    store = make_store(data)
    store.append(Message(topic="devices", body=b'{"t": 1}', properties={"mqttTopic": "devices/d1"}, born_timestamp=T0))
    store.append(Message(topic="devices", body=b'{"t": 2}', properties={"mqttTopic": "devices/d1/telemetry"}, born_timestamp=T0))
    telemetry.main(["--data-dir", str(data), "--out", str(out), "--device-level", "3"], session=spark)
    reasons = [r.reason for r in spark.read.parquet(str(out / "rejects")).collect()]
    assert reasons == ["MQTT topic has no level 3"]
    assert [r.device for r in spark.read.parquet(str(out / "aggregates")).collect()] == ["telemetry"]


def test_stream_mode_emits_closed_windows_once_across_restarts(spark, make_store, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    argv = ["--data-dir", str(data), "--out", str(out), "--filter", "devices/+/telemetry", "--stream", "--once",
            "--watermark", "1 minute"]
    store = make_store(data, 16384)
    good, _ = _write_day(store, 0, 120, T0)
    telemetry.main(argv, session=spark)
    more, _ = _write_day(store, 120, 120, T0 + 120 * 1700)
    telemetry.main(argv, session=spark)
    everything = good + more
    watermark = max(ts for _, ts, _, _ in everything) - 60_000
    want = {k: v for k, v in _expected(everything).items() if k[1] + 60_000 <= watermark}
    assert len({k[1] for k in want}) >= 3
    _same(_actual(spark, str(out)), want)


@pytest.mark.parametrize(
    "body,ctype,want",
    [
        (b' {"a": 1, "b": {"c": 2.5, "d": [1]}, "e": null}', None, {"a": 1.0, "b.c": 2.5}),
        (msgpack.packb({"a": 1, 2: 3, "f": 1e400 if False else 1.5}), None, {"a": 1.0, "f": 1.5}),
        (b'{"a": NaN, "b": 1e999, "c": 10000000000000000000000}', "text/json", {"c": 1e22}),
    ],
)
def test_payload_fields(body, ctype, want):
    assert numeric_fields(body, ctype) == want


@pytest.mark.parametrize("body,ctype", [(b"\xc1", None), (b"\x92\x01\x02", "application/x-msgpack"), (b"{}", None), (b"\xff" * 3, "application/json")])
def test_payload_rejects(body, ctype):
    with pytest.raises(PayloadError):
        numeric_fields(body, ctype)


def test_a_data_dir_without_a_commit_log_is_one_line_before_spark_starts(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        telemetry.parse_args(["--data-dir", str(tmp_path / "nodata"), "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"mqgate telemetry: error: --data-dir {tmp_path / 'nodata'}: no commitlog/ there (the directory mqgate serve --data-dir wrote)"


def _fields_log(store):
    for i in range(12):
        body = json.dumps({"ts": T0 + i, "seq": i, "temp": 20 + i, "env": {"lux": i, "hum": 2 * i}}).encode()
        assert store.append(Message(topic="devices", body=body, properties={"mqttTopic": f"devices/d{i % 2}/telemetry"},
                                    born_timestamp=T0 + i * 1000)).ok


@pytest.mark.parametrize("flags, want", [
    ([], {"temp", "env.lux", "env.hum"}),  # ts and seq are not metrics by default
    (["--metrics", "temp,env.*"], {"temp", "env.lux", "env.hum"}),
    (["--metrics", "env.*", "--ignore-fields", "env.hum"], {"env.lux"}),
    (["--ignore-fields", ""], {"ts", "seq", "temp", "env.lux", "env.hum"}),
])
def test_which_fields_are_metrics_is_configurable(spark, make_store, tmp_path, flags, want):
    data, out = tmp_path / "data", tmp_path / "out"
    _fields_log(make_store(data))
    assert telemetry.main(["--data-dir", str(data), "--out", str(out), *flags], session=spark) == 0
    fields = {r.field for r in spark.read.parquet(str(out / "aggregates")).select("field").distinct().collect()}
    assert fields == want


def test_a_payload_without_metric_fields_is_a_reject_naming_its_fields(spark, make_store, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    store = make_store(data)
    store.append(Message(topic="devices", body=b'{"ts": 5, "seq": 1}', properties={"mqttTopic": "devices/d1/telemetry"},
                         born_timestamp=T0))
    store.append(Message(topic="devices", body=b'{"t": 2}', properties={"mqttTopic": "devices/d1/telemetry"}, born_timestamp=T0))
    telemetry.main(["--data-dir", str(data), "--out", str(out)], session=spark)
    assert [r.reason for r in spark.read.parquet(str(out / "rejects")).collect()] == [
        "no metric field (numeric fields: seq, ts)"]


def test_empty_outputs_are_readable(spark, make_store, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    _fields_log(make_store(data))  # nothing to reject
    assert telemetry.main(["--data-dir", str(data), "--out", str(out)], session=spark) == 0
    rejects = spark.read.parquet(str(out / "rejects"))
    assert rejects.count() == 0
    assert set(rejects.columns) == {"commitlog_offset", "ts", "mqtt_topic", "device", "reason", "body", "date"}
    # and no aggregates either (a filter nothing matches)
    assert telemetry.main(["--data-dir", str(data), "--out", str(out), "--filter", "none/#"], session=spark) == 0
    assert spark.read.parquet(str(out / "aggregates")).count() == 0
    assert spark.read.parquet(str(out / "rejects")).count() == 0


def test_empty_outputs_of_a_stream_run_are_readable_with_their_schema(spark, make_store, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    _fields_log(make_store(data))
    assert telemetry.main(["--data-dir", str(data), "--out", str(out), "--stream", "--once"], session=spark) == 0
    rejects = spark.read.schema(telemetry.REJECTS_SCHEMA).parquet(str(out / "rejects"))
    assert rejects.count() == 0
    assert spark.read.schema(telemetry.AGGREGATES_SCHEMA).parquet(str(out / "aggregates")).count() == 0
    # the schemas are those of the outputs
    assert telemetry.main(["--data-dir", str(data), "--out", str(out / "b")], session=spark) == 0
    for name, ddl in (("rejects", telemetry.REJECTS_SCHEMA), ("aggregates", telemetry.AGGREGATES_SCHEMA)):
        got = spark.read.parquet(str(out / "b" / name)).schema
        assert sorted(got.simpleString()[7:-1].split(",")) == sorted(
            spark.createDataFrame([], ddl).schema.simpleString()[7:-1].split(",")), name
