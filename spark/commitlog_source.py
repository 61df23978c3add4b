"""PySpark data source over a local mqgate commit log (batch and streaming).

Name: ``commitlog``

Register once per session, then read a store's data directory::

    import spark
    spark.register(session)          # session.dataSource.register(CommitLogDataSource)
    df = session.read.format("commitlog").load("/var/lib/mqgate/data")
    sdf = session.readStream.format("commitlog").load("/var/lib/mqgate/data")

Schema:

    ==================  =============================  =====================================
    column              type                           from
    ==================  =============================  =====================================
    topic               string                         TOPIC (broker topic, MQTT first level)
    queue_id            int                            QUEUEID
    queue_offset        bigint                         QUEUEOFFSET
    commitlog_offset    bigint                         position of the entry in the log
    born_ts             timestamp                      BORNTIMESTAMP (ms)
    store_ts            timestamp                      STORETIMESTAMP (ms)
    tags                string                         property TAGS
    keys                string                         property KEYS (space-separated)
    properties          map<string,string>             all properties
    mqtt_topic          string                         property mqttTopic (null: native message)
    body                binary                         BODY as stored
    ==================  =============================  =====================================

Projection: Python data sources get no column pruning from Spark, so a
reader given a user schema that names a subset of these columns (same
types), e.g. ``.schema("mqtt_topic string, body binary")``, decodes only
those; an unasked properties map or body costs nothing.

Options (names are case-insensitive; validated on the driver):

- ``path``: the data directory (holds ``commitlog/``, or ``store/commitlog/``
  as under ``mqgate serve``'s data directory); given by ``load(path)``.
- ``topics``: comma-separated broker topics (first MQTT levels) to keep.
- ``mqttTopicFilter``: an MQTT filter with ``+`` / ``#``; rows without an
  MQTT topic are dropped when it is set.
- ``startingTimestamp`` / ``endingTimestamp``: keep store timestamps in
  [start, end); epoch milliseconds or ISO-8601 (naive means UTC).
- ``includeSystemTopics`` (default ``false``): when false, topics starting
  with ``%RETRY%``, ``%DLQ%``, ``SCHEDULE_TOPIC_XXXX``, ``rmq_sys_``,
  ``RMQ_SYS_``, ``%LMQ%``, ``%MQGATE%`` (our own markers) and entries whose transaction type is PREPARED or
  ROLLBACK are left out.
- ``maxBytesPerPartition`` (default 64m): the largest byte range one task
  reads; a plain byte count or with a k / m / g suffix. A single larger entry
  still forms a partition of its own.
- Streaming only: ``startingOffsets`` = ``earliest`` (default), ``latest`` or
  a commit-log position; ``maxBytesPerTrigger`` caps one micro-batch;
  ``failOnDataLoss`` (default ``true``): when the segments a query has yet
  to read were deleted (retention), fail the query rather than skip to the
  oldest segment left.

Rules kept here:
- Partitions are `spark.plan.LogRange` byte ranges of whole, valid entries
  wrapped in `InputPartition`; every entry of the scanned span is in exactly
  one of them. Files are opened only in ``read()``.
- The batch reader reads a snapshot: the readable end when it is planned. A
  torn or unfinished last entry is not part of it.
- Streaming offsets are ``{"pos": <commit-log position>}``, always an entry
  boundary (or a BLANK / segment end) reached by a walk; a micro-batch is
  [start, end), so a restarted query neither skips nor repeats entries.
- Planning (`spark.plan`) and decoding (`spark.decode`) are separate; a
  remote variant would plan (broker, queue, offset range) partitions and hand
  the pulled bytes, which have the same layout, to the same decoder.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from typing import Iterator

import numpy as np
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, SupportsTriggerAvailableNow

from . import plan, topicfilter
from .decode import ARROW_SCHEMA, COLUMNS, RowFilter, decode_range

SCHEMA = (
    "topic string, queue_id int, queue_offset bigint, commitlog_offset bigint, "
    "born_ts timestamp, store_ts timestamp, tags string, keys string, "
    "properties map<string,string>, mqtt_topic string, body binary"
)
DEFAULT_MAX_BYTES_PER_PARTITION = 64 << 20


class CommitLogDataSource(DataSource):
    """``spark.read.format("commitlog")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "commitlog"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> "CommitLogReader":
        return CommitLogReader(ScanOptions.parse(self.options, schema))

    def streamReader(self, schema) -> "CommitLogStreamReader":
        return CommitLogStreamReader(ScanOptions.parse(self.options, schema))


