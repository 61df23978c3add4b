"""Partition planning over a local commit log: exact byte ranges of whole entries.

Rules kept here:
- Positions are global commit-log offsets (segment base + position in the
  file). Every boundary this module hands out is a segment start or the
  start of an entry reached by walking sizes from a segment start or from an
  earlier boundary; nothing is guessed from byte patterns.
- Consume-queue units only speed the walk up: where the units' positions
  follow each other exactly by the sizes written in the log (checked for
  all at once), the walk takes them as they are; anywhere else (entries
  with no unit, such as prepared transactions, units not written yet, a
  unit that does not fit) it walks entry by entry. So the result is the same
  with or without consume queues.
- The readable end of the log is the end of its last complete, valid entry.
  In the newest segment a walk stops at the first invalid entry (a torn or
  unfinished tail, skipped until it is complete). In an older segment the
  walk must end at a BLANK filler, at zero fill or at the end of the file;
  anything else raises `CorruptLogError` with the file and position.
  The newest few entries must also match their body CRCs, which catches an
  entry whose body is still being copied in. (As in RocketMQ, an entry whose
  only missing bytes are the last ones of its topic or properties in a
  zero-filled segment cannot be told from a complete one.)
- A `LogRange` is a picklable byte range [start, end) inside one segment
  holding only whole, valid entries, plus the sizes of those entries
  (zlib-compressed int32) so that readers need not walk again. Files are
  opened by readers only (``read()``), never kept open in a partition.
- A remote variant would plan (broker, queue, offset range) partitions
  instead; decoding (`spark.decode`) does not care where bytes come from.
"""

from __future__ import annotations

import mmap
import os
import re
import zlib
from dataclasses import dataclass, field

import numpy as np

from .entries import MIN_ENTRY_SIZE, crc_ok, first_invalid, gather_be, locate, stop_kind, walk_sizes

_SEGMENT_NAME = re.compile(r"^\d{20}$")
TAIL_CRC_ENTRIES = 8


class CorruptLogError(Exception):
    """An entry in a sealed segment is neither valid nor a clean end."""

    def __init__(self, path: str, position: int, reason: str):
        super().__init__(f"{path}: {reason} at file position {position}")
        self.path = path
        self.position = position
        self.reason = reason


class DataLossError(Exception):
    """A reader's position lies in segments that were deleted."""

    def __init__(self, data_dir: str, position: int, oldest: int, skipped: int | None = None):
        count = f" ({skipped} messages)" if skipped is not None else ""
        super().__init__(
            f"commitlog: {data_dir}: positions {position}..{oldest}{count} were deleted by retention "
            f"(data loss; the oldest segment starts at {oldest}); set failOnDataLoss=false to continue from there"
        )
        self.position = position
        self.oldest = oldest
        self.skipped = skipped


@dataclass(frozen=True, slots=True)
class Segment:
    path: str
    base: int
    file_size: int


@dataclass(slots=True)
class LogRange:
    """Entries [start, end) (global positions) of one segment file.

    ``sizes`` is ``zlib.compress(int32 TOTALSIZE array)`` of the entries in
    order; readers rebuild entry starts with a cumulative sum.
    """

    path: str
    base: int
    start: int
    end: int
    count: int
    sizes: bytes = field(repr=False, default=b"")

    def starts_in_range(self) -> np.ndarray:
        """Entry starts relative to ``start``."""
        sizes = np.frombuffer(zlib.decompress(self.sizes), dtype=np.int32)
        out = np.zeros(len(sizes), dtype=np.int64)
        np.cumsum(sizes[:-1], out=out[1:])
        return out


def list_segments(data_dir: str) -> list[Segment]:
    """Commit-log segments of ``data_dir`` in offset order (empty if none)."""
    root = os.path.join(data_dir, "commitlog")
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    segs = []
    for name in names:
        if _SEGMENT_NAME.match(name):
            path = os.path.join(root, name)
            segs.append(Segment(path, int(name), os.path.getsize(path)))
    segs.sort(key=lambda s: s.base)
    return segs


@dataclass(slots=True)
class SegmentScan:
    """Walk result for one segment from some start position."""

    segment: Segment
    start: int  # global
    starts: np.ndarray  # global positions of valid entries
    sizes: np.ndarray  # int32
    stop: int  # global position after the last valid entry
    kind: str  # end / blank / zero / torn


def _open(seg: Segment):
    f = open(seg.path, "rb")
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        return f, b"", 0
    return f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), size


