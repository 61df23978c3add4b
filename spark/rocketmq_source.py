"""PySpark data source over a running cluster, through the native pull protocol (batch and streaming).

Name: ``rocketmq``

    import spark
    spark.register(session)
    df = (session.read.format("rocketmq").option("namesrv", "10.0.0.1:9876")
          .option("topic", "devices").load())
    sdf = session.readStream.format("rocketmq").option("namesrv", ...).option("topic", "devices").load()

Schema: the ``commitlog`` source's columns (`spark.options.SCHEMA`) plus
``broker`` (the broker group the row was read from); ``commitlog_offset``
is the entry's position in *that group's* commit log, so it is unique only
together with ``broker``. Options: `spark.cluster_options` (docs/SPARK.md,
"Cluster options").

Rules kept here:
- A queue is (broker group, queue id), named ``"<broker>:<queue id>"``.
  A partition is one or more `QueueRange` (queue, start offset, end offset);
  every offset of a planned span is in exactly one of them, like Spark's
  Kafka source. Nothing touches the cluster before ``read()`` but the
  driver's look-ups of queue bounds.
- Streaming offsets are ``{"<topic>": {"<broker>:<queue id>": next offset}}``,
  a micro-batch reads [start, end) of every queue, so a restarted query
  neither skips nor repeats a message. Queue offsets are the same on every
  replica of a group (the log is replicated byte for byte), so a failover
  changes nothing in a checkpoint.
- A batch DataFrame that ends at ``latest`` has, per queue, ranges up to the
  max offset at planning plus one tail range to the max offset of the
  moment it runs: each action reads to the end, as with ``commitlog``.
- Data loss (an offset below the queue's min offset) is found on the driver
  when a batch or micro-batch is planned (error, or skip counted in the
  progress) and in a task that meets it (error, or skip logged).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from . import cluster
from .cluster import QueueDataLossError, queue_key, split_key
from .cluster_options import BATCH, SCHEMA, STREAM, ClusterOptions, Position
from .commitlog_source import ignore_terminal_interrupts
from .decode import decode_range

log = logging.getLogger("spark.rocketmq")


class RocketMQDataSource(DataSource):
    """``spark.read.format("rocketmq")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> "RocketMQReader":
        return RocketMQReader(ClusterOptions.parse(self.options, schema, BATCH))

    def streamReader(self, schema) -> "RocketMQStreamReader":
        return RocketMQStreamReader(ClusterOptions.parse(self.options, schema, STREAM))


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Offsets [start, end) of one queue; ``end=None``: to the queue's max offset when read."""

    broker: str
    queue_id: int
    start: int
    end: int | None


def _resolve(o: ClusterOptions, p: Position, bounds: dict[str, cluster.Bounds], name: str) -> dict[str, int | None]:
    """Per queue, the offset ``p`` names (None: latest at each read, for an ending position)."""
    ending = name == "endingOffsets"
    if p.kind == "earliest":
        return {k: b.min for k, b in bounds.items()}
    if p.kind == "latest":
        return {k: (None if ending else b.max) for k, b in bounds.items()}
    if p.kind == "timestamp":
        return dict(cluster.search_offsets(o.namesrv, o.topic, p.value, o.timeout))
    given = dict(p.queues)
    unknown = sorted(set(given) - set(bounds))
    if unknown:
        raise ValueError(f"rocketmq: {name}: {o.topic} has no queue {', '.join(unknown)} "
                         f"(its queues: {', '.join(sorted(bounds))})")
    out: dict[str, int | None] = {}
    for k, b in bounds.items():
        off = given.get(k, -1 if ending else -2)
        out[k] = b.min if off == -2 else (None if ending else b.max) if off == -1 else off
    return out


def _lost(o: ClusterOptions, key: str, start: int, b: cluster.Bounds, what: str) -> int:
    """``start`` is below the queue's min offset: raise, or log the skip; the messages skipped."""
    if o.fail_on_data_loss:
        raise QueueDataLossError(o.topic, key, start, b.min)
    n = b.min - start
    log.warning("rocketmq: %s: %s queue %s: offsets %d..%d were deleted by retention; skipped %d messages "
                "(failOnDataLoss=false)", what, o.topic, key, start, b.min, n)
    return n


