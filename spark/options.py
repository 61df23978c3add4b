"""Options of ``format("commitlog")``: the closed list, their parsing and their errors.

Rules kept here:
- Every option a reader is given is in `OPTIONS` (names are
  case-insensitive) and applies to the kind of read it is given to (batch or
  streaming); anything else is a `ValueError` naming the known options, so a
  misspelt or foreign (Kafka-source) option never silently widens a read.
- Errors are one line starting with ``commitlog:`` and name the option.
- Parsing needs no file except the check that the data directory holds a
  commit log; positions that need the log (a seek by time, the boundary
  check) are resolved later, by `spark.positions`.
- A `ScanOptions` holds plain values only, so it pickles to the readers.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from . import topicfilter
from .decode import ARROW_SCHEMA, COLUMNS, RowFilter

BATCH, STREAM = "batch", "stream"
BOTH = (BATCH, STREAM)

# spelled name -> where it applies; docs/SPARK.md documents each one
OPTIONS = {
    "path": BOTH,
    "topics": BOTH,
    "mqttTopicFilter": BOTH,
    "startingTimestamp": BOTH,
    "endingTimestamp": BOTH,
    "includeSystemTopics": BOTH,
    "maxBytesPerPartition": BOTH,
    "startingOffsets": BOTH,
    "endingOffsets": (BATCH,),
    "failOnDataLoss": BOTH,
    "maxBytesPerTrigger": (STREAM,),
    "maxOffsetsPerTrigger": (STREAM,),
    "minPartitions": BOTH,
}
_BY_LOWER = {k.lower(): k for k in OPTIONS}

# options of Spark's Kafka source a Kafka user may carry over, and what to use here
KAFKA_OPTIONS = {
    "subscribe": "use topics",
    "subscribepattern": "use topics or mqttTopicFilter",
    "assign": "use startingOffsets with per-queue JSON",
    "kafka.bootstrap.servers": "load() the data directory instead",
    "startingoffsetsbytimestamp": 'use startingOffsets={"timestamp": ...}',
    "endingoffsetsbytimestamp": 'use endingOffsets={"timestamp": ...}',
    "startingoffsetsbytimestampstrategy": 'use startingOffsets={"timestamp": ...}',
    "includeheaders": "properties are always read",
    "groupidprefix": "there is no consumer group",
    "kafka.group.id": "there is no consumer group",
    "minoffsetspertrigger": "not supported",
    "maxtriggerdelay": "not supported",
}

DEFAULT_MAX_BYTES_PER_PARTITION = 64 << 20


def _known() -> str:
    return ", ".join(OPTIONS)


def check_names(options: dict, mode: str) -> None:
    """`ValueError` for an option that is unknown or does not apply to ``mode``."""
    for given in options:
        low = given.lower()
        spelled = _BY_LOWER.get(low)
        if spelled is None:
            if low in KAFKA_OPTIONS:
                raise ValueError(
                    f"commitlog: {given!r} is a Kafka-source option that does not apply here "
                    f"({KAFKA_OPTIONS[low]}); known options: {_known()}"
                )
            near = difflib.get_close_matches(low, _BY_LOWER, n=1, cutoff=0.7)
            hint = f" (did you mean {_BY_LOWER[near[0]]}?)" if near else ""
            raise ValueError(f"commitlog: unknown option {given!r}{hint}; known options: {_known()}")
        if mode not in OPTIONS[spelled]:
            where = "batch reads (spark.read)" if OPTIONS[spelled] == (BATCH,) else "streaming reads (spark.readStream)"
            raise ValueError(f"commitlog: {spelled} applies to {where} only")


@dataclass(frozen=True, slots=True)
class Position:
    """A starting or ending position as given, before the log is looked at.

    ``kind``: ``earliest``, ``latest``, ``pos`` (a commit-log position in
    ``value``), ``timestamp`` (store time in ms in ``value``: the first entry
    at or after it) or ``queues`` (``queues``: (topic, queue id, queue
    offset) triples; -2 earliest, -1 latest).
    """

    kind: str
    value: int | None = None
    queues: tuple[tuple[str, int, int], ...] = ()


def parse_position(text: str | None, name: str, default: str, mode: str) -> Position:
    """A position as Kafka's source takes it; as there, a batch read cannot start at ``latest``."""
    raw = (text if text is not None and text.strip() else default).strip()
    low = raw.lower()
    ending = name == "endingOffsets"
    allowed = ("latest",) if ending else ("earliest",) if mode == BATCH else ("earliest", "latest")
    shape = (f"{' or '.join(allowed)}, a commit-log position, {{\"timestamp\": ms}} or per-queue JSON "
             f"{{\"topic\": {{\"0\": offset}}}}")
    if low in allowed:
        return Position(low)
    if low == "latest":
        raise ValueError("commitlog: startingOffsets=latest is for streams; a batch read would be empty")
    if low == "earliest":
        raise ValueError("commitlog: endingOffsets=earliest would make the read empty; give latest, "
                         "a position, a timestamp or per-queue offsets")
    if re.fullmatch(r"\d+", raw):
        return Position("pos", int(raw))
    try:
        obj = json.loads(raw) if raw.startswith("{") else None
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or not obj:
        raise ValueError(f"commitlog: {name} must be {shape}: {raw!r}")
    if set(obj) == {"pos"} and isinstance(obj["pos"], int) and obj["pos"] >= 0:
        return Position("pos", obj["pos"])
    if set(obj) == {"timestamp"}:
        ms = timestamp_ms(str(obj["timestamp"]), f"{name} timestamp")
        return Position("timestamp", ms)
    queues = []
    for topic, per_queue in obj.items():
        if not isinstance(per_queue, dict) or not per_queue:
            raise ValueError(f"commitlog: {name} must be {shape}: {raw!r}")
        for qid, off in per_queue.items():
            if not re.fullmatch(r"\d+", str(qid)) or not isinstance(off, int) or isinstance(off, bool) or off < -2:
                raise ValueError(f"commitlog: {name}: queue {topic}/{qid} needs a queue offset >= 0, "
                                 f"-2 (earliest) or -1 (latest): {off!r}")
            if ending and off == -2:
                raise ValueError(f"commitlog: {name}: -2 (earliest) cannot end a read (queue {topic}/{qid})")
            if not ending and off == -1:
                # a restart would move a per-queue "latest" on; Kafka's batch reads refuse it too
                raise ValueError(f"commitlog: {name}: -1 (latest) cannot start a queue (queue {topic}/{qid}); "
                                 "a stream can start the whole log at latest")
            queues.append((str(topic), int(qid), off))
    return Position("queues", queues=tuple(queues))


