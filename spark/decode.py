"""Vectorised decoding of commit-log entries into pyarrow RecordBatches.

Rules kept here:
- Input is a uint8 buffer and the starts of entries already found by a walk
  (`spark.plan`); every entry must be valid (`spark.entries.locate`), else
  `DecodeError` (the bytes changed under us, or the caller is wrong).
- No Python object is built per row: fixed fields are numpy gathers,
  topic / properties / body are gathered into Arrow buffers, properties are
  split with numpy on their U+0002 / U+0001 separators. Only when a chunk
  holds bytes that are not UTF-8 does it fall back to a per-row decode with
  replacement characters, so a bad entry never stops a scan.
- Properties follow `core.store.message.decode_properties`: an item counts
  when its first U+0001 is neither its first nor its last character.
- Filters run as early as their inputs allow, so dropped rows never have
  their properties or bodies gathered.
- The output schema is `ARROW_SCHEMA`, which is what PySpark derives from
  `spark.commitlog_source.SCHEMA` (a test holds them equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.store.message import (
    PROPERTY_KEYS,
    PROPERTY_MQTT_TOPIC,
    PROPERTY_TAGS,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    decode_properties,
)

from .entries import EntryFields, gather_var, locate

MAP_TYPE = pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string()))
ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("commitlog_offset", pa.int64()),
    ("born_ts", pa.timestamp("us", tz="UTC")),
    ("store_ts", pa.timestamp("us", tz="UTC")),
    ("tags", pa.string()),
    ("keys", pa.string()),
    ("properties", MAP_TYPE),
    ("mqtt_topic", pa.string()),
    ("body", pa.binary()),
])

COLUMNS = tuple(ARROW_SCHEMA.names)

# Topics of broker bookkeeping (retry, dead letters, delay/timer parking,
# transaction half/op, multi-dispatch queues, and our own `%MQGATE%` markers
# such as the store's queue-deletion records), hidden unless asked for.
SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "SCHEDULE_TOPIC_XXXX", "rmq_sys_", "RMQ_SYS_", "%LMQ%", "%MQGATE%")

CHUNK_ROWS = 65536
CHUNK_BYTES = 8 << 20


class DecodeError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class RowFilter:
    """What a scan keeps; built and validated on the driver, pickled to readers."""

    topics: tuple[str, ...] | None = None
    mqtt_regex: str | None = None
    start_ms: int | None = None  # store timestamp, inclusive
    end_ms: int | None = None  # store timestamp, exclusive
    include_system: bool = False
    # per-queue bounds (Kafka-style JSON positions): rows of (topic, queue id)
    # are kept from a queue offset on ...
    queue_from: tuple[tuple[str, int, int], ...] = ()
    # ... and below one
    queue_until: tuple[tuple[str, int, int], ...] = ()


def decode_range(
    b: np.ndarray, starts: np.ndarray, origin: int | None, flt: RowFilter, columns: tuple[str, ...] = COLUMNS
) -> Iterator[pa.RecordBatch]:
    """RecordBatches for the entries at ``starts`` of ``b``; ``b[0]`` is global position ``origin``
    (None: entries pulled from a broker, each carrying its own position; `spark.entries.locate`).

    ``columns`` (names of `ARROW_SCHEMA`, in output order) are the only ones
    decoded: an unrequested properties map or body costs nothing.
    """
    if len(starts) == 0:
        return
    fields = locate(b, starts, origin)
    if not fields.valid.all():
        bad = int(np.flatnonzero(~fields.valid)[0])
        where = f"commit-log position {origin + int(starts[bad])}" if origin is not None else \
            f"byte {int(starts[bad])} of a pull response"
        raise DecodeError(f"invalid entry at {where}")
    # chunk by rows and bytes so gathers stay a few tens of MB
    cum = np.cumsum(fields.size)
    lo = 0
    n = len(starts)
    while lo < n:
        base = cum[lo - 1] if lo else 0
        hi = min(int(np.searchsorted(cum, base + CHUNK_BYTES, side="right")), lo + CHUNK_ROWS, n)
        hi = max(hi, lo + 1)
        batch = _decode_chunk(b, fields.take(slice(lo, hi)), origin, flt, columns)
        if batch.num_rows:
            yield batch
        lo = hi


def _strings(b: np.ndarray, pos: np.ndarray, length: np.ndarray) -> pa.Array:
    try:
        return gather_var(b, pos, length, pa.string())
    except pa.ArrowInvalid:  # not UTF-8: decode row by row with replacement characters
        return pa.array(
            [bytes(b[p : p + n]).decode("utf-8", "replace") for p, n in zip(pos.tolist(), length.tolist())],
            type=pa.string(),
        )


def _decode_chunk(b: np.ndarray, f: EntryFields, origin: int | None, flt: RowFilter, columns: tuple[str, ...]) -> pa.RecordBatch:
    store_ms = f.store_ms
    keep = np.ones(len(f.start), dtype=bool)
    if not flt.include_system:
        tx = f.sysflag & TRANSACTION_MASK
        keep &= (tx != TRANSACTION_PREPARED_TYPE) & (tx != TRANSACTION_ROLLBACK_TYPE)
    if flt.start_ms is not None:
        keep &= store_ms >= flt.start_ms
    if flt.end_ms is not None:
        keep &= store_ms < flt.end_ms
    cols: dict[str, pa.Array] = {}
    by_queue = bool(flt.queue_from or flt.queue_until)
    if "topic" in columns or not flt.include_system or flt.topics is not None or by_queue:
        topic = cols["topic"] = _strings(b, f.topic_pos, f.topic_len)
        if by_queue:
            keep &= _queue_bounds(topic, f, flt)
        if not flt.include_system or flt.topics is not None:
            # evaluate topic predicates once per distinct topic
            enc = pc.dictionary_encode(topic)
            dic = enc.dictionary
            ok = np.ones(len(dic), dtype=bool)
            if not flt.include_system:
                for prefix in SYSTEM_TOPIC_PREFIXES:
                    ok &= ~pc.starts_with(dic, prefix).to_numpy(zero_copy_only=False)
            if flt.topics is not None:
                ok &= pc.is_in(dic, value_set=pa.array(flt.topics, pa.string())).to_numpy(zero_copy_only=False)
            keep &= ok[enc.indices.to_numpy(zero_copy_only=False)]
    if not keep.all():
        idx = np.flatnonzero(keep)
        f, store_ms = f.take(idx), store_ms[idx]
        cols = {k: v.take(pa.array(idx)) for k, v in cols.items()}
    wanted = [c for c in ("mqtt_topic", "tags", "keys") if c in columns or (c == "mqtt_topic" and flt.mqtt_regex)]
    if wanted or "properties" in columns:
        cols.update(_properties(b, f, "properties" in columns, wanted))
    if flt.mqtt_regex is not None:
        m = pc.match_substring_regex(cols["mqtt_topic"], flt.mqtt_regex).fill_null(False).to_numpy(zero_copy_only=False)
        if not m.all():
            idx = np.flatnonzero(m)
            f, store_ms = f.take(idx), store_ms[idx]
            cols = {k: v.take(pa.array(idx)) for k, v in cols.items()}
    ts_type = ARROW_SCHEMA.field("store_ts").type
    fixed = {
        "queue_id": lambda: pa.array(f.queue_id.astype(np.int32)),
        "queue_offset": lambda: pa.array(f.queue_offset),
        "commitlog_offset": lambda: pa.array(f.physical),
        "born_ts": lambda: pa.array(f.born_ms * 1000, type=pa.int64()).view(ts_type),
        "store_ts": lambda: pa.array(store_ms * 1000, type=pa.int64()).view(ts_type),
        "body": lambda: gather_var(b, f.body_pos, f.body_len),
    }
    arrays = [cols[c] if c in cols else fixed[c]() for c in columns]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([ARROW_SCHEMA.field(c) for c in columns]))


def _queue_bounds(topic: pa.Array, f: EntryFields, flt: RowFilter) -> np.ndarray:
    """Rows inside the per-queue bounds of ``flt`` (queues it does not name are all inside)."""
    keep = np.ones(len(f.start), dtype=bool)
    for t, qid, off in flt.queue_from:
        mine = pc.equal(topic, t).to_numpy(zero_copy_only=False) & (f.queue_id == qid)
        keep &= ~mine | (f.queue_offset >= off)
    for t, qid, off in flt.queue_until:
        mine = pc.equal(topic, t).to_numpy(zero_copy_only=False) & (f.queue_id == qid)
        keep &= ~mine | (f.queue_offset < off)
    return keep


def _properties(b: np.ndarray, f: EntryFields, want_map: bool, wanted: list[str]) -> dict[str, pa.Array]:
    """The ``properties`` map (if ``want_map``) and the ``wanted`` property columns."""
    n = len(f.start)
    props = gather_var(b, f.props_pos, f.props_len)
    po64 = np.frombuffer(props.buffers()[1], dtype=np.int32)[props.offset : props.offset + n + 1].astype(np.int64)
    data = props.buffers()[2]
    pd = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    nonempty = f.props_len > 0
    s2 = np.flatnonzero(pd == 2)
    # each is two sorted runs: a stable sort (a merge for runs) joins them in one pass
    item_s = np.sort(np.concatenate([po64[:-1][nonempty], s2 + 1]), kind="stable")
    item_e = np.sort(np.concatenate([po64[1:][nonempty], s2]), kind="stable")
    s1 = np.flatnonzero(pd == 1)
    if len(s1):
        k = np.minimum(np.searchsorted(s1, item_s), len(s1) - 1)
        first1 = s1[k]
        ok = (first1 > item_s) & (first1 < item_e - 1)
    else:
        first1 = item_s
        ok = np.zeros(len(item_s), dtype=bool)
    item_s, item_e, first1 = item_s[ok], item_e[ok], first1[ok]
    row = np.searchsorted(po64, item_s, side="right") - 1
    try:
        keys_arr = gather_var(pd, item_s, first1 - item_s, pa.string())
        vals_arr = gather_var(pd, first1 + 1, item_e - first1 - 1, pa.string())
    except pa.ArrowInvalid:
        return _properties_slow(pd, po64, want_map, wanted)
    out = {}
    if want_map:
        map_off = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.bincount(row, minlength=n), out=map_off[1:])
        out["properties"] = pa.MapArray.from_arrays(pa.array(map_off), keys_arr, vals_arr, type=MAP_TYPE)
    for col in wanted:
        hit = np.flatnonzero(pc.equal(keys_arr, _COLUMN_PROPERTY[col]).to_numpy(zero_copy_only=False))
        pick = np.full(n, -1, dtype=np.int64)
        pick[row[hit]] = hit  # a repeated key: the last item wins, like dict()
        out[col] = vals_arr.take(pa.array(pick, mask=pick < 0))
    return out


_COLUMN_PROPERTY = {"mqtt_topic": PROPERTY_MQTT_TOPIC, "tags": PROPERTY_TAGS, "keys": PROPERTY_KEYS}


def _properties_slow(pd: np.ndarray, po: np.ndarray, want_map: bool, wanted: list[str]) -> dict[str, pa.Array]:
    """Per-row fallback for properties that are not valid UTF-8."""
    dicts = [
        decode_properties(bytes(pd[po[i] : po[i + 1]]).decode("utf-8", "replace")) for i in range(len(po) - 1)
    ]
    out = {col: pa.array([d.get(_COLUMN_PROPERTY[col]) for d in dicts], pa.string()) for col in wanted}
    if want_map:
        out["properties"] = pa.array([list(d.items()) for d in dicts], type=MAP_TYPE)
    return out
