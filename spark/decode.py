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

from .entries import EntryFields, gather_be, gather_var, locate

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

# Topics of broker bookkeeping (retry, dead letters, delay/timer parking,
# transaction half/op, multi-dispatch queues), hidden unless asked for.
SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "SCHEDULE_TOPIC_XXXX", "rmq_sys_", "RMQ_SYS_", "%LMQ%")

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


def decode_range(b: np.ndarray, starts: np.ndarray, origin: int, flt: RowFilter) -> Iterator[pa.RecordBatch]:
    """RecordBatches for the entries at ``starts`` of ``b``; ``b[0]`` is global position ``origin``."""
    if len(starts) == 0:
        return
    fields = locate(b, starts, origin)
    if not fields.valid.all():
        bad = int(np.flatnonzero(~fields.valid)[0])
        raise DecodeError(f"invalid entry at commit-log position {origin + int(starts[bad])}")
    # chunk by rows and bytes so gathers stay a few tens of MB
    cum = np.cumsum(fields.size)
    lo = 0
    n = len(starts)
    while lo < n:
        base = cum[lo - 1] if lo else 0
        hi = min(int(np.searchsorted(cum, base + CHUNK_BYTES, side="right")), lo + CHUNK_ROWS, n)
        hi = max(hi, lo + 1)
        batch = _decode_chunk(b, fields.take(slice(lo, hi)), origin, flt)
        if batch.num_rows:
            yield batch
        lo = hi


def _strings(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    arr = pa.Array.from_buffers(pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        arr = pa.array(
            [bytes(data[offsets[i] : offsets[i + 1]]).decode("utf-8", "replace") for i in range(len(offsets) - 1)],
            type=pa.string(),
        )
    return arr


def _keep(mask: np.ndarray, f: EntryFields, *arrays):
    idx = np.flatnonzero(mask)
    sel = pa.array(idx)
    return (f.take(idx), *(a.take(sel) for a in arrays))


def _decode_chunk(b: np.ndarray, f: EntryFields, origin: int, flt: RowFilter) -> pa.RecordBatch:
    store_ms = gather_be(b, f.store_ts_pos, 8)
    keep = np.ones(len(f.start), dtype=bool)
    if not flt.include_system:
        tx = f.sysflag & TRANSACTION_MASK
        keep &= (tx != TRANSACTION_PREPARED_TYPE) & (tx != TRANSACTION_ROLLBACK_TYPE)
    if flt.start_ms is not None:
        keep &= store_ms >= flt.start_ms
    if flt.end_ms is not None:
        keep &= store_ms < flt.end_ms
    topic = _strings(*gather_var(b, f.topic_pos, f.topic_len))
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
        f, topic = _keep(keep, f, topic)
        store_ms = store_ms[keep]
    props, mqtt_topic, tags, keys = _properties(b, f)
    if flt.mqtt_regex is not None:
        m = pc.match_substring_regex(mqtt_topic, flt.mqtt_regex).fill_null(False).to_numpy(zero_copy_only=False)
        if not m.all():
            f, topic, props, mqtt_topic, tags, keys = _keep(m, f, topic, props, mqtt_topic, tags, keys)
            store_ms = store_ms[m]
    body_off, body_data = gather_var(b, f.body_pos, f.body_len)
    body = pa.Array.from_buffers(pa.binary(), len(f.start), [None, pa.py_buffer(body_off), pa.py_buffer(body_data)])
    ts_type = ARROW_SCHEMA.field("store_ts").type
    columns = [
        topic,
        pa.array(gather_be(b, f.start + 12, 4).astype(np.int32)),
        pa.array(gather_be(b, f.start + 20, 8)),
        pa.array(f.start + origin),
        pa.array(gather_be(b, f.start + 40, 8) * 1000, type=pa.int64()).view(ts_type),
        pa.array(store_ms * 1000, type=pa.int64()).view(ts_type),
        tags,
        keys,
        props,
        mqtt_topic,
        body,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _properties(b: np.ndarray, f: EntryFields):
    """(properties map, mqtt_topic, tags, keys) arrays for the entries of ``f``."""
    n = len(f.start)
    po, pd = gather_var(b, f.props_pos, f.props_len)
    po64 = po.astype(np.int64)
    nonempty = f.props_len > 0
    s2 = np.flatnonzero(pd == 2)
    item_s = np.sort(np.concatenate([po64[:-1][nonempty], s2 + 1]))
    item_e = np.sort(np.concatenate([po64[1:][nonempty], s2]))
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
        keys_arr = _strict_strings(*gather_var(pd, item_s, first1 - item_s))
        vals_arr = _strict_strings(*gather_var(pd, first1 + 1, item_e - first1 - 1))
    except pa.ArrowInvalid:
        return _properties_slow(pd, po64)
    counts = np.bincount(row, minlength=n)
    map_off = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=map_off[1:])
    props = pa.MapArray.from_arrays(pa.array(map_off), keys_arr, vals_arr, type=MAP_TYPE)
    wanted = []
    for name in (PROPERTY_MQTT_TOPIC, PROPERTY_TAGS, PROPERTY_KEYS):
        hit = np.flatnonzero(pc.equal(keys_arr, name).to_numpy(zero_copy_only=False))
        pick = np.full(n, -1, dtype=np.int64)
        pick[row[hit]] = hit  # a repeated key: the last item wins, like dict()
        wanted.append(vals_arr.take(pa.array(pick, mask=pick < 0)))
    return (props, *wanted)


def _strict_strings(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    arr = pa.Array.from_buffers(pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    arr.validate(full=True)
    return arr


def _properties_slow(pd: np.ndarray, po: np.ndarray):
    """Per-row fallback for properties that are not valid UTF-8."""
    dicts = [
        decode_properties(bytes(pd[po[i] : po[i + 1]]).decode("utf-8", "replace")) for i in range(len(po) - 1)
    ]
    props = pa.array([list(d.items()) for d in dicts], type=MAP_TYPE)
    cols = [pa.array([d.get(k) for d in dicts], pa.string()) for k in (PROPERTY_MQTT_TOPIC, PROPERTY_TAGS, PROPERTY_KEYS)]
    return (props, *cols)
