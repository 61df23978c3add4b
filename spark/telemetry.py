"""Telemetry aggregation over the commit log (``mqgate telemetry`` runs this module).

    python -m spark.telemetry --data-dir DIR --out DIR [--filter 'devices/+/telemetry']
    python -m spark.telemetry --namesrv HOST:PORT[;HOST:PORT] --topic devices --out DIR [...]   (a cluster)
        [--device-level 2] [--window '1 minute'] [--metrics 'temp,env.*'] [--ignore-fields 'ts,seq']
        [--stream [--once] [--watermark '2 minutes']]

Rules kept here:
- Input is every message with an MQTT topic matching ``--filter`` (default
  ``#``: all MQTT messages; native messages have no MQTT topic and are
  never read). Event time is the born timestamp (when the gateway took the
  publish), or the store timestamp for an entry born at 0.
- The device id is level ``--device-level`` of the MQTT topic, counted from
  1: for ``devices/d7/telemetry`` level 1 is ``devices`` and level 2 (the
  default) is ``d7``.
- Payloads are parsed by `spark.payload` (JSON or msgpack, content type
  property ``contentType`` first). For every metric field (``--metrics``
  globs, minus ``--ignore-fields`` globs: by default every numeric field but
  ``ts``, ``timestamp``, ``time`` and ``seq``), per device per tumbling
  window: count, min, max, avg and last (the value with the latest event
  time, ties broken by log position).
- A message that cannot be used (bad payload, topic too short) becomes one
  row of ``<out>/rejects`` with its reason; the job never fails on data.
- Output: ``<out>/aggregates`` and ``<out>/rejects``, parquet partitioned by
  ``date`` (UTC date of the window start / of the event time). A batch run
  overwrites both, and an output without rows is one empty parquet file
  with the schema, so that it can still be read; a streaming run appends, with a watermark (default
  ``2 minutes``): a window is written once the watermark passes its end, so
  the newest windows stay open until later data arrives. Streaming
  checkpoints live in ``<out>/_checkpoints`` unless ``--checkpoint`` says
  otherwise; restarting with the same checkpoint continues where it stopped.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Iterator

import pyarrow as pa

from .payload import DEFAULT_IGNORED, MetricFields, PayloadError, metrics
from .stream_start import start_one_by_one

PARSED_SCHEMA = (
    "commitlog_offset bigint, ts timestamp, mqtt_topic string, device string, "
    "field string, value double, reason string, body binary"
)
_PARSED_ARROW = pa.schema([
    ("commitlog_offset", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("mqtt_topic", pa.string()),
    ("device", pa.string()), ("field", pa.string()), ("value", pa.float64()), ("reason", pa.string()),
    ("body", pa.binary()),
])
CONTENT_TYPE_PROPERTY = "contentType"


def parse_batches(batches: Iterator[pa.RecordBatch], device_level: int,
                  fields: MetricFields = MetricFields()) -> Iterator[pa.RecordBatch]:
    """mapInArrow step: messages to one row per numeric field, or one reject row.

    Payload decoding is a per-message Python step (json / msgpack); the
    rows it builds are collected column-wise.
    """
    from .commitlog_source import ignore_terminal_interrupts

    ignore_terminal_interrupts()
    for batch in batches:
        cols = {name: [] for name in _PARSED_ARROW.names}
        offsets = batch.column("commitlog_offset").to_pylist()
        ts = batch.column("ts").cast(pa.int64()).to_pylist()
        topics = batch.column("mqtt_topic").to_pylist()
        ctypes = batch.column("content_type").to_pylist()
        bodies = batch.column("body").to_pylist()
        for off, t, topic, ctype, body in zip(offsets, ts, topics, ctypes, bodies):
            device = None
            try:
                levels = topic.split("/")
                if len(levels) < device_level:
                    raise PayloadError(f"MQTT topic has no level {device_level}")
                device = levels[device_level - 1]
                if not device:
                    raise PayloadError(f"MQTT topic level {device_level} is empty")
                found = metrics(body or b"", ctype, fields)
            except PayloadError as e:
                for name, v in zip(_PARSED_ARROW.names, (off, t, topic, device, None, None, e.reason, body)):
                    cols[name].append(v)
                continue
            for name, value in found.items():
                for col, v in zip(_PARSED_ARROW.names, (off, t, topic, device, name, value, None, None)):
                    cols[col].append(v)
        arrays = [pa.array(cols[name], type=_PARSED_ARROW.field(name).type) for name in _PARSED_ARROW.names]
        yield pa.RecordBatch.from_arrays(arrays, schema=_PARSED_ARROW)


def parsed(df, device_level: int, fields: MetricFields = MetricFields()):
    """The source's rows, parsed: (commitlog_offset, ts, mqtt_topic, device, field, value, reason, body)."""
    from pyspark.sql import functions as F

    born = F.col("born_ts")
    src = df.where(F.col("mqtt_topic").isNotNull()).select(
        "commitlog_offset",
        F.when(born > F.lit(0).cast("timestamp"), born).otherwise(F.col("store_ts")).alias("ts"),
        "mqtt_topic",
        F.col("properties").getItem(CONTENT_TYPE_PROPERTY).alias("content_type"),
        "body",
    )
    level = device_level
    return src.mapInArrow(lambda it: parse_batches(it, level, fields), PARSED_SCHEMA)


