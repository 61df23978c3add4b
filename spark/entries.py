"""Commit-log entries as numpy arrays: walk sizes, gather fixed fields, check.

Rules kept here:
- Entry starts are found only by walking TOTALSIZE from a known boundary (a
  segment start or a position that an earlier walk produced); nothing is
  inferred from byte patterns.
- An entry is *valid* when its magic is V1, its PHYSICALOFFSET is its
  position, its field lengths fit inside it, and TOTALSIZE equals
  ``entry_length(sysflag, body, topic, props)`` (the check
  `core.store.message.decode_message` makes). Validity is computed for all
  entries at once over a uint8 buffer; positions derived from a bad entry
  are clipped so that gathering never reads outside the buffer.
- Variable fields become Arrow arrays through one Arrow ``take`` over the
  buffer (one C++ copy), never through a Python object per row.
- Nothing here opens files or knows about Spark.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from core.store.message import (
    BLANK_MAGIC,
    BORNHOST_V6_FLAG,
    MAGIC_V1,
    STOREHOST_V6_FLAG,
)

MIN_ENTRY_SIZE = 91  # calMsgLength with empty body, topic and properties, IPv4 hosts
_INT = struct.Struct(">i")
_SIZE_MAGIC = struct.Struct(">ii")


def walk_sizes(buf, pos: int, end: int, until: int | None = None) -> tuple[list[int], int]:
    """Entry starts from ``pos`` while each TOTALSIZE is plausible and fits before ``end``.

    With ``until``, the walk also stops at the first position >= ``until``.

    Returns (starts, stop). The walk is the only sequential step of a scan,
    so it reads nothing but the size field; magic and lengths are checked
    afterwards for all entries at once (`check`). A BLANK filler that fits is
    walked over like an entry and then cut by `check`.
    """
    unpack = _INT.unpack_from
    starts: list[int] = []
    append = starts.append
    if until is not None and until < end:
        while pos + MIN_ENTRY_SIZE <= end and pos < until:
            size = unpack(buf, pos)[0]
            if size < MIN_ENTRY_SIZE or pos + size > end:
                break
            append(pos)
            pos += size
        return starts, pos
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


_HEAD = 88  # TOTALSIZE .. BODY length with IPv4 born and store hosts


def _field(block: np.ndarray, at: int, width: int) -> np.ndarray:
    """Column ``at`` of a C-contiguous (n, _HEAD) block as int64: one strided read, no copy first."""
    view = np.ndarray((len(block),), dtype=f">i{width}", buffer=block, offset=at, strides=(block.shape[1],))
    return view.astype(np.int64)


@dataclass(slots=True)
class EntryFields:
    """Per-entry values and positions (into the buffer) for an array of starts."""

    start: np.ndarray
    size: np.ndarray
    sysflag: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    born_ms: np.ndarray
    store_ms: np.ndarray
    body_pos: np.ndarray
    body_len: np.ndarray
    topic_pos: np.ndarray
    topic_len: np.ndarray
    props_pos: np.ndarray
    props_len: np.ndarray
    physical: np.ndarray  # PHYSICALOFFSET: the entry's position in its broker's commit log
    valid: np.ndarray

    def take(self, idx) -> "EntryFields":
        return EntryFields(*(getattr(self, f)[idx] for f in self.__slots__))


def locate(b: np.ndarray, starts: np.ndarray, origin: int | None) -> EntryFields:
    """Fixed fields, field positions and the validity mask of entries at ``starts``.

    ``b`` is a uint8 array whose first byte is commit-log position ``origin``.
    PHYSICALOFFSET must equal the entry's position, so stale bytes left at
    another position (a preallocated segment after truncation) never pass
    as an entry. ``origin=None``: ``b`` holds entries that are not one span
    of a log (a pull response body: the entries of one queue, each from
    wherever it lies in the broker's log), so PHYSICALOFFSET is taken as
    given; every other check holds. The first 88 bytes of every entry are copied out in one
    gather; entries with an IPv6 host (rare) read their moved fields apart.
    """
    if len(b) < _HEAD:
        block = np.zeros((len(starts), _HEAD), dtype=np.uint8)
    else:
        block = np.ascontiguousarray(_rows(b, _HEAD)[np.clip(starts, 0, len(b) - _HEAD)])
    size = _field(block, 0, 4)
    magic = _field(block, 4, 4)
    sysflag = _field(block, 36, 4)
    born_adj = np.where(sysflag & BORNHOST_V6_FLAG, 12, 0)
    adj = born_adj + np.where(sysflag & STOREHOST_V6_FLAG, 12, 0)
    store_ms = _field(block, 56, 8)
    body_len = _field(block, 84, 4)
    v6 = np.flatnonzero(adj)
    if len(v6):
        store_ms[v6] = gather_be(b, starts[v6] + 56 + born_adj[v6], 8)
        body_len[v6] = gather_be(b, starts[v6] + 84 + adj[v6], 4)
    body_pos = starts + 88 + adj
    topic_len_pos = body_pos + body_len
    topic_len = gather_be(b, topic_len_pos, 1) & 0xFF
    topic_pos = topic_len_pos + 1
    props_len_pos = topic_pos + topic_len
    props_len = gather_be(b, props_len_pos, 2)
    props_pos = props_len_pos + 2
    end = starts + size
    physical = _field(block, 28, 8)
    valid = (
        (magic == MAGIC_V1)
        & (True if origin is None else physical == starts + origin)
        & (body_len >= 0)
        & (body_pos + body_len + 3 <= end)
        & (props_len >= 0)
        & (size == MIN_ENTRY_SIZE + adj + body_len + topic_len + props_len)
        & (props_pos + props_len == end)
        & (end <= len(b))
    )
    return EntryFields(
        start=starts, size=size, sysflag=sysflag, queue_id=_field(block, 12, 4),
        queue_offset=_field(block, 20, 8), born_ms=_field(block, 40, 8), store_ms=store_ms,
        body_pos=body_pos, body_len=body_len, topic_pos=topic_pos, topic_len=topic_len,
        props_pos=props_pos, props_len=props_len, physical=physical, valid=valid,
    )


def first_invalid(fields: EntryFields) -> int:
    """Index of the first invalid entry, or the count when all are valid."""
    bad = np.flatnonzero(~fields.valid)
    return int(bad[0]) if len(bad) else len(fields.valid)


def gather_var(b: np.ndarray, pos: np.ndarray, length: np.ndarray, type_: pa.DataType = pa.binary()) -> pa.Array:
    """An Arrow binary or string array of ``b[pos[i] : pos[i] + length[i]]``.

    The spans must be in buffer order and must not overlap (fields of
    entries in log order are). They become the even elements of a binary
    array over ``b`` whose offsets run span, gap, span, gap...; one Arrow
    ``take`` of the even elements copies the values out in C++. Spans out
    of order or outside ``b`` raise ``ValueError`` before anything is read;
    asking for ``string`` validates UTF-8 and raises ``pyarrow.ArrowInvalid``
    if not. ``b`` must be smaller than 2 GiB (offsets are int32).
    """
    n = len(pos)
    if n == 0:
        return pa.array([], type=type_)
    if len(b) >= 1 << 31:
        raise ValueError(f"gather_var: a buffer of {len(b)} bytes is past int32 offsets")
    bounds = np.empty(2 * n, dtype=np.int32)
    bounds[0::2] = pos
    bounds[1::2] = pos + length
    spans = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(b)])
    try:
        spans.validate(full=True)  # before the take: a bad caller gets an error, never a stray read
    except pa.ArrowInvalid as e:
        raise ValueError(f"gather_var: spans out of order or outside the buffer: {e}") from None
    arr = spans.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
    if pa.types.is_string(type_):
        arr = arr.view(pa.string())
        arr.validate(full=True)  # UTF-8
    return arr


def crc_ok(b: np.ndarray, fields: EntryFields, idx) -> np.ndarray:
    """BODYCRC check for the entries ``idx`` (a few: this is a per-entry step)."""
    out = []
    for i in np.atleast_1d(np.asarray(idx)):
        p, n = int(fields.body_pos[i]), int(fields.body_len[i])
        want = int(gather_be(b, np.array([int(fields.start[i]) + 8]), 4)[0])
        out.append(zlib.crc32(b[p : p + n]) & 0x7FFFFFFF == want)
    return np.array(out, dtype=bool)