class ScanOptions:
    """Validated options; plain attributes only, so it pickles to readers."""

    def __init__(self, path: str, rows: RowFilter, max_bytes: int, starting: Position, max_bytes_per_trigger: int | None,
                 columns: tuple[str, ...] = COLUMNS, fail_on_data_loss: bool = True,
                 ending: Position = Position("latest"), max_offsets_per_trigger: int | None = None,
                 min_partitions: int = 1):
        self.path = path
        self.fail_on_data_loss = fail_on_data_loss
        self.columns = columns
        self.rows = rows
        self.max_bytes = max_bytes
        self.starting = starting
        self.ending = ending
        self.max_bytes_per_trigger = max_bytes_per_trigger
        self.max_offsets_per_trigger = max_offsets_per_trigger
        self.min_partitions = min_partitions

    @classmethod
    def parse(cls, options, schema=None, mode: str = BATCH) -> "ScanOptions":
        given = dict(options)
        check_names(given, mode)
        opts = {k.lower(): v for k, v in given.items()}
        path = opts.get("path")
        if not path:
            raise ValueError("commitlog: give the data directory, e.g. load('/path/to/data')")
        if not os.path.isdir(path):
            raise ValueError(f"commitlog: data directory {path!r} does not exist")
        if not os.path.isdir(os.path.join(path, "commitlog")):
            if not os.path.isdir(os.path.join(path, "store", "commitlog")):
                raise ValueError(f"commitlog: {path!r} holds no commitlog/ directory "
                                 "(give the data directory mqgate serve --data-dir writes)")
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
            start_ms=timestamp_ms(opts.get("startingtimestamp"), "startingTimestamp"),
            end_ms=timestamp_ms(opts.get("endingtimestamp"), "endingTimestamp"),
            include_system=_bool(opts.get("includesystemtopics", "false"), "includeSystemTopics"),
        )
        max_bytes = _bytes(opts.get("maxbytesperpartition"), "maxBytesPerPartition") or DEFAULT_MAX_BYTES_PER_PARTITION
        if max_bytes > 1 << 30:
            raise ValueError("commitlog: maxBytesPerPartition must be at most 1g")
        starting = parse_position(opts.get("startingoffsets"), "startingOffsets", "earliest", mode)
        ending = parse_position(opts.get("endingoffsets"), "endingOffsets", "latest", mode)
        per_trigger = _bytes(opts.get("maxbytespertrigger"), "maxBytesPerTrigger")
        fail = _bool(opts.get("failondataloss", "true"), "failOnDataLoss")
        per_trigger_rows = _count(opts.get("maxoffsetspertrigger"), "maxOffsetsPerTrigger")
        # the planning worker runs on the driver's machine: in local mode, every core
        min_parts = _count(opts.get("minpartitions"), "minPartitions") or os.cpu_count() or 1
        return cls(path, rows, max_bytes, starting, per_trigger, columns(schema), fail, ending, per_trigger_rows,
                   min_parts)


SCHEMA = (
    "topic string, queue_id int, queue_offset bigint, commitlog_offset bigint, "
    "born_ts timestamp, store_ts timestamp, tags string, keys string, "
    "properties map<string,string>, mqtt_topic string, body binary"
)


def columns(schema) -> tuple[str, ...]:
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


def timestamp_ms(value: str | None, name: str) -> int | None:
    """Epoch milliseconds from milliseconds or ISO-8601 (naive means UTC)."""
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


def _count(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    v = str(value).strip()
    if not re.fullmatch(r"\d+", v) or int(v) <= 0:
        raise ValueError(f"commitlog: {name} must be a positive whole number: {value!r}")
    return int(v)


def _bytes(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    m = re.fullmatch(r"\s*(\d+)\s*([kmg]?)b?\s*", str(value).lower())
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"commitlog: {name} must be a positive byte count (k/m/g suffix allowed): {value!r}")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2)]
