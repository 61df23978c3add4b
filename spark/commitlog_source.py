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

Options (names are case-insensitive; checked on the driver against the
closed list in `spark.options`, so an unknown, misspelt or Kafka-only option
is an error): ``path`` (``load(path)``), ``topics``, ``mqttTopicFilter``,
``startingTimestamp`` / ``endingTimestamp`` (row filters on store time),
``includeSystemTopics``, ``maxBytesPerPartition``, ``startingOffsets``,
``endingOffsets`` (batch only), ``failOnDataLoss``, ``minPartitions``,
``maxBytesPerTrigger`` and ``maxOffsetsPerTrigger`` (streaming only). docs/SPARK.md documents each, with its default and errors.

Rules kept here:
- Partitions are `spark.plan.LogRange` byte ranges of whole, valid entries
  wrapped in `InputPartition`; every entry of the scanned span is in exactly
  one of them. Files are opened only in ``read()``.
- A batch DataFrame is planned once (Spark keeps the partitions of a Python
  data source with the DataFrame), so its partitions are the ranges planned
  then plus one *tail* partition that walks, when it runs, from the planned
  end to the readable end (or ``endingOffsets``) of that moment: every action
  reads to the log end, as Kafka batch reads do. A torn or unfinished last
  entry is never part of a read.
- A planned range whose segment was deleted by retention is data loss
  (`plan.DataLossError` with ``failOnDataLoss``, else logged and skipped),
  never a ``FileNotFoundError``.
- Streaming offsets are ``{"pos": <commit-log position>}``, always an entry
  boundary (or a BLANK / segment end) reached by a walk; a micro-batch is
  [start, end), so a restarted query neither skips nor repeats entries.
- Planning (`spark.plan`) and decoding (`spark.decode`) are separate; a
  remote variant would plan (broker, queue, offset range) partitions and hand
  the pulled bytes, which have the same layout, to the same decoder.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Iterator

import numpy as np
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from . import plan, positions
from .decode import COLUMNS, RowFilter, decode_range
from .options import BATCH, SCHEMA, STREAM, ScanOptions  # noqa: F401  (SCHEMA, ScanOptions: re-exported)

log = logging.getLogger("spark.commitlog")