def split(spans: list[tuple[str, int, int]], max_per_part: int, min_parts: int) -> list[list[QueueRange]]:
    """Cut (key, start, end) spans into ranges of at most ``max_per_part`` offsets, at least ``min_parts`` in all."""
    total = sum(e - s for _k, s, e in spans)
    if min_parts > 1 and total:
        max_per_part = max(1, min(max_per_part, -(-total // min_parts)))
    out = []
    for key, s, e in spans:
        broker, qid = split_key(key)
        while s < e:
            n = min(max_per_part, e - s)
            out.append([QueueRange(broker, qid, s, s + n)])
            s += n
    return out


def read_ranges(ranges, o: ClusterOptions) -> Iterator[pa.RecordBatch]:
    """Pull and decode the ranges of one partition; shared by the batch and streaming readers."""
    ignore_terminal_interrupts()
    if not ranges:
        return
    decode_cols = tuple(c for c in o.columns if c != "broker") or ("queue_id",)
    out_schema = None
    for r in ranges:
        for chunk in cluster.pull_range(o.namesrv, o.topic, r.broker, r.queue_id, r.start, r.end,
                                        fail_on_data_loss=o.fail_on_data_loss, timeout=o.timeout):
            buf = np.frombuffer(chunk.data, dtype=np.uint8)
            for batch in decode_range(buf, chunk.starts, None, o.rows, decode_cols):
                arrays, fields = [], []
                for c in o.columns:
                    if c == "broker":
                        arrays.append(pa.array([r.broker] * batch.num_rows, pa.string()))
                        fields.append(pa.field("broker", pa.string()))
                    else:
                        arrays.append(batch.column(c))
                        fields.append(batch.schema.field(c))
                out_schema = out_schema or pa.schema(fields)
                yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)


class RocketMQReader(DataSourceReader):
    def __init__(self, options: ClusterOptions):
        self.options = o = options
        bounds = cluster.queue_bounds(o.namesrv, o.topic, o.timeout)
        starts = _resolve(o, o.starting, bounds, "startingOffsets")
        ends = _resolve(o, o.ending, bounds, "endingOffsets")
        self.spans: list[tuple[str, int, int]] = []  # planned now
        self.tails: list[QueueRange] = []  # to the end of the moment a task runs
        for key in sorted(bounds):
            b, s, e = bounds[key], starts[key], ends[key]
            if s > b.max:
                raise ValueError(f"rocketmq: startingOffsets: queue {key} offset {s} is past its end ({b.max})")
            if s < b.min:
                _lost(o, key, s, b, "startingOffsets")
                s = b.min
            if e is not None and e < s:
                raise ValueError(f"rocketmq: endingOffsets ({e}) is before startingOffsets ({s}) for queue {key}")
            planned = min(b.max, e) if e is not None else b.max
            if planned > s:
                self.spans.append((key, s, planned))
            if e is None or e > planned:
                broker, qid = split_key(key)
                self.tails.append(QueueRange(broker, qid, max(s, planned), e))

    def partitions(self):
        o = self.options
        parts = [InputPartition(rs) for rs in split(self.spans, o.max_offsets_per_partition, o.min_partitions)]
        if self.tails:
            parts.append(InputPartition(self.tails))
        return parts

    def read(self, partition):
        return read_ranges(partition.value, self.options)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"<topic>": {"<broker>:<qid>": offset}}``; see the module docstring."""

    def __init__(self, options: ClusterOptions):
        ignore_terminal_interrupts()
        self.options = options
        self._target: dict[str, int] | None = None  # availableNow: do not go past these
        self._skipped = 0
        self._latest: dict[str, int] = {}
        self._end: dict[str, int] = {}

    def _offsets(self, d: dict) -> dict[str, int]:
        topic = self.options.topic
        other = [k for k in d if k != topic]
        if other:  # a checkpoint of another query: reading from "earliest" would silently repeat everything
            raise ValueError(f"rocketmq: the checkpoint holds offsets of topic {other[0]!r}, this query reads {topic!r}; "
                             "give the query a checkpoint location of its own")
        return {str(k): int(v) for k, v in (d.get(topic) or {}).items()}

    def _wrap(self, d: dict[str, int]) -> dict:
        return {self.options.topic: dict(sorted(d.items()))}

    def initialOffset(self) -> dict:
        o = self.options
        bounds = cluster.queue_bounds(o.namesrv, o.topic, o.timeout)
        starts = _resolve(o, o.starting, bounds, "startingOffsets")
        out = {}
        for key, s in starts.items():
            if s < bounds[key].min:
                self._skipped += _lost(o, key, s, bounds[key], "startingOffsets")
                s = bounds[key].min
            out[key] = s
        return self._wrap(out)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        o = self.options
        self._target = {k: b.max for k, b in cluster.queue_bounds(o.namesrv, o.topic, o.timeout).items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        o = self.options
        begin = self._offsets(start)
        bounds = cluster.queue_bounds(o.namesrv, o.topic, o.timeout)
        self._latest = {k: b.max for k, b in bounds.items()}
        want: dict[str, int] = {}
        for key, b in bounds.items():
            s = begin.get(key)
            if s is None:  # a queue added since: from its start, as Kafka's source takes new partitions
                s = b.min
                begin[key] = s
            if s < b.min:
                self._skipped += _lost(o, key, s, b, "the next micro-batch")
                s = b.min
            top = b.max if self._target is None else min(b.max, self._target.get(key, b.max))
            want[key] = max(s, top)
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = dict(begin)  # queues that left the route keep their offset
        end.update(rate_limit(begin, want, cap))
        self._end = end
        return self._wrap(end)

    def reportLatestOffset(self) -> dict:
        lag = sum(max(0, v - self._end.get(k, v)) for k, v in self._latest.items())
        return {**self._wrap(self._latest), "skippedMessages": self._skipped, "lagMessages": lag}

    def partitions(self, start: dict, end: dict):
        o = self.options
        begin, stop = self._offsets(start), self._offsets(end)
        spans = [(k, begin.get(k, e), e) for k, e in sorted(stop.items()) if e > begin.get(k, e)]
        return [InputPartition(rs) for rs in split(spans, o.max_offsets_per_partition, o.min_partitions)]

    def read(self, partition):
        return read_ranges(partition.value, self.options)

    def commit(self, end: dict) -> None:
        pass


def rate_limit(begin: dict[str, int], want: dict[str, int], cap: int | None) -> dict[str, int]:
    """End offsets at most ``cap`` messages past ``begin`` in all, shared in proportion to each queue's backlog."""
    lag = {k: want[k] - begin.get(k, want[k]) for k in want}
    total = sum(lag.values())
    if cap is None or total <= cap:
        return dict(want)
    share = {k: cap * v // total for k, v in lag.items()}
    left = cap - sum(share.values())
    for k in sorted(lag, key=lambda k: (-(lag[k] - share[k]), k)):
        if left <= 0:
            break
        if share[k] < lag[k]:
            share[k] += 1
            left -= 1
    return {k: begin.get(k, want[k]) + share[k] for k in want}


def register(session) -> None:
    session.dataSource.register(RocketMQDataSource)


__all__ = ["RocketMQDataSource", "QueueRange", "register", "queue_key", "rate_limit", "split"]
