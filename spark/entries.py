"""Commit-log entries as numpy arrays: walk sizes, gather fixed fields, check.

Rules kept here:
- Entry starts are found only by walking TOTALSIZE from a known boundary (a
  segment start or a position that an earlier walk produced); nothing is
  inferred from byte patterns.
- An entry is *valid* when its magic is V1, its PHYSICALOFFSET is its
  position, its field lengths fit inside it,
  and TOTALSIZE equals ``entry_length(sysflag, body, topic, props)`` (the
  check `core.store.message.decode_message` makes). Validity is computed for
  all entries at once over a uint8 buffer; positions derived from a bad entry
  are clipped so that gathering never reads outside the buffer.
- Nothing here opens files or knows about Spark.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

from core.store.message import (
    BLANK_MAGIC,
    BORNHOST_V6_FLAG,
    MAGIC_V1,
    STOREHOST_V6_FLAG,
)

MIN_ENTRY_SIZE = 91  # calMsgLength with empty body, topic and properties, IPv4 hosts
_INT = struct.Struct(">i")
_SIZE_MAGIC = struct.Struct(">ii")


def walk_sizes(buf, pos: int, end: int) -> tuple[list[int], int]:
    """Entry starts from ``pos`` while each TOTALSIZE is plausible and fits before ``end``.

    Returns (starts, stop). The walk is the only sequential step of a scan,
    so it reads nothing but the size field; magic and lengths are checked
    afterwards for all entries at once (`check`). A BLANK filler that fits is
    walked over like an entry and then cut by `check`.
    """
    unpack = _INT.unpack_from
    starts: list[int] = []
    append = starts.append
    while pos + MIN_ENTRY_SIZE <= end:
        size = unpack(buf, pos)[0]
        if size < MIN_ENTRY_SIZE or pos + size > end:
            break
        append(pos)
        pos += size
    return starts, pos


def stop_kind(buf, pos: int, end: int) -> str:
    """What lies at a position where a walk stopped: end / blank / zero / torn."""
    if pos >= end:
        return "end"
    if end - pos < 8:
        return "zero" if not any(bytes(buf[pos:end])) else "torn"
    size, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return "blank"
    if size == 0 and magic == 0:
        return "zero"
    return "torn"


def _rows(b: np.ndarray, width: int) -> np.ndarray:
    """A (len(b) - width + 1, width) read-only view: row p is ``b[p : p + width]``."""
    n = max(len(b) - width + 1, 0)
    return np.lib.stride_tricks.as_strided(b, shape=(n, width), strides=(1, 1), writeable=False)


def gather_be(b: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed integers of ``width`` bytes at each position, as int64.

    One row gather over an overlapping strided view (no index matrix).
    Positions are clipped into the buffer: a position computed from a bad
    entry reads something harmless, and `locate` marks that entry invalid.
    """
    if len(b) < width:
        return np.zeros(len(pos), dtype=np.int64)
    pos = np.clip(pos, 0, len(b) - width)
    raw = _rows(b, width)[pos]
    if width == 1:
        return raw[:, 0].astype(np.int64)
    return raw.view(f">i{width}")[:, 0].astype(np.int64)


@dataclass(slots=True)
class EntryFields:
    """Per-entry positions (into the buffer) and values for an array of starts."""

    start: np.ndarray
    size: np.ndarray
    magic: np.ndarray
    sysflag: np.ndarray
    store_ts_pos: np.ndarray
    body_pos: np.ndarray
    body_len: np.ndarray
    topic_pos: np.ndarray
    topic_len: np.ndarray
    props_pos: np.ndarray
    props_len: np.ndarray
    valid: np.ndarray

    def take(self, idx) -> "EntryFields":
        return EntryFields(*(getattr(self, f)[idx] for f in self.__slots__))


def locate(b: np.ndarray, starts: np.ndarray, origin: int) -> EntryFields:
    """Field positions and the validity mask of entries starting at ``starts``.

    ``b`` is a uint8 array whose first byte is commit-log position ``origin``.
    PHYSICALOFFSET must equal the entry's position, so stale bytes left at
    another position (a preallocated segment after truncation) never pass
    as an entry.
    """
    size = gather_be(b, starts, 4)
    magic = gather_be(b, starts + 4, 4)
    phys = gather_be(b, starts + 28, 8)
    sysflag = gather_be(b, starts + 36, 4)
    born_adj = np.where(sysflag & BORNHOST_V6_FLAG, 12, 0)
    adj = born_adj + np.where(sysflag & STOREHOST_V6_FLAG, 12, 0)
    store_ts_pos = starts + 56 + born_adj
    body_len_pos = starts + 84 + adj
    body_len = gather_be(b, body_len_pos, 4)
    body_pos = body_len_pos + 4
    topic_len_pos = body_pos + body_len
    topic_len = gather_be(b, topic_len_pos, 1) & 0xFF
    topic_pos = topic_len_pos + 1
    props_len_pos = topic_pos + topic_len
    props_len = gather_be(b, props_len_pos, 2)
    props_pos = props_len_pos + 2
    end = starts + size
    valid = (
        (magic == MAGIC_V1)
        & (phys == starts + origin)
        & (body_len >= 0)
        & (body_pos + body_len + 3 <= end)
        & (props_len >= 0)
        & (size == MIN_ENTRY_SIZE + adj + body_len + topic_len + props_len)
        & (props_pos + props_len == end)
        & (end <= len(b))
    )
    return EntryFields(
        start=starts, size=size, magic=magic, sysflag=sysflag, store_ts_pos=store_ts_pos,
        body_pos=body_pos, body_len=body_len, topic_pos=topic_pos, topic_len=topic_len,
        props_pos=props_pos, props_len=props_len, valid=valid,
    )


def first_invalid(fields: EntryFields) -> int:
    """Index of the first invalid entry, or the count when all are valid."""
    bad = np.flatnonzero(~fields.valid)
    return int(bad[0]) if len(bad) else len(fields.valid)


def gather_var(b: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``b[pos[i] : pos[i] + length[i]]``: (int32 offsets, uint8 data).

    Slices must be ascending and disjoint (fields of consecutive entries).
    Short slices are gathered through an index; when the slices cover much
    of the buffer, a byte mask built from +1/-1 marks is cheaper.
    """
    offsets = np.zeros(len(length) + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return offsets.astype(np.int32), np.zeros(0, dtype=np.uint8)
    if total * 4 < len(b):
        idx = np.repeat(pos - offsets[:-1], length) + np.arange(total, dtype=np.int64)
        return offsets.astype(np.int32), b[idx]
    marks = np.zeros(len(b) + 1, dtype=np.int8)
    marks[pos[length > 0]] += 1
    marks[(pos + length)[length > 0]] -= 1
    mask = np.cumsum(marks[:-1], dtype=np.int8).view(np.bool_)
    return offsets.astype(np.int32), b[mask]

def crc_ok(b: np.ndarray, fields: EntryFields, idx) -> np.ndarray:
    """BODYCRC check for the entries ``idx`` (a few: this is a per-entry step)."""
    out = []
    for i in np.atleast_1d(np.asarray(idx)):
        p, n = int(fields.body_pos[i]), int(fields.body_len[i])
        want = int(gather_be(b, fields.start[i : i + 1] + 8, 4)[0])
        out.append(zlib.crc32(b[p : p + n]) & 0x7FFFFFFF == want)
    return np.array(out, dtype=bool)