def register(session) -> None:
    """Make ``format("commitlog")`` available in ``session``."""
    session.dataSource.register(CommitLogDataSource)


class ScanOptions:
    """Validated options; plain attributes only, so it pickles to readers."""

    def __init__(self, path: str, rows: RowFilter, max_bytes: int, starting: str | int, max_bytes_per_trigger: int | None,
                 columns: tuple[str, ...] = COLUMNS, fail_on_data_loss: bool = True):
        self.path = path
        self.fail_on_data_loss = fail_on_data_loss
        self.columns = columns
        self.rows = rows
        self.max_bytes = max_bytes
        self.starting = starting
        self.max_bytes_per_trigger = max_bytes_per_trigger

    @classmethod
    def parse(cls, options, schema=None) -> "ScanOptions":
        opts = {k.lower(): v for k, v in dict(options).items()}
        path = opts.get("path")
        if not path:
            raise ValueError("commitlog: give the data directory, e.g. load('/path/to/data')")
        if not os.path.isdir(path):
            raise ValueError(f"commitlog: data directory {path!r} does not exist")
        if not os.path.isdir(os.path.join(path, "commitlog")) and os.path.isdir(os.path.join(path, "store", "commitlog")):
            path = os.path.join(path, "store")  # the data directory of `mqgate serve`
        topics = None
        if opts.get("topics"):
            topics = tuple(t.strip() for t in opts["topics"].split(",") if t.strip())
        mqtt_regex = None
        if opts.get("mqtttopicfilter"):
            try:
                mqtt_regex = topicfilter.to_regex(opts["mqtttopicfilter"])
            except topicfilter.FilterError as e:
                raise ValueError(f"commitlog: mqttTopicFilter: {e}") from None
        rows = RowFilter(
            topics=topics,
            mqtt_regex=mqtt_regex,
            start_ms=_timestamp_ms(opts.get("startingtimestamp"), "startingTimestamp"),
            end_ms=_timestamp_ms(opts.get("endingtimestamp"), "endingTimestamp"),
            include_system=_bool(opts.get("includesystemtopics", "false"), "includeSystemTopics"),
        )
        max_bytes = _bytes(opts.get("maxbytesperpartition"), "maxBytesPerPartition") or DEFAULT_MAX_BYTES_PER_PARTITION
        starting: str | int = opts.get("startingoffsets", "earliest").strip().lower()
        if starting not in ("earliest", "latest"):
            try:
                starting = int(json.loads(starting)["pos"]) if starting.startswith("{") else int(starting)
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"commitlog: startingOffsets must be earliest, latest or a position: {starting!r}") from None
        per_trigger = _bytes(opts.get("maxbytespertrigger"), "maxBytesPerTrigger")
        fail = _bool(opts.get("failondataloss", "true"), "failOnDataLoss")
        if max_bytes > 1 << 30:
            raise ValueError("commitlog: maxBytesPerPartition must be at most 1g")
        return cls(path, rows, max_bytes, starting, per_trigger, _columns(schema), fail)


def _columns(schema) -> tuple[str, ...]:
    """The columns a (possibly user-given) schema asks for; each must be one of ours, same type."""
    if schema is None:
        return COLUMNS
    from pyspark.sql.pandas.types import to_arrow_schema

    asked = to_arrow_schema(schema, timezone="UTC")
    for f in asked:
        if f.name not in COLUMNS or not ARROW_SCHEMA.field(f.name).equals(f):
            raise ValueError(
                f"commitlog: a user schema may only pick columns of {SCHEMA!r} with their types; got {f.name} {f.type}"
            )
    return tuple(asked.names)