class CommitLogDataSource(DataSource):
    """``spark.read.format("commitlog")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "commitlog"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> "CommitLogReader":
        return CommitLogReader(ScanOptions.parse(self.options, schema, BATCH))

    def streamReader(self, schema) -> "CommitLogStreamReader":
        return CommitLogStreamReader(ScanOptions.parse(self.options, schema, STREAM))


def register(session) -> None:
    """Make ``format("commitlog")`` available in ``session``."""
    session.dataSource.register(CommitLogDataSource)


def ignore_terminal_interrupts() -> None:
    """In a Spark Python worker, ignore SIGINT; anywhere else, do nothing.

    A Ctrl-C in a terminal reaches every process of its group. Spark's JVM
    ignores it, but ``pyspark.daemon`` gives the workers it forks Python's
    default handler back, so a worker reading the log would die with
    KeyboardInterrupt in the middle of a task and fail the micro-batch that
    the driver is about to stop cleanly. A driver's main module is never a
    ``pyspark.`` one, so it keeps its handler.
    """
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(spec, "name", "").startswith("pyspark.") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass(frozen=True, slots=True)
class TailRange:
    """From ``start`` (a boundary planned earlier) to the readable end when read, or ``stop``."""

    path: str
    start: int
    stop: int | None


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
        o = options
        # resolved once, on the driver: a bad position fails the read at once
        self.start = positions.resolve(o.path, o.starting, "startingOffsets")
        self.stop = positions.resolve(o.path, o.ending, "endingOffsets")
        self.rows = positions.row_bounds(o.rows, o.starting, o.ending)
        if self.stop is not None and self.stop < self.start:
            raise ValueError(f"commitlog: endingOffsets ({self.stop}) is before startingOffsets ({self.start})")

    def partitions(self):
        o = self.options
        start, stop = self.start, self.stop
        if start < plan.log_start(o.path):
            start, _n = positions.data_loss(o.path, start, o.fail_on_data_loss, "startingOffsets")
        # store times never decrease along a log the store wrote (it stamps max(now, last)):
        # the startingTimestamp / endingTimestamp row filters are also seeks
        if self.rows.start_ms is not None:
            start = max(start, positions.seek_time(o.path, self.rows.start_ms))
        if self.rows.end_ms is not None:
            at = positions.seek_time(o.path, self.rows.end_ms)
            if at < plan.tail_end(o.path):  # an entry at or after the bound exists: nothing later is inside
                stop = max(start, at if stop is None else min(stop, at))
        ranges, end = plan.plan(o.path, start, stop, o.max_bytes, o.min_partitions)
        parts = [InputPartition(r) for r in ranges]
        if stop is None or end < stop:
            parts.append(InputPartition(TailRange(o.path, end, stop)))
        return parts

    def read(self, partition):
        return read_planned(partition.value, self.options, self.rows)


def read_planned(r, o: ScanOptions, rows: RowFilter) -> Iterator:
    """Decode a `plan.LogRange` or a `TailRange`; a deleted segment is data loss."""
    ignore_terminal_interrupts()
    if r is None:
        return
    if isinstance(r, TailRange):
        start = r.start
        if start < plan.log_start(r.path):
            start, _n = positions.data_loss(r.path, start, o.fail_on_data_loss, "the tail of a batch read")
        ranges, _end = plan.plan(r.path, start, r.stop, o.max_bytes)
    else:
        ranges = [r]
    for one in ranges:
        try:
            yield from read_range(InputPartition(one), rows, o.columns)
        except FileNotFoundError:
            if o.fail_on_data_loss:
                raise plan.DataLossError(o.path, one.start, plan.log_start(o.path), one.count) from None
            log.warning("commitlog: positions %d..%d were deleted by retention before they were read; "
                        "skipped %d messages (failOnDataLoss=false)", one.start, one.end, one.count)


class CommitLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"pos": N}``; see the module docstring.

    Data loss (a start below the oldest segment) is met in `latestOffset`
    for a new batch and in `partitions` for a batch planned before a
    restart; either raises `plan.DataLossError` or moves up to the oldest
    data, counting the skipped messages once per gap. `reportLatestOffset`
    shows the readable end, the lag behind it and that count in the query's
    progress (``sources[].latestOffset``).
    """

    def __init__(self, options: ScanOptions):
        ignore_terminal_interrupts()  # built in the worker that answers Spark's offset calls
        self.options = options
        self._target: int | None = None  # availableNow: do not go past this
        self._planned: tuple[int, int, list] | None = None  # (start, end, ranges) of the last walk
        self.rows = positions.row_bounds(options.rows, options.starting, options.ending)
        self._skipped = 0  # messages skipped to data loss since this query (re)started
        self._counted_to = 0  # _skipped counts the deleted messages below this position
        self._end: int | None = None  # the end of the newest batch

    def initialOffset(self) -> dict:
        o = self.options
        pos = positions.resolve(o.path, o.starting, "startingOffsets")
        if pos < plan.log_start(o.path):
            pos = self._lost(pos, "startingOffsets")
        return {"pos": pos}

    def _lost(self, pos: int, what: str) -> int:
        """``pos`` was deleted: raise, or the oldest position left (the skip counted once)."""
        o = self.options
        oldest = plan.log_start(o.path)
        if pos < self._counted_to and not o.fail_on_data_loss:
            pos = self._counted_to  # a planned batch and the next one can start in the same gap
        if pos < oldest:
            oldest, n = positions.data_loss(o.path, pos, o.fail_on_data_loss, what)
            self._skipped += n
            self._counted_to = oldest
        return oldest

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.max_bytes_per_trigger:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = plan.tail_end(self.options.path)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        o = self.options
        begin = int(start["pos"])
        if begin < plan.log_start(o.path):
            begin = self._lost(begin, "the next micro-batch")
        # Spark passes one limit; with both options set, the other one comes from the options
        max_rows = max_bytes = None
        if not isinstance(limit, ReadAllAvailable):
            max_rows, max_bytes = o.max_offsets_per_trigger, o.max_bytes_per_trigger
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        if isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        stop = self._target
        if max_bytes:
            stop = begin + max_bytes if stop is None else min(stop, begin + max_bytes)
        if stop is not None and stop <= begin:
            self._end = begin
            return {"pos": begin}
        if max_rows:
            ranges, end = plan.plan_entries(o.path, begin, stop, max_rows, o.max_bytes, o.min_partitions)
        else:
            ranges, end = plan.plan(o.path, begin, stop, o.max_bytes, o.min_partitions)
        if end == begin and max_bytes:
            # the next entry is larger than the cap: take it alone
            ranges, end = plan.plan(o.path, begin, self._target, o.max_bytes)
            if ranges:
                first = ranges[0]
                sizes = first.starts_in_range()
                end = first.start + (int(sizes[1]) if len(sizes) > 1 else first.end - first.start)
                ranges = None
        self._planned = (begin, end, ranges) if ranges is not None else None
        self._end = end
        return {"pos": end}

    def reportLatestOffset(self) -> dict:
        latest = plan.tail_end(self.options.path)
        out = {"pos": latest, "skippedMessages": self._skipped}
        if self._end is not None:
            out["lagBytes"] = max(0, latest - self._end)
        return out

    def partitions(self, start: dict, end: dict):
        begin, stop = int(start["pos"]), int(end["pos"])
        if begin < plan.log_start(self.options.path):
            # a batch planned before retention deleted its start (a restart re-runs it)
            begin = self._lost(begin, f"the micro-batch {begin}..{stop}")
        if stop <= begin:
            return []
        if self._planned and self._planned[0] == begin and self._planned[1] == stop:
            ranges = self._planned[2]
        else:
            ranges, reached = plan.plan(self.options.path, begin, stop, self.options.max_bytes,
                                        self.options.min_partitions)
            if reached != stop:
                raise plan.CorruptLogError(self.options.path, stop, f"log ends at {reached}, before the planned end")
        return [InputPartition(r) for r in ranges]

    def read(self, partition):
        return read_planned(partition.value, self.options, self.rows)

    def commit(self, end: dict) -> None:
        pass
