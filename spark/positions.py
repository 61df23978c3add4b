"""Where a read starts and ends: boundary checks, seeks by time, data loss.

Rules kept here:
- A commit-log position a user gives is accepted only at an entry boundary:
  a segment start, the start of an entry reached by walking its segment
  from the start, or the end of a segment's entries (a BLANK filler, or the
  readable end of the log, where the next entry will be written). Anything
  else is refused at once with the nearest boundaries, since a walk from the
  middle of an entry would find nothing (or garbage) there.
- A seek by time returns the first entry whose store timestamp is at or
  after the time, assuming store times grow along the log as RocketMQ's
  lookup by time does: the segment by the store time of its first entry,
  then the first such entry of that segment, in log order.
- A position below the oldest segment was deleted by retention: that is
  data loss (`plan.DataLossError`), never corruption. How many messages were
  skipped is counted from the consume-queue units that still point into the
  deleted range (topic queues only; their files outlive the segments).
- Per-queue positions (Kafka-style JSON) become row bounds on (topic,
  queue id, queue offset), added to the scan's `RowFilter`.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from . import plan
from .decode import RowFilter
from .entries import MIN_ENTRY_SIZE, locate
from .options import Position

log = logging.getLogger("spark.commitlog")


def _walk(data_dir: str, segs: list[plan.Segment], i: int) -> plan.SegmentScan:
    seg = segs[i]
    return plan.scan_segment(seg, seg.base, last=i == len(segs) - 1,
                             hints=plan.queue_positions(data_dir, seg.base))


def check_boundary(data_dir: str, pos: int, name: str) -> None:
    """`ValueError` unless ``pos`` is an entry boundary (or deleted: the caller's data-loss case)."""
    segs = plan.list_segments(data_dir)
    if not segs:
        if pos != 0:
            raise ValueError(f"commitlog: {name} {pos} is past the end of the log (0)")
        return
    if pos <= segs[0].base:
        return
    i = plan.segment_index(segs, pos)
    if pos == segs[i].base:
        return
    scan = _walk(data_dir, segs, i)
    if pos == scan.stop or np.any(scan.starts == pos):
        return
    if pos > scan.stop and i == len(segs) - 1:
        raise ValueError(f"commitlog: {name} {pos} is past the end of the log ({scan.stop})")
    marks = np.append(scan.starts, scan.stop)
    k = int(np.searchsorted(marks, pos))
    near = [int(marks[j]) for j in (k - 1, k) if 0 <= j < len(marks)]
    raise ValueError(f"commitlog: {name} {pos} is not the start of an entry; the nearest are "
                     f"{' and '.join(map(str, near))}")


def _first_store_ms(seg: plan.Segment) -> int | None:
    """Store time of a segment's first entry, None if it has no valid one yet."""
    with open(seg.path, "rb") as f:
        head = f.read(4)
        if len(head) < 4:
            return None
        size = int.from_bytes(head, "big", signed=True)
        if size < MIN_ENTRY_SIZE or size > seg.file_size:
            return None
        data = head + f.read(size - 4)
    fields = locate(np.frombuffer(data, dtype=np.uint8), np.zeros(1, dtype=np.int64), seg.base)
    return int(fields.store_ms[0]) if fields.valid[0] else None


def seek_time(data_dir: str, ms: int) -> int:
    """Position of the first entry stored at or after ``ms`` (the readable end if none)."""
    segs = plan.list_segments(data_dir)
    if not segs:
        return 0
    firsts = [_first_store_ms(s) for s in segs]
    i = 0
    for j, first in enumerate(firsts):
        if first is not None and first < ms:
            i = j
    if firsts[i] is None or firsts[i] >= ms:
        return segs[i].base
    scan = _walk(data_dir, segs, i)
    if len(scan.starts):
        arr = np.memmap(segs[i].path, dtype=np.uint8, mode="r")
        store = locate(arr, scan.starts - segs[i].base, segs[i].base).store_ms
        hit = np.flatnonzero(store >= ms)
        del arr
        if len(hit):
            return int(scan.starts[hit[0]])
    return segs[i + 1].base if i + 1 < len(segs) else scan.stop


def resolve(data_dir: str, p: Position, name: str) -> int | None:
    """The position ``p`` names, checked; None for the log end at each read (``latest`` ending, per-queue)."""
    if p.kind == "earliest":
        return plan.log_start(data_dir)
    if p.kind == "latest":
        return plan.tail_end(data_dir) if name == "startingOffsets" else None
    if p.kind == "pos":
        check_boundary(data_dir, p.value, name)
        return p.value
    if p.kind == "timestamp":
        return seek_time(data_dir, p.value)
    return plan.log_start(data_dir) if name == "startingOffsets" else None  # per-queue: row bounds


def row_bounds(rows: RowFilter, starting: Position, ending: Position) -> RowFilter:
    """``rows`` with the per-queue bounds of Kafka-style JSON positions (-2 and -1: no bound)."""
    lower = [(topic, qid, off) for topic, qid, off in starting.queues if off >= 0]
    upper = [(topic, qid, off) for topic, qid, off in ending.queues if off >= 0]
    if not lower and not upper:
        return rows
    return dataclasses.replace(rows, queue_from=tuple(lower), queue_until=tuple(upper))


def skipped_messages(data_dir: str, lo: int, hi: int) -> int:
    """Messages of topic queues stored in [lo, hi) per the consume queues (after retention: a lower bound)."""
    pos = plan.queue_positions(data_dir, lo)
    return int(np.searchsorted(pos, hi))


def data_loss(data_dir: str, pos: int, fail: bool, what: str) -> tuple[int, int]:
    """``pos`` lies below the oldest segment: raise, or log the skip; (the oldest position, messages skipped)."""
    oldest = plan.log_start(data_dir)
    n = skipped_messages(data_dir, pos, oldest)
    if fail:
        raise plan.DataLossError(data_dir, pos, oldest, n)
    log.warning("commitlog: %s: positions %d..%d were deleted by retention; skipped %d messages "
                "(failOnDataLoss=false)", what, pos, oldest, n)
    return oldest, n