def _walk(buf, arr: np.ndarray, pos: int, end: int, hints: np.ndarray) -> np.ndarray:
    """Entry starts from ``pos`` (file positions), using ``hints`` where they chain."""
    parts = []
    while pos + MIN_ENTRY_SIZE <= end:
        i = int(np.searchsorted(hints, pos))
        if i < len(hints) and hints[i] == pos:
            cand = hints[i:]
            sizes = gather_be(arr, cand, 4)
            nxt = cand + sizes
            # a chain: each unit starts where the previous entry ends, and fits
            ok = (sizes >= MIN_ENTRY_SIZE) & (nxt <= end)
            follows = np.append(nxt[:-1] == cand[1:], False)
            brk = np.flatnonzero(~(ok & follows))
            j = int(brk[0]) if len(brk) else len(cand) - 1
            if not ok[j]:
                parts.append(cand[:j])
                pos = int(cand[j])
                if j == 0:
                    break  # the walk below would stop here too
                continue
            parts.append(cand[: j + 1])
            pos = int(nxt[j])
            continue
        until = int(hints[i]) if i < len(hints) else None
        walked, stop = walk_sizes(buf, pos, end, until)
        parts.append(np.asarray(walked, dtype=np.int64))
        if stop == pos or (until is None or stop < until):
            break  # the walk ended (or could not move): nothing more to chain
        pos = stop
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def scan_segment(seg: Segment, start: int, *, last: bool, limit: int | None = None,
                 hints: np.ndarray | None = None) -> SegmentScan:
    """Walk ``seg`` from global ``start`` up to its last valid entry (or ``limit``).

    ``hints``: sorted global positions from consume-queue units (optional).
    """
    f, buf, size = _open(seg)
    try:
        pos = start - seg.base
        end = size if limit is None else min(size, limit - seg.base)
        arr = np.frombuffer(buf, dtype=np.uint8, count=size) if size else np.zeros(0, np.uint8)
        rel_hints = np.zeros(0, dtype=np.int64)
        if hints is not None and len(hints):
            lo, hi = np.searchsorted(hints, [seg.base + pos, seg.base + end])
            rel_hints = hints[lo:hi] - seg.base
        starts = _walk(buf, arr, pos, end, rel_hints)
        if len(starts):
            fields = locate(arr, starts, seg.base)
            k = first_invalid(fields)
            if last and k:
                # the newest entries may still be being copied in by the
                # writer: their bodies must match their CRCs
                tail = np.arange(max(0, k - TAIL_CRC_ENTRIES), k)
                bad = np.flatnonzero(~crc_ok(arr, fields, tail))
                if len(bad):
                    k = int(tail[bad[0]])
            sizes = fields.size[:k].astype(np.int32)
            starts = starts[:k]
            del fields
        else:
            starts = np.zeros(0, dtype=np.int64)
            sizes = np.zeros(0, dtype=np.int32)
        stop = int(starts[-1] + sizes[-1]) if len(starts) else pos
        del arr
        kind = stop_kind(buf, stop, size)
        if kind == "torn" and limit is not None and (stop >= end or _crosses(buf, stop, end)):
            kind = "limit"  # the entry here ends after the limit: not ours to judge
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()
        f.close()
    if not last and kind == "torn":
        raise CorruptLogError(seg.path, stop, "invalid entry in a sealed segment")
    return SegmentScan(seg, start, starts + seg.base, sizes, stop + seg.base, kind)


def _crosses(buf, pos: int, end: int) -> bool:
    return pos + 4 <= len(buf) and pos + int.from_bytes(buf[pos : pos + 4], "big", signed=True) > end


_CQ_UNIT = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])
CQ_READ_BUDGET = 256 << 20  # bytes of consume-queue files read per plan, at most


