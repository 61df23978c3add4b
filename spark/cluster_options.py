"""Options of ``format("rocketmq")``: the closed list, their parsing and their errors.

Rules kept here (as `spark.options` for ``commitlog``):
- Every option given is in `OPTIONS` (case-insensitive) and applies to the
  kind of read it is given to; anything else is a `ValueError` naming the
  known ones. Errors are one line starting with ``rocketmq:``.
- Parsing asks nothing of the cluster; positions are resolved against the
  queues later (`spark.rocketmq_source`).
- Positions are queue offsets per (broker group, queue id), Kafka-style JSON
  ``{"<topic>": {"<broker>:<queue id>": offset}}`` (-2 earliest, -1 latest),
  or ``earliest`` / ``latest`` / ``{"timestamp": ms}`` for every queue.
- A `ClusterOptions` holds plain values only, so it pickles to the readers.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass

from . import options as _o
from . import topicfilter
from .cluster import split_key
from .decode import ARROW_SCHEMA, RowFilter

BATCH, STREAM, BOTH = _o.BATCH, _o.STREAM, _o.BOTH

# spelled name -> where it applies; docs/SPARK.md ("Cluster options") documents each one
OPTIONS = {
    "namesrv": BOTH,
    "topic": BOTH,
    "mqttTopicFilter": BOTH,
    "startingTimestamp": BOTH,
    "endingTimestamp": BOTH,
    "startingOffsets": BOTH,
    "endingOffsets": (BATCH,),
    "failOnDataLoss": BOTH,
    "maxOffsetsPerTrigger": (STREAM,),
    "maxOffsetsPerPartition": BOTH,
    "minPartitions": BOTH,
    "timeout": BOTH,
}
_BY_LOWER = {k.lower(): k for k in OPTIONS}

KAFKA_OPTIONS = {
    "subscribe": "use topic",
    "subscribepattern": "use topic (one topic per read) and mqttTopicFilter",
    "assign": "use startingOffsets with per-queue JSON",
    "kafka.bootstrap.servers": "use namesrv",
    "topics": "use topic (one topic per read)",
    "path": "use namesrv and topic; load(path) is for format('commitlog')",
    "startingoffsetsbytimestamp": 'use startingOffsets={"timestamp": ...}',
    "endingoffsetsbytimestamp": 'use endingOffsets={"timestamp": ...}',
    "includeheaders": "properties are always read",
    "groupidprefix": "there is no consumer group",
    "kafka.group.id": "there is no consumer group",
    "maxbytespertrigger": "use maxOffsetsPerTrigger",
    "maxbytesperpartition": "use maxOffsetsPerPartition",
    "includesystemtopics": "name the system topic in topic",
    "minoffsetspertrigger": "not supported",
    "maxtriggerdelay": "not supported",
}

SCHEMA = _o.SCHEMA + ", broker string"
COLUMNS = (*ARROW_SCHEMA.names, "broker")
DEFAULT_MAX_OFFSETS_PER_PARTITION = 200_000


def _known() -> str:
    return ", ".join(OPTIONS)


def check_names(options: dict, mode: str) -> None:
    for given in options:
        low = given.lower()
        spelled = _BY_LOWER.get(low)
        if spelled is None:
            if low in KAFKA_OPTIONS:
                raise ValueError(f"rocketmq: {given!r} does not apply to this source ({KAFKA_OPTIONS[low]}); "
                                 f"known options: {_known()}")
            near = difflib.get_close_matches(low, _BY_LOWER, n=1, cutoff=0.7)
            hint = f" (did you mean {_BY_LOWER[near[0]]}?)" if near else ""
            raise ValueError(f"rocketmq: unknown option {given!r}{hint}; known options: {_known()}")
        if mode not in OPTIONS[spelled]:
            where = "batch reads (spark.read)" if OPTIONS[spelled] == (BATCH,) else "streaming reads (spark.readStream)"
            raise ValueError(f"rocketmq: {spelled} applies to {where} only")


@dataclass(frozen=True, slots=True)
class Position:
    """``kind``: earliest, latest, timestamp (``value`` ms) or queues (``queues``: key -> offset, -2/-1 allowed)."""

    kind: str
    value: int | None = None
    queues: tuple[tuple[str, int], ...] = ()


def parse_position(text: str | None, name: str, topic: str, mode: str) -> Position:
    ending = name == "endingOffsets"
    default = "latest" if ending else "earliest"
    raw = (text if text is not None and text.strip() else default).strip()
    low = raw.lower()
    if low == "earliest":
        if ending:
            raise ValueError("rocketmq: endingOffsets=earliest would make the read empty")
        return Position("earliest")
    if low == "latest":
        if not ending and mode == BATCH:
            raise ValueError("rocketmq: startingOffsets=latest is for streams; a batch read would be empty")
        return Position("latest")
    shape = (f'earliest, latest, {{"timestamp": ms}} or per-queue JSON {{"{topic}": {{"broker-a:0": offset}}}}')
    try:
        obj = json.loads(raw) if raw.startswith("{") else None
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or not obj:
        raise ValueError(f"rocketmq: {name} must be {shape}: {raw!r}")
    if set(obj) == {"timestamp"}:
        return Position("timestamp", _o.timestamp_ms(str(obj["timestamp"]), f"{name} timestamp"))
    if set(obj) != {topic} or not isinstance(obj[topic], dict) or not obj[topic]:
        raise ValueError(f"rocketmq: {name} must be {shape} (the topic read is {topic!r}): {raw!r}")
    queues = []
    for key, off in obj[topic].items():
        split_key(key)
        if not isinstance(off, int) or isinstance(off, bool) or off < -2:
            raise ValueError(f"rocketmq: {name}: queue {key} needs a queue offset >= 0, -2 (earliest) or "
                             f"-1 (latest): {off!r}")
        if ending and off == -2:
            raise ValueError(f"rocketmq: {name}: -2 (earliest) cannot end a read (queue {key})")
        queues.append((str(key), off))
    return Position("queues", queues=tuple(queues))


class ClusterOptions:
    """Validated options; plain attributes only, so it pickles to readers."""

    def __init__(self, namesrv: str, topic: str, rows: RowFilter, columns: tuple[str, ...], starting: Position,
                 ending: Position, fail_on_data_loss: bool, max_offsets_per_trigger: int | None,
                 max_offsets_per_partition: int, min_partitions: int, timeout: float):
        self.namesrv = namesrv
        self.topic = topic
        self.rows = rows
        self.columns = columns
        self.starting = starting
        self.ending = ending
        self.fail_on_data_loss = fail_on_data_loss
        self.max_offsets_per_trigger = max_offsets_per_trigger
        self.max_offsets_per_partition = max_offsets_per_partition
        self.min_partitions = min_partitions
        self.timeout = timeout

    @classmethod
    def parse(cls, options, schema=None, mode: str = BATCH) -> "ClusterOptions":
        given = dict(options)
        check_names(given, mode)
        opts = {k.lower(): v for k, v in given.items()}
        namesrv = (opts.get("namesrv") or "").strip()
        if not namesrv:
            raise ValueError('rocketmq: give the name servers, e.g. .option("namesrv", "10.0.0.1:9876;10.0.0.2:9876")')
        for addr in namesrv.replace(",", ";").split(";"):
            if addr.strip() and not re.fullmatch(r"[\w.\-\[\]:]+:\d+", addr.strip()):
                raise ValueError(f"rocketmq: namesrv must be host:port[;host:port...]: {namesrv!r}")
        topic = (opts.get("topic") or "").strip()
        if not topic:
            raise ValueError('rocketmq: give the topic to read, e.g. .option("topic", "devices")')
        if not re.fullmatch(r"[%|a-zA-Z0-9_-]{1,127}", topic):
            raise ValueError(f"rocketmq: topic must be a broker topic name (letters, digits, %|_-): {topic!r}")
        try:
            mqtt_regex = topicfilter.to_regex(opts["mqtttopicfilter"]) if opts.get("mqtttopicfilter") else None
            rows = RowFilter(
                mqtt_regex=mqtt_regex,
                start_ms=_o.timestamp_ms(opts.get("startingtimestamp"), "startingTimestamp"),
                end_ms=_o.timestamp_ms(opts.get("endingtimestamp"), "endingTimestamp"),
                include_system=True,  # the one topic asked for is read whole
            )
            fail = _o._bool(opts.get("failondataloss", "true"), "failOnDataLoss")
            per_trigger = _o._count(opts.get("maxoffsetspertrigger"), "maxOffsetsPerTrigger")
            per_part = (_o._count(opts.get("maxoffsetsperpartition"), "maxOffsetsPerPartition")
                        or DEFAULT_MAX_OFFSETS_PER_PARTITION)
            min_parts = _o._count(opts.get("minpartitions"), "minPartitions") or 1
            timeout = _o._count(opts.get("timeout"), "timeout") or 60
        except topicfilter.FilterError as e:
            raise ValueError(f"rocketmq: mqttTopicFilter: {e}") from None
        except ValueError as e:
            raise ValueError(str(e).replace("commitlog:", "rocketmq:", 1)) from None
        starting = parse_position(opts.get("startingoffsets"), "startingOffsets", topic, mode)
        ending = parse_position(opts.get("endingoffsets"), "endingOffsets", topic, mode)
        return cls(namesrv, topic, rows, columns(schema), starting, ending, fail, per_trigger, per_part, min_parts,
                   float(timeout))


def columns(schema) -> tuple[str, ...]:
    """The columns a (possibly user-given) schema asks for; each must be one of ours, same type."""
    if schema is None:
        return COLUMNS
    from pyspark.sql.pandas.types import to_arrow_schema
    import pyarrow as pa

    arrow = ARROW_SCHEMA.append(pa.field("broker", pa.string()))
    asked = to_arrow_schema(schema, timezone="UTC")
    for f in asked:
        if f.name not in COLUMNS or not arrow.field(f.name).equals(f):
            raise ValueError(f"rocketmq: a user schema may only pick columns of {SCHEMA!r} with their types; "
                             f"got {f.name} {f.type}")
    return tuple(asked.names)