def aggregates(rows, window: str):
    """Per device, window and field: count, min, max, avg, last."""
    from pyspark.sql import functions as F

    good = rows.where(F.col("reason").isNull())
    agg = good.groupBy("device", F.window("ts", window).alias("w"), "field").agg(
        F.count("value").alias("count"),
        F.min("value").alias("min"),
        F.max("value").alias("max"),
        F.avg("value").alias("avg"),
        F.max_by("value", F.struct("ts", "commitlog_offset")).alias("last"),
    )
    return agg.select(
        "device",
        F.col("w.start").alias("window_start"),
        F.col("w.end").alias("window_end"),
        "field", "count", "min", "max", "avg", "last",
        _utc_date(F.col("w.start")).alias("date"),
    )


def _utc_date(ts):
    """The UTC calendar date of a timestamp, whatever the session time zone."""
    from pyspark.sql import functions as F

    return F.date_from_unix_date(F.floor(F.unix_seconds(ts) / 86400).cast("int"))


# the outputs' schemas, for reading a streaming output that has no file yet
# (Spark infers a schema only from files its sink log lists)
AGGREGATES_SCHEMA = (
    "device string, window_start timestamp, window_end timestamp, field string, count bigint, "
    "min double, max double, avg double, last double, date date"
)
REJECTS_SCHEMA = (
    "commitlog_offset bigint, ts timestamp, mqtt_topic string, device string, reason string, body binary, date date"
)


def rejects(rows):
    from pyspark.sql import functions as F

    return rows.where(F.col("reason").isNotNull()).select(
        "commitlog_offset", "ts", "mqtt_topic", "device", "reason", "body", _utc_date(F.col("ts")).alias("date")
    )


SOURCE_COLUMNS = (
    "commitlog_offset bigint, born_ts timestamp, store_ts timestamp, properties map<string,string>, "
    "mqtt_topic string, body binary"
)


def _source(reader, args):
    # only the columns the job uses are decoded
    if args.namesrv:  # a cluster: format("rocketmq"), one topic
        r = (reader.format("rocketmq").schema(SOURCE_COLUMNS).option("mqttTopicFilter", args.filter)
             .option("namesrv", args.namesrv).option("topic", args.topic))
        return r.load()
    r = reader.format("commitlog").schema(SOURCE_COLUMNS).option("mqttTopicFilter", args.filter)
    if args.topics:
        r = r.option("topics", args.topics)
    return r.load(args.data_dir)


def run_batch(session, args) -> None:
    rows = parsed(_source(session.read, args), args.device_level, _fields(args)).persist()
    try:
        for name, df in (("aggregates", aggregates(rows, args.window)), ("rejects", rejects(rows))):
            path = os.path.join(args.out, name)
            df.write.mode("overwrite").partitionBy("date").parquet(path)
            if not _has_parquet(path):
                # no rows: partitionBy wrote no file, and a reader could not tell the schema
                df.limit(0).write.mode("overwrite").parquet(path)
    finally:
        rows.unpersist()


def _fields(args) -> MetricFields:
    return MetricFields.parse(args.metrics, args.ignore_fields)


