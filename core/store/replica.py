"""The commit log as a replica sees it: raw bytes out of a master, raw bytes
into a slave, derived data rebuilt from them (HA, reference 8).

Rules kept:
- A slave's log is its master's byte for byte, at the same offsets.
  `read_log` never returns bytes past a segment's end or past ``write_pos``,
  so a chunk lies inside one segment and holds only written bytes (a closed
  segment's BLANK filler and the zeros after it included).
- `append_replica` writes a chunk only at the log's end.  An empty log (no
  entry yet) may instead start at any segment boundary: the master's first
  transfer starts where its own log starts.
- Entries are dispatched (consume queues, multi-dispatch units, queue-delete
  markers, index keys) only once complete, checked like recovery checks them
  (magic, lengths, position, CRC).  A partial entry at the end of a chunk
  waits for the next one.  A bad entry is cut off (the log ends where it
  starts) and reported as `ReplicaError`: the link resumes from there.
- A replica that crashes recovers like a master: a torn tail is cut, derived
  data rebuilt, and ``write_pos`` is its offset to report.
- `truncate_log` (a deposed master rejoining a group) runs on a stopped
  store: it cuts the log at an entry boundary and drops the index (derived
  data, rebuilt at start); recovery then drops consume-queue units past the
  cut.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import struct

from .checkpoint import create_abort
from .commitlog import BLANK, check_entry, fsync_dir
from .errors import ReplicaError, StoreClosedError, StoreLockedError
from .mapped_file import list_offset_files
from .message import BLANK_MAGIC, decode_message

_II = struct.Struct(">ii")


def read_log(store, offset: int, max_bytes: int) -> bytes:
    """Raw log bytes from ``offset``: at most ``max_bytes``, never past the
    segment's end or the written end.  b"" when nothing is there yet."""
    cl = store.commitlog
    with store._lock:
        if offset >= cl.write_pos:
            return b""
        seg = cl.segment_for(offset)
        if seg is None:
            raise ReplicaError(offset, f"the log holds {cl.min_offset}..{cl.write_pos} only")
        end = min(offset + max_bytes, seg.end, cl.write_pos)
        return seg.mm[offset - seg.start : end - seg.start]


def _is_empty(store) -> bool:
    cl = store.commitlog
    return (store._replica_from == cl.write_pos and len(cl.segments) <= 1
            and (not cl.segments or cl.write_pos == cl.segments[0].start))


def append_replica(store, offset: int, data: bytes) -> dict:
    """Write a master's chunk at ``offset`` and dispatch its complete entries.
    Returns the notes for dispatch listeners (call them outside the lock).
    `ReplicaError` if the chunk is not where the log ends."""
    cl = store.commitlog
    size_cfg = cl.segment_size
    notes: dict = {}
    with store._lock:
        if not store._running:
            raise StoreClosedError("store is not running")
        if offset != cl.write_pos:
            if not (_is_empty(store) and offset % size_cfg == 0):
                raise ReplicaError(offset, f"this log ends at {cl.write_pos}")
            for seg in cl.segments:  # an empty log moves to where the master's starts
                seg.delete()
            cl.segments = []
            cl.set_write_pos(offset, cl.last_store_ts)
            store._replica_from = offset
        if not data:
            return notes
        seg = cl.current
        if offset == seg.end:
            seg = cl.current = cl._next_after(seg)
        rel = offset - seg.start
        if rel + len(data) > size_cfg:
            raise ReplicaError(offset, f"a chunk of {len(data)} bytes crosses the end of segment {seg.path}")
        seg.mm[rel : rel + len(data)] = data
        cl.write_pos = offset + len(data)
        _dispatch(store, notes)
    return notes


def _dispatch(store, notes: dict) -> None:
    """Dispatch every complete entry from ``store._replica_from`` (lock held)."""
    from .recovery import dispatch_entry
    from .store import _SKIP_TX, DELETE_QUEUE_TOPIC

    cl = store.commitlog
    size_cfg = cl.segment_size
    pos, end = store._replica_from, cl.write_pos
    try:
        while end - pos >= 8:
            seg = cl.segment_for(pos)
            rel = pos - seg.start
            size, magic = _II.unpack_from(seg.mm, rel)
            if magic != BLANK_MAGIC and 0 < size and pos + size > end and rel + size <= size_cfg:
                break  # the rest of this entry comes in the next chunk
            size, reason = check_entry(seg.mm, rel, size_cfg, pos, True)
            if size == BLANK:
                pos = seg.end
                continue
            if size < 0:
                _cut_at(store, pos)
                raise ReplicaError(pos, f"invalid entry in {seg.path}: {reason}")
            m = decode_message(seg.mm[rel : rel + size])
            dispatch_entry(store, m, size, notes, DELETE_QUEUE_TOPIC, _SKIP_TX)
            cl.last_store_ts = max(cl.last_store_ts, m.store_timestamp)
            pos += size
    finally:
        store._replica_from = pos


def _cut_at(store, pos: int) -> None:
    """Forget written bytes from ``pos`` on (lock held): zeroed, ``write_pos`` back."""
    cl = store.commitlog
    seg = cl.segment_for(pos)
    seg.zero_from(pos - seg.start)
    while cl.segments[-1] is not seg:
        cl.segments.pop().delete()
    cl.current = seg
    cl.write_pos = pos
    cl.flushed = min(cl.flushed, pos)


def truncate_log(root: str, segment_size: int, offset: int) -> int:
    """Cut the stopped store at ``root`` to end at ``offset`` (an entry
    boundary); return the bytes cut.  The index is removed (rebuilt at
    start) and the run marked abnormal, so recovery re-checks the log and
    drops queue units past the cut.  `StoreLockedError` if the store is open."""
    log_dir = os.path.join(root, "commitlog")
    os.makedirs(root, exist_ok=True)
    fd = os.open(os.path.join(root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreLockedError(f"{root} is in use by another process") from None
        files = list_offset_files(log_dir) if os.path.isdir(log_dir) else []
        if not files or files[-1][0] + segment_size <= offset:
            return 0
        create_abort(root)
        cut = 0
        for start, path in reversed(files):
            if start >= offset and not (start == offset == files[0][0]):
                cut += _written_bytes(path, 0, segment_size)
                os.unlink(path)
                continue
            rel = offset - start
            if rel < segment_size:
                cut += _written_bytes(path, rel, segment_size)
                with open(path, "r+b") as f:
                    f.seek(rel)
                    remaining = segment_size - rel
                    zeros = bytes(min(remaining, 1 << 20))
                    while remaining > 0:
                        n = min(remaining, len(zeros))
                        f.write(zeros[:n])
                        remaining -= n
                    f.flush()
                    os.fsync(f.fileno())
            break
        fsync_dir(log_dir)
        shutil.rmtree(os.path.join(root, "index"), ignore_errors=True)
        return cut
    finally:
        os.close(fd)


def _written_bytes(path: str, rel: int, segment_size: int) -> int:
    """How many bytes after ``rel`` hold entries (up to the last non-zero byte)."""
    with open(path, "rb") as f:
        f.seek(rel)
        data = f.read(segment_size - rel)
    return len(data.rstrip(b"\0"))
