"""`CommitLog`: the segmented, append-only message log and its group commit.

Rules kept:
- Segments are contiguous: segment i starts at ``first.start + i * size`` and
  is named by that offset.  Only the last one is written to.
- An entry is written only where it fits with 8 bytes to spare; otherwise a
  BLANK filler ``[remaining][BLANK_MAGIC]`` closes the segment and the entry
  goes to the start of the next (reference 4.3).  So every segment has room
  for a BLANK and readers never see an entry cross a file boundary.
- ``write_pos`` only moves after the entry's bytes are in the map: a reader
  (or the flusher) that sees ``write_pos`` sees complete entries before it.
- ``flushed`` only moves after ``fdatasync`` of every segment below it.
  `wait_flushed` is leader/follower group commit: the first waiter to find
  no flush running syncs everything written so far (its own entry and all
  that arrived meanwhile) while the others park; one ``fdatasync`` serves
  them all.
- A new segment is created (blocks allocated) *before* the BLANK closes the
  current one, so a full disk fails the append with ``OSError`` and nothing
  written; `reserve` creates every segment a batch will need up front, so a
  batch is written whole or not at all.  Segments made by `reserve` sit after
  the current one (``current``) until the writes reach them.
- The caller serialises writers with ``lock`` (a ``threading.Lock``);
  flushing takes it only to snapshot positions, never across a sync.
- With ``warm`` (``warmMapedFileEnable``) every segment a message goes into
  was written with zeros and synced first: new ones are made warm (the one
  after the last is made ahead by `NextSegment`, off the store lock, so a roll does not
  wait for a segment of writes), and at start the rest of the segment being
  written is zeroed and synced (it may come from a run without the key).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import zlib
from _thread import allocate_lock as _allocate_lock

from .errors import StoreConfigError
from .mapped_file import MappedFile, list_offset_files, write_zeros
from .encoder import EncodedMessage
from .message import BLANK_MAGIC, MAGIC_V1, BORNHOST_V6_FLAG, STOREHOST_V6_FLAG
from .next_segment import NextSegment

log = logging.getLogger(__name__)

_II = struct.Struct(">ii")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_H = struct.Struct(">h")
_MIN_ENTRY = 91  # entry_length of an empty message with IPv4 hosts, minus topic bytes (>= 1)

BLANK = 0  # check_entry: a BLANK filler, the segment ends here


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_entry(mm, rel: int, seg_size: int, phys: int, check_crc: bool) -> tuple[int, str]:
    """Validate the entry at ``rel``: (size, "") if good, (BLANK, "") for a
    filler, (-1, reason) otherwise.  Checks magic, size against the field
    lengths (``calMsgLength``), the PHYSICALOFFSET field against where it
    sits (so stale bytes from another position never pass), and the CRC."""
    if rel + 8 > seg_size:
        return -1, "no room for an entry header"
    size, magic = _II.unpack_from(mm, rel)
    if magic == BLANK_MAGIC:
        return (BLANK, "") if size == seg_size - rel else (-1, f"BLANK of {size} bytes does not end the segment")
    if magic != MAGIC_V1:
        return -1, ("end of data" if size == 0 and magic == 0 else f"bad magic 0x{magic & 0xFFFFFFFF:08X}")
    if size < _MIN_ENTRY or rel + size > seg_size:
        return -1, f"entry size {size} out of range"
    (phys_field,) = _Q.unpack_from(mm, rel + 28)
    if phys_field != phys:
        return -1, f"PHYSICALOFFSET field {phys_field} is not the entry's position {phys}"
    (sysflag,) = _I.unpack_from(mm, rel + 36)
    p = rel + 68 + (20 if sysflag & BORNHOST_V6_FLAG else 8) + (20 if sysflag & STOREHOST_V6_FLAG else 8)
    end = rel + size
    (body_len,) = _I.unpack_from(mm, p)
    body = p + 4
    p = body + body_len
    if body_len < 0 or p + 3 > end:
        return -1, f"body length {body_len} does not fit the entry"
    topic_len = mm[p]
    p += 1 + topic_len
    if p + 2 > end:
        return -1, "topic length does not fit the entry"
    (props_len,) = _H.unpack_from(mm, p)
    if props_len < 0 or p + 2 + props_len != end:
        return -1, f"total size {size} disagrees with the field lengths"
    if check_crc:
        (crc,) = _I.unpack_from(mm, rel + 8)
        if zlib.crc32(mm[body : body + body_len]) & 0x7FFFFFFF != crc:
            return -1, "body CRC mismatch"
    return size, ""


class CommitLog:
    def __init__(self, directory: str, segment_size: int, warm: bool = False):
        self.directory = directory
        self.segment_size = segment_size
        self.warm = warm
        self.ahead = NextSegment(self._make) if warm else None
        self.lock = threading.Lock()
        self.segments: list[MappedFile] = []
        self.current: MappedFile | None = None  # the segment holding write_pos
        self.write_pos = 0
        self.last_store_ts = 0  # store timestamp of the entry just before write_pos
        self.flushed = 0
        self.flushed_store_ts = 0
        self._flush_mutex = threading.Lock()
        self._flushing = False
        self._waiters: list[list] = []
        self.sync_count = 0  # number of flush rounds that synced something (tests, bench)

    # ---- files ----

    def load(self) -> None:
        """Map the existing segments; the write position is set by recovery."""
        os.makedirs(self.directory, exist_ok=True)
        files = list_offset_files(self.directory)
        prev_end = None
        for start, path in files:
            st = os.stat(path).st_size
            if start % self.segment_size or (prev_end is not None and start != prev_end):
                raise StoreConfigError(f"{path}: segment name does not follow mappedFileSizeCommitLog={self.segment_size}")
            if st not in (self.segment_size, 0):
                raise StoreConfigError(f"{path} is {st} bytes but mappedFileSizeCommitLog is {self.segment_size}")
            self.segments.append(MappedFile(path, start, self.segment_size, warm=self.warm))
            prev_end = start + self.segment_size

    def close(self) -> None:
        if self.ahead is not None:
            self.ahead.close()  # deletes a segment made ahead and not used
            self.ahead = NextSegment(self._make)
        for seg in self.segments:
            seg.close()
        self.segments = []
        self.current = None

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else self.write_pos

    def segment_for(self, phys: int) -> MappedFile | None:
        segs = self.segments
        if not segs:
            return None
        i = (phys - segs[0].start) // self.segment_size
        if 0 <= i < len(segs):
            return segs[i]
        return None

    def _make(self, start: int) -> MappedFile:
        seg = MappedFile.create(self.directory, start, self.segment_size, warm=self.warm)
        fsync_dir(self.directory)
        seg.prefault(0)  # made ahead (warm), the first append into it does not pay the fault
        return seg

    def _roll(self, start: int) -> MappedFile:
        ahead = self.ahead
        seg = ahead.take(start) if ahead is not None else None
        if seg is None:
            seg = self._make(start)
        self.segments.append(seg)
        if ahead is not None:
            ahead.request(seg.end)
        return seg

    def _next_after(self, seg: MappedFile) -> MappedFile:
        """The segment after ``seg``: one `reserve` made, or a new one (``OSError``)."""
        segs = self.segments
        if segs[-1] is not seg:
            return segs[segs.index(seg) + 1]
        return self._roll(seg.end)

    def set_write_pos(self, pos: int, last_store_ts: int) -> None:
        """After recovery: writing resumes at ``pos`` (everything before is durable or re-checked)."""
        if not self.segments:
            self._roll(pos - pos % self.segment_size)
        elif pos >= self.segments[-1].end:
            self._roll(self.segments[-1].end)
        elif self.warm:
            self._warm_tail(self.segment_for(pos), pos)
        self.current = self.segment_for(pos)
        self.current.prefault(pos - self.current.start)  # at start, not in the first append
        self.write_pos = pos
        self.last_store_ts = last_store_ts
        self.flushed = pos
        self.flushed_store_ts = last_store_ts

    def _warm_tail(self, seg: MappedFile, pos: int) -> None:
        """Zeros written and synced from ``pos`` (the log's end, zeros past it) to the segment's end."""
        try:
            write_zeros(seg.fd, pos - seg.start, seg.size)
            os.fdatasync(seg.fd)
        except OSError as e:
            log.warning("%s: the rest of the segment could not be written with zeros (warmMapedFileEnable): %s",
                        seg.path, e)
        if self.ahead is not None:
            self.ahead.request(self.segments[-1].end)

    # ---- writing (caller holds self.lock) ----

    def reserve(self, sizes) -> None:
        """Create the segments that entries of ``sizes``, appended in order, need.
        ``OSError`` if one cannot be made; nothing is written either way."""
        seg = self.current
        pos = self.write_pos
        limit = self.segment_size - 8
        for size in sizes:
            if pos - seg.start + size > limit:
                seg = self._next_after(seg)
                pos = seg.start
            pos += size

    def append(self, enc: EncodedMessage, queue_offset: int, store_ts: int) -> int:
        """Write ``enc`` stamped with its offsets; return its physical offset.
        ``OSError`` before anything is written if a needed segment cannot be made."""
        size = enc.size
        pos = self.write_pos
        seg = self.current
        rel = pos - seg.start
        if rel + size + 8 > self.segment_size:
            nxt = self._next_after(seg)
            _II.pack_into(seg.mm, rel, self.segment_size - rel, BLANK_MAGIC)
            seg = self.current = nxt
            pos = seg.start
            rel = 0
        buf = enc.buf  # stamped in place (EncodedMessage.stamp, inlined: the hot path)
        _QQ.pack_into(buf, 20, queue_offset, pos)
        _Q.pack_into(buf, enc.store_ts_pos, store_ts)
        seg.mm[rel : rel + size] = buf
        self.write_pos = pos + size
        self.last_store_ts = store_ts
        return pos

    # ---- reading ----

    def read(self, phys: int, size: int) -> bytes | None:
        seg = self.segment_for(phys)
        if seg is None or phys + size > self.write_pos:
            return None
        rel = phys - seg.start
        return seg.mm[rel : rel + size]

    def read_entry(self, phys: int) -> bytes | None:
        """The entry starting at ``phys``, or None if there is none there."""
        seg = self.segment_for(phys)
        if seg is None or phys + 8 > self.write_pos:
            return None
        rel = phys - seg.start
        size, magic = _II.unpack_from(seg.mm, rel)
        if magic != MAGIC_V1 or size < _MIN_ENTRY or phys + size > self.write_pos:
            return None
        if _Q.unpack_from(seg.mm, rel + 28)[0] != phys:
            return None  # not an entry start (e.g. entry-like bytes inside a body)
        return seg.mm[rel : rel + size]

    def store_ts_at(self, phys: int) -> int:
        seg = self.segment_for(phys)
        if seg is None:
            return -1
        rel = phys - seg.start
        (sysflag,) = _I.unpack_from(seg.mm, rel + 36)
        return _Q.unpack_from(seg.mm, rel + (68 if sysflag & BORNHOST_V6_FLAG else 56))[0]

    # ---- flushing ----

    def _sync_written(self) -> None:
        """fdatasync every segment holding bytes between ``flushed`` and now."""
        with self.lock:
            target = self.write_pos
            ts = self.last_store_ts
            segs = [s for s in self.segments if s.end > self.flushed and s.start < target]
        if target <= self.flushed:
            return
        for seg in segs:
            seg.sync()
        self.sync_count += 1
        with self._flush_mutex:
            if target > self.flushed:
                self.flushed = target
                self.flushed_store_ts = ts

    def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        """Block until everything below ``offset`` is on disk.  Thread-safe;
        concurrent callers share one sync.  False if it took longer than
        ``timeout_s`` (the entry may still become durable: FLUSH_DISK_TIMEOUT).

        Leader/follower without a shared condition: each follower parks on
        its own lock, so waking N followers costs N lock releases and no
        re-acquisition of a common lock (no convoy).  A leader that finds
        followers its sync did not cover hands leadership to the first.
        """
        if self.flushed >= offset:
            return True
        if offset > self.write_pos:
            return False  # nothing was written there: it will never be flushed
        deadline = time.monotonic() + timeout_s
        mutex = self._flush_mutex
        with mutex:
            if self.flushed >= offset:
                return True
            if self._flushing:
                waiter = [offset, _allocate_lock(), False]  # offset, parking lock, "you lead next"
                waiter[1].acquire()
                self._waiters.append(waiter)
            else:
                self._flushing = True
                waiter = None
        if waiter is not None:
            if not waiter[1].acquire(timeout=max(deadline - time.monotonic(), 0)):
                with mutex:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                        return False
                waiter[1].acquire()  # released meanwhile: take the hand-off
            if not waiter[2]:
                return time.monotonic() <= deadline
        # leader: sync until our own offset is covered, then hand over
        while True:
            try:
                self._sync_written()
            except BaseException:
                self._hand_over()
                raise
            if self.flushed >= offset:
                self._hand_over()
                return time.monotonic() <= deadline
            if offset > self.write_pos:  # the log was cut below it meanwhile
                self._hand_over()
                return False

    def _hand_over(self) -> None:
        """Release followers the last sync covered; make the first other one lead."""
        with self._flush_mutex:
            flushed = self.flushed
            keep = []
            for w in self._waiters:
                if w[0] <= flushed:
                    w[1].release()
                else:
                    keep.append(w)
            if keep:
                nxt = keep.pop(0)
                nxt[2] = True
                nxt[1].release()
            else:
                self._flushing = False
            self._waiters = keep

    def flush(self) -> int:
        """Sync everything written so far (joining a running group commit); return ``flushed``."""
        self.wait_flushed(self.write_pos, 1e9)
        return self.flushed

    # ---- retention ----

    def delete_head_segments(self, should_delete, max_files: int = 10) -> list[MappedFile]:
        """Take leading segments off the list while ``should_delete(seg)``, never
        the current one; return them, still open.  The caller deletes them
        (`MappedFile.delete`) after releasing ``lock``: unlinking a large file
        can take long, and no reader can reach a segment once it is off the list."""
        taken = []
        with self.lock:
            while self.segments and self.segments[0] is not self.current and len(taken) < max_files and should_delete(self.segments[0]):
                taken.append(self.segments.pop(0))
        return taken