def queue_positions(data_dir: str, start: int = 0) -> np.ndarray:
    """Sorted distinct commit-log positions >= ``start`` named by consume-queue units.

    Only topic queues are read (not multi-dispatch or session queues, whose
    units point at the same entries), newest files first within a budget:
    these are hints for `scan_segment`, and a missing one costs only time.
    """
    root = os.path.join(data_dir, "consumequeue")
    try:
        topics = os.listdir(root)
    except FileNotFoundError:
        return np.zeros(0, dtype=np.int64)
    files = []
    for topic in topics:
        if topic.startswith(("~", "%LMQ%", "%RETRY%", "%DLQ%")):
            continue
        tdir = os.path.join(root, topic)
        for qid in os.listdir(tdir) if os.path.isdir(tdir) else ():
            qdir = os.path.join(tdir, qid)
            if os.path.isdir(qdir):
                files.extend(os.path.join(qdir, n) for n in os.listdir(qdir) if _SEGMENT_NAME.match(n))
    parts, budget = [], CQ_READ_BUDGET
    for path in sorted(files, key=lambda p: os.path.basename(p), reverse=True):
        try:
            units = np.fromfile(path, dtype=_CQ_UNIT, count=max(0, budget // _CQ_UNIT.itemsize))
        except OSError:
            continue
        budget -= units.nbytes
        off, size = units["offset"], units["size"]
        good = (size > 0) & (size != 0x7FFFFFFF) & (off >= start)
        parts.append(off[good].astype(np.int64))
        if budget <= 0:
            break
    if not parts:
        return np.zeros(0, dtype=np.int64)
    pos = np.sort(np.concatenate(parts))
    return pos[np.append(True, pos[1:] != pos[:-1])] if len(pos) else pos


def segment_index(segments: list[Segment], pos: int) -> int:
    """Index of the segment holding global ``pos`` (the last one with base <= pos)."""
    bases = [s.base for s in segments]
    i = int(np.searchsorted(bases, pos, side="right")) - 1
    return max(i, 0)


def log_start(data_dir: str) -> int:
    segs = list_segments(data_dir)
    return segs[0].base if segs else 0


def scan_log(data_dir: str, start: int | None = None, stop: int | None = None) -> list[SegmentScan]:
    """Scans of every segment from ``start`` (default: the oldest) to the readable end.

    ``stop`` bounds the walk (a streaming end offset): entries ending after it
    are not included. A start older than the oldest segment (deleted by
    retention) moves up to the oldest segment.
    """
    segs = list_segments(data_dir)
    if not segs:
        return []
    if start is None or start < segs[0].base:
        start = segs[0].base
    hints = queue_positions(data_dir, start)
    out = []
    for i in range(segment_index(segs, start), len(segs)):
        seg = segs[i]
        if stop is not None and seg.base >= stop:
            break
        pos = max(start, seg.base)
        scan = scan_segment(seg, pos, last=i == len(segs) - 1, limit=stop, hints=hints)
        out.append(scan)
        if scan.kind in ("torn", "limit"):
            break
    return out


def readable_end(scans: list[SegmentScan], default: int) -> int:
    """The global position after the last valid entry (``default`` if none).

    When the newest scanned segment ended cleanly at a BLANK or file end and a
    newer segment exists, the end is that newer segment's base: callers walk
    from there next time.
    """
    end = default
    for scan in scans:
        if len(scan.starts):
            end = scan.stop
    return end


def split_ranges(scans: list[SegmentScan], max_bytes: int, min_parts: int = 1) -> list[LogRange]:
    """Cut each segment's entries into ranges of at most ``max_bytes`` (>= 1 entry each).

    With ``min_parts``, a scan too small to give that many ranges is cut
    finer (as evenly as whole entries allow), so that a small read still
    keeps that many tasks busy.
    """
    total = sum(int(s.stop - s.starts[0]) for s in scans if len(s.starts))
    if min_parts > 1 and total:
        max_bytes = max(1, min(max_bytes, -(-total // min_parts)))
    out: list[LogRange] = []
    for scan in scans:
        n = len(scan.starts)
        if n == 0:
            continue
        rel_end = scan.starts - scan.starts[0] + scan.sizes  # bytes up to each entry's end
        first = 0
        while first < n:
            budget = (rel_end[first] - scan.sizes[first]) + max_bytes
            last = int(np.searchsorted(rel_end, budget, side="right"))
            last = max(last, first + 1)
            out.append(_range(scan, first, last))
            first = last
    return out


def _range(scan: SegmentScan, first: int, last: int) -> LogRange:
    sizes = scan.sizes[first:last]
    return LogRange(
        path=scan.segment.path, base=scan.segment.base,
        start=int(scan.starts[first]), end=int(scan.starts[last - 1] + sizes[-1]),
        count=last - first, sizes=zlib.compress(sizes.tobytes(), 1),
    )


def plan(data_dir: str, start: int | None, stop: int | None, max_bytes: int,
         min_parts: int = 1) -> tuple[list[LogRange], int]:
    """Ranges covering [start, stop) (or to the readable end) and the end reached."""
    scans = scan_log(data_dir, start, stop)
    begin = start if start is not None else log_start(data_dir)
    return split_ranges(scans, max_bytes, min_parts), readable_end(scans, begin)


def plan_entries(data_dir: str, start: int, stop: int | None, max_entries: int, max_bytes: int,
                 min_parts: int = 1) -> tuple[list[LogRange], int]:
    """Like `plan`, for at most the first ``max_entries`` entries from ``start``.

    The walk is bounded by a byte guess that grows until it holds enough
    entries or reaches the end, so a small cap over a long backlog does not
    walk the whole backlog.
    """
    tail = tail_end(data_dir)
    guess = max(max_entries * 512, 64 << 10)
    while True:
        limit = start + guess
        if stop is not None:
            limit = min(limit, stop)
        at_end = limit >= tail or (stop is not None and limit == stop)
        scans = scan_log(data_dir, start, None if limit >= tail and stop is None else limit)
        found = sum(len(s.starts) for s in scans)
        if found >= max_entries or at_end:
            break
        guess *= 4
    kept, left = [], max_entries
    for scan in scans:
        if left <= 0:
            break
        if len(scan.starts) > left:
            scan = SegmentScan(scan.segment, scan.start, scan.starts[:left], scan.sizes[:left],
                               int(scan.starts[left - 1] + scan.sizes[left - 1]), "limit")
        left -= len(scan.starts)
        kept.append(scan)
    return split_ranges(kept, max_bytes, min_parts), readable_end(kept, start)


def tail_end(data_dir: str) -> int:
    """The readable end of the log, walking only the newest segment."""
    segs = list_segments(data_dir)
    if not segs:
        return 0
    scans = scan_log(data_dir, segs[-1].base)
    return readable_end(scans, segs[-1].base)