def _timestamp_ms(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    value = value.strip()
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"commitlog: {name} must be epoch milliseconds or ISO-8601: {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def _bool(value: str, name: str) -> bool:
    v = str(value).strip().lower()
    if v not in ("true", "false"):
        raise ValueError(f"commitlog: {name} must be true or false: {value!r}")
    return v == "true"


def _bytes(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    m = re.fullmatch(r"\s*(\d+)\s*([kmg]?)b?\s*", str(value).lower())
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"commitlog: {name} must be a positive byte count (k/m/g suffix allowed): {value!r}")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2)]


def read_range(part: InputPartition, rows: RowFilter, columns: tuple[str, ...] = COLUMNS) -> Iterator:
    """Decode one planned range; shared by the batch and streaming readers."""
    r = part.value
    if r is None:  # Spark's stand-in partition for an empty plan
        return
    length = r.end - r.start
    with open(r.path, "rb") as f:
        data = os.pread(f.fileno(), length, r.start - r.base)
    if len(data) != length:
        raise plan.CorruptLogError(r.path, r.start - r.base, f"short read ({len(data)} of {length} bytes)")
    yield from decode_range(np.frombuffer(data, dtype=np.uint8), r.starts_in_range(), r.start, rows, columns)


class CommitLogReader(DataSourceReader):
    def __init__(self, options: ScanOptions):
        self.options = options

    def partitions(self):
        ranges, _end = plan.plan(self.options.path, None, None, self.options.max_bytes)
        return [InputPartition(r) for r in ranges]

    def read(self, partition):
        return read_range(partition, self.options.rows, self.options.columns)


class CommitLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ScanOptions):
        self.options = options
        self._target: int | None = None  # availableNow: do not go past this
        self._planned: tuple[int, int, list] | None = None  # (start, end, ranges) of the last walk

    def initialOffset(self) -> dict:
        path = self.options.path
        if self.options.starting == "earliest":
            return {"pos": plan.log_start(path)}
        if self.options.starting == "latest":
            return {"pos": plan.tail_end(path)}
        return {"pos": int(self.options.starting)}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_bytes_per_trigger:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = plan.tail_end(self.options.path)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = int(start["pos"])
        oldest = plan.log_start(self.options.path)
        if begin < oldest:
            if self.options.fail_on_data_loss:
                raise plan.DataLossError(self.options.path, begin, oldest)
            begin = oldest
        stop = self._target
        if isinstance(limit, ReadMaxBytes):
            cap = begin + limit.max_bytes
            stop = cap if stop is None else min(stop, cap)
        if stop is not None and stop <= begin:
            return {"pos": begin}
        ranges, end = plan.plan(self.options.path, begin, stop, self.options.max_bytes)
        if end == begin and isinstance(limit, ReadMaxBytes):
            # the next entry is larger than the cap: take it alone
            ranges, end = plan.plan(self.options.path, begin, self._target, self.options.max_bytes)
            if ranges:
                first = ranges[0]
                sizes = first.starts_in_range()
                end = first.start + (int(sizes[1]) if len(sizes) > 1 else first.end - first.start)
                ranges = None
        self._planned = (begin, end, ranges) if ranges is not None else None
        return {"pos": end}

    def partitions(self, start: dict, end: dict):
        begin, stop = int(start["pos"]), int(end["pos"])
        if stop <= begin:
            return []
        if self._planned and self._planned[0] == begin and self._planned[1] == stop:
            ranges = self._planned[2]
        else:
            ranges, reached = plan.plan(self.options.path, begin, stop, self.options.max_bytes)
            if reached != stop:
                raise plan.CorruptLogError(self.options.path, stop, f"log ends at {reached}, before the planned end")
        return [InputPartition(r) for r in ranges]

    def read(self, partition):
        return read_range(partition, self.options.rows, self.options.columns)

    def commit(self, end: dict) -> None:
        pass