def run_stream(session, args) -> None:
    """Two queries (aggregates, rejects), started one after the other.

    The second starts once the first has created its source
    (`spark.stream_start`): two streaming sources of one registered Python
    data source created at one moment can corrupt a map that Spark shares
    between them, and then the first micro-batch of both queries fails with
    java.io.OptionalDataException. Each query builds its own source and
    parse step; sharing one DataFrame was suspected once, but does not
    matter to that race.
    """
    def rows():
        return parsed(_source(session.readStream, args), args.device_level, _fields(args))

    ckpt = args.checkpoint or os.path.join(args.out, "_checkpoints")
    trigger = {"availableNow": True} if args.once else {"processingTime": args.trigger_interval}
    agg = aggregates(rows().withWatermark("ts", args.watermark), args.window)
    writers = [
        agg.writeStream.format("parquet").outputMode("append").partitionBy("date")
        .option("path", os.path.join(args.out, "aggregates"))
        .option("checkpointLocation", os.path.join(ckpt, "aggregates"))
        .trigger(**trigger).queryName("telemetry_aggregates"),
        rejects(rows()).writeStream.format("parquet").outputMode("append").partitionBy("date")
        .option("path", os.path.join(args.out, "rejects"))
        .option("checkpointLocation", os.path.join(ckpt, "rejects"))
        .trigger(**trigger).queryName("telemetry_rejects"),
    ]
    with StopRequest() as stop:  # before the starts: the first query may be in a batch while the second starts
        queries = start_one_by_one(writers)
        try:
            # --once: until both have read what is there; else until one fails (or a stop)
            running = any if args.once else all
            while running(q.isActive for q in queries) and not stop.requested.wait(1 if args.once else 5):
                if args.once:
                    continue
                for q in queries:
                    p = q.lastProgress
                    if p and p.get("numInputRows"):
                        print(f"{q.name}: batch {p['batchId']}: {p['numInputRows']} rows", file=sys.stderr)
        finally:
            _stop(queries, stop.requested.is_set())
    errors = [q.exception() for q in queries if q.exception()]
    if errors and stop.requested.is_set():
        # the checkpoint holds the batch as planned but not committed: the next start re-runs it
        first = str(errors[0]).strip().splitlines()[0]
        print(f"mqgate telemetry: stopped by {stop.name} while a micro-batch ran ({first[:160]}); "
              "the next start redoes it from the checkpoint", file=sys.stderr)
    elif errors:
        raise errors[0]


STOP_GRACE_S = 60  # how long a stop waits for running micro-batches to end


class StopRequest:
    """SIGINT and SIGTERM, while a stream runs, ask for a stop (a second one stops waiting).

    PySpark's own SIGINT handler cancels every running job: the micro-batch
    under way dies with whatever its tasks were doing (job cancelled, an
    interrupted read) and the query ends with that error. Here
    the signal only sets `requested`; the caller lets running batches end
    and stops the queries itself. Handlers can be set in the main thread only.
    """

    def __init__(self):
        self.requested = threading.Event()
        self.name = ""
        self._old: dict = {}

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _handle(self, signum, _frame) -> None:
        if self.requested.is_set():
            raise KeyboardInterrupt  # asked twice: stop waiting for the batch
        self.name = signal.Signals(signum).name
        self.requested.set()

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)


def _stop(queries, requested: bool) -> None:
    """Stop the queries, after letting running micro-batches end (up to STOP_GRACE_S) when asked to.

    Spark's stop interrupts a running batch's tasks; between batches it
    interrupts nothing. So the queries are stopped back to back at a moment
    when none of them runs a batch. A query that ended with an error while we
    waited is not raised here: the caller reports it (``q.exception()``)."""
    from pyspark.errors import StreamingQueryException

    deadline = time.monotonic() + STOP_GRACE_S
    while requested and time.monotonic() < deadline:
        busy = [q for q in queries if q.isActive and q.status["isTriggerActive"]]
        if not busy:
            break
        try:
            busy[0].awaitTermination(0.1)
        except StreamingQueryException:
            pass  # it ended with an error: reported by the caller
    for q in queries:
        q.stop()


def summary(session, out: str, limit: int = 20) -> str:
    """A short per-device table of what ``out`` holds."""
    from pyspark.sql import functions as F

    lines = []
    agg_path, rej_path = os.path.join(out, "aggregates"), os.path.join(out, "rejects")
    n_rejects = session.read.parquet(rej_path).count() if _has_parquet(rej_path) else 0
    if _has_parquet(agg_path):
        agg = session.read.parquet(agg_path)
        per_device = (
            agg.groupBy("device")
            .agg(
                F.countDistinct("window_start").alias("windows"),
                F.countDistinct("field").alias("fields"),
                F.sum("count").alias("samples"),
                F.min("window_start").alias("first"),
                F.max("window_end").alias("last"),
            )
            .orderBy("device")
        )
        rows = per_device.limit(limit + 1).collect()
        header = ("device", "windows", "fields", "samples", "first window", "last window end")
        table = [header] + [
            (r.device, str(r.windows), str(r.fields), str(r.samples), str(r.first)[:19], str(r.last)[:19])
            for r in rows[:limit]
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        for j, row in enumerate(table):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)))
            if j == 0:
                lines.append("  ".join("-" * w for w in widths))
        if len(rows) > limit:
            lines.append(f"... more devices (first {limit} shown)")
    else:
        lines.append("no aggregates")
    lines.append(f"rejects: {n_rejects} (in {rej_path})")
    return "\n".join(lines)


def _has_parquet(path: str) -> bool:
    for _root, _dirs, files in os.walk(path):
        if any(f.endswith(".parquet") for f in files):
            return True
    return False


def _session():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("mqgate-telemetry")
    if not os.environ.get("MASTER"):
        builder = builder.master("local[*]")
    return (
        builder.config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="mqgate telemetry", description="Aggregate device telemetry from the commit log.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data-dir", help="the store's data directory (holds commitlog/)")
    src.add_argument("--namesrv", help="read a cluster instead: its name servers (host:port[;host:port]), with --topic")
    p.add_argument("--topic", default=None, help="with --namesrv: the broker topic (MQTT first level) to read")
    p.add_argument("--out", required=True, help="output directory (aggregates/, rejects/)")
    p.add_argument("--filter", default="#", help="MQTT topic filter of telemetry messages (default #)")
    p.add_argument("--topics", default=None, help="comma-separated broker topics to scan (default all)")
    p.add_argument("--device-level", type=int, default=2, help="MQTT topic level holding the device id, from 1 (default 2)")
    p.add_argument("--metrics", default=None,
                   help="comma-separated payload fields (flattened names, globs allowed: env.*) that are metrics "
                        "(default: every numeric field)")
    p.add_argument("--ignore-fields", default=None,
                   help=f"comma-separated fields (globs allowed) that are never metrics (default {','.join(DEFAULT_IGNORED)}; "
                        "'' for none)")
    p.add_argument("--window", default="1 minute", help="tumbling window length (default '1 minute')")
    p.add_argument("--stream", action="store_true", help="run as a streaming query")
    p.add_argument("--once", action="store_true", help="with --stream: process what is there now, then stop")
    p.add_argument("--trigger-interval", default="10 seconds", help="with --stream: micro-batch interval")
    p.add_argument("--watermark", default="2 minutes", help="with --stream: allowed lateness")
    p.add_argument("--checkpoint", default=None, help="with --stream: checkpoint directory")
    args = p.parse_args(argv)
    if args.device_level < 1:
        p.error("--device-level counts from 1")
    if args.once and not args.stream:
        p.error("--once goes with --stream")
    if args.namesrv:
        if not args.topic:
            p.error("--namesrv needs --topic (the broker topic to read, e.g. devices)")
        if args.topics:
            p.error("--topics goes with --data-dir; with --namesrv give one --topic")
    elif args.topic:
        p.error("--topic goes with --namesrv; with --data-dir use --topics")
    elif not os.path.isdir(os.path.join(args.data_dir, "commitlog")):  # before Spark starts: one line, not its traceback
        p.error(f"--data-dir {args.data_dir}: no commitlog/ there (the directory mqgate serve --data-dir wrote)")
    from .topicfilter import FilterError, validate

    try:
        validate(args.filter)
    except FilterError as e:
        p.error(f"--filter: {e}")
    return args


def main(argv=None, session=None) -> int:
    args = parse_args(argv)
    from . import register

    own = session is None
    session = session or _session()
    try:
        register(session)
        (run_stream if args.stream else run_batch)(session, args)
        print(summary(session, args.out))
    finally:
        if own:
            session.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
