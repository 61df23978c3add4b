"""`ConsumeQueue`: the 20-byte index of one (topic, queue id) into the commit log.

Rules kept:
- Unit n lives at byte n * 20 of the queue, in files of
  ``mappedFileSizeConsumeQueue`` bytes named by their starting byte offset.
  A unit is (commit log offset int64, size int32, tags code int64).
- A unit is *valid* while size > 0 and offset >= 0; the zeros of a sparse
  file end the queue.  ``max_offset`` is the next unit to write.
- Units of a queue point at increasing commit-log offsets (they are appended
  in log order), so both the end of a file and the first unit still backed by
  the log are found by binary search.
- A *blank* unit (0, 0x7FFFFFFF, 0) pads a file created in the middle of a
  queue up to its first real unit; it never counts as a message.
- ``min_offset`` is the first unit whose entry is still in the commit log;
  units below it are gone (retention), even while their file remains.
- Derived data: `put` is idempotent for replay (a unit already present is
  left alone, a missing or different one is rewritten from the log), so
  re-dispatching any stretch of the log yields the same units and heals a
  unit lost with a page that never reached the disk.
- Files are created only by `ensure_room` (or replay), before the commit-log
  entry they index is written: a file that cannot be made (full disk) fails
  the put before anything is written, so the log never holds an entry whose
  unit is missing.
- `sync` covers every file written since the previous sync, not only the tail.
"""

from __future__ import annotations

import os
import shutil
import struct

from .mapped_file import MappedFile, list_offset_files
from .names import NAME_FILE, needs_name_file

UNIT = struct.Struct(">qiq")
UNIT_SIZE = 20
BLANK_UNIT_SIZE = 0x7FFFFFFF
ALLOCATION_STEP = 3276 * UNIT_SIZE  # ~64 KiB of disk blocks reserved at a time


class ConsumeQueue:
    __slots__ = ("topic", "queue_id", "directory", "file_size", "files", "max_offset", "min_offset", "last_phys", "room_end",
                 "_write_file", "_synced_pos", "batch_mark", "batch_need")

    def __init__(self, topic: str, queue_id: int, directory: str, file_size: int):
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self.max_offset = 0
        self.min_offset = 0
        self.last_phys = -1
        self.room_end = 0  # units below this byte offset have a file with disk blocks for them
        self._write_file: MappedFile | None = None  # the file holding unit max_offset
        self._synced_pos = 0  # bytes below this were durable at the last sync
        self.batch_mark = 0  # the store's `append_many` that last counted this queue (`core.store.append_many.plan`)
        self.batch_need = 0  # units that call writes here

    # ---- loading ----

    def load(self) -> None:
        for start, path in list_offset_files(self.directory):
            if start % self.file_size:
                continue  # not of this file size; ignored (config changed)
            self.files.append(MappedFile(path, start, self.file_size))
        if not self.files:
            return
        first = self.files[0]
        self.min_offset = first.start // UNIT_SIZE
        # the last file with at least one valid unit
        while len(self.files) > 1 and not self._valid_rel(self.files[-1], 0):
            self.files.pop().delete()
        tail = self.files[-1]
        lo, hi = 0, self.file_size // UNIT_SIZE  # first invalid unit in tail
        while lo < hi:
            mid = (lo + hi) // 2
            if self._valid_rel(tail, mid * UNIT_SIZE):
                lo = mid + 1
            else:
                hi = mid
        self.max_offset = tail.start // UNIT_SIZE + lo
        tail.allocated = min(tail.allocated, lo * UNIT_SIZE)  # beyond the last unit: grown before writing
        self.room_end = tail.start + tail.allocated
        self._synced_pos = tail.start  # a healing replay lowers it
        self.last_phys = self.unit(self.max_offset - 1)[0] if self.max_offset > self.min_offset else -1

    @staticmethod
    def _valid_rel(f: MappedFile, rel: int) -> bool:
        phys, size, _tags = UNIT.unpack_from(f.mm, rel)
        return size > 0 and phys >= 0

    # ---- writing ----

    def _file_for_write(self, byte_pos: int) -> MappedFile:
        start = byte_pos - byte_pos % self.file_size
        if not self.files:
            os.makedirs(self.directory, exist_ok=True)
            if needs_name_file(os.path.basename(os.path.dirname(self.directory))):
                with open(os.path.join(os.path.dirname(self.directory), NAME_FILE), "w", encoding="utf-8", errors="surrogatepass") as f:
                    f.write(self.topic)
        f = MappedFile.create(self.directory, start, self.file_size, min(self.file_size, ALLOCATION_STEP))
        if not self.files:
            self.min_offset = start // UNIT_SIZE
        self.files.append(f)
        self.room_end = f.start + f.allocated
        return f

    def ensure_room(self, n: int) -> None:
        """Create the files, and allocate the disk blocks, the next ``n`` units
        need (blocks in steps of ALLOCATION_STEP: a session queue with three
        messages costs a few KiB, not its 6 MB file).  ``OSError`` (a full
        disk) before anything is written; files made before it stay, empty."""
        end = (self.max_offset + n) * UNIT_SIZE
        while self.room_end < end or not self.files:
            last = self.files[-1] if self.files else None
            if last is not None and last.allocated < last.size:
                last.allocate_to(min(last.size, max(end - last.start, last.allocated + ALLOCATION_STEP)))
                self.room_end = last.start + last.allocated
            else:
                self._file_for_write(last.end if last is not None else self.max_offset * UNIT_SIZE)

    def _file_at(self, pos: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        i = (pos - files[0].start) // self.file_size
        if 0 <= i < len(files) and files[i].start == pos - pos % self.file_size:
            return files[i]
        return None

    def append(self, phys: int, size: int, tags: int) -> int:
        """Write the next unit; return the new max offset.  The hot path: the
        store calls `ensure_room` first, so no file is made here then."""
        off = self.max_offset
        pos = off * UNIT_SIZE
        if pos >= self.room_end:
            self.ensure_room(1)  # replay; the store's appends did it already
        f = self._write_file
        if f is None or pos >= f.start + self.file_size or pos < f.start:
            f = self._write_file = self._file_at(pos)
        UNIT.pack_into(f.mm, pos - f.start, phys, size, tags)
        self.max_offset = off + 1
        self.last_phys = phys
        return off + 1

    def put(self, offset: int, phys: int, size: int, tags: int) -> bool:
        """Replay: make the unit at ``offset`` say (phys, size, tags).  A gap
        before ``offset`` is padded with blank units.  True if written."""
        pos = offset * UNIT_SIZE
        if offset < self.max_offset:
            f = self._file_at(pos) if offset >= self.min_offset else None
            if f is None or UNIT.unpack_from(f.mm, pos - f.start) == (phys, size, tags):
                return False
            UNIT.pack_into(f.mm, pos - f.start, phys, size, tags)  # a hole or a stale unit
            self._synced_pos = min(self._synced_pos, pos)
            return True
        last = self.files[-1] if self.files else None
        if last is None or pos >= last.end:
            f = self._file_for_write(pos)
            fill = max(self.max_offset * UNIT_SIZE, f.start)
        else:
            f = self._file_at(pos)
            fill = self.max_offset * UNIT_SIZE
        if pos + UNIT_SIZE > f.start + f.allocated:
            f.allocate_to(max(pos + UNIT_SIZE - f.start, f.allocated + ALLOCATION_STEP))
            if f is self.files[-1]:
                self.room_end = f.start + f.allocated
        for p in range(fill, pos, UNIT_SIZE):
            UNIT.pack_into(f.mm, p - f.start, 0, BLANK_UNIT_SIZE, 0)
        UNIT.pack_into(f.mm, pos - f.start, phys, size, tags)
        self.max_offset = offset + 1
        self.last_phys = phys
        return True

    def truncate_at_phys(self, log_end: int) -> int:
        """Drop units pointing at or beyond ``log_end``; return how many."""
        dropped = 0
        while self.max_offset > self.min_offset:
            u = self.unit(self.max_offset - 1)
            if u is None or u[0] < log_end:
                break
            self.max_offset -= 1
            dropped += 1
        if dropped:
            pos = self.max_offset * UNIT_SIZE
            while len(self.files) > 1 and self.files[-1].start >= pos:
                self.files.pop().delete()
            if self.files:
                f = self.files[-1]
                if pos - f.start < f.size:
                    f.zero_from(pos - f.start)
                self.room_end = f.start + f.allocated
            self._write_file = None
            u = self.unit(self.max_offset - 1) if self.max_offset > self.min_offset else None
            self.last_phys = u[0] if u else -1
        return dropped

    # ---- reading ----

    def unit(self, offset: int) -> tuple[int, int, int] | None:
        if offset < 0 or offset >= self.max_offset:
            return None
        pos = offset * UNIT_SIZE
        f = self._file_at(pos)
        return None if f is None else UNIT.unpack_from(f.mm, pos - f.start)

    def units(self, offset: int, count: int) -> list[tuple[int, int, int]] | None:
        """Up to ``count`` units from ``offset``, all from the file holding
        ``offset`` (like RocketMQ's buffer of one mapped file); None if that
        file is gone."""
        files = self.files
        if not files:
            return None
        pos = offset * UNIT_SIZE
        i = (pos - files[0].start) // self.file_size
        if i < 0 or i >= len(files) or files[i].start != pos - pos % self.file_size:
            return None
        f = files[i]
        end = min(self.max_offset * UNIT_SIZE, f.end, pos + count * UNIT_SIZE)
        if end <= pos:
            return []
        return list(UNIT.iter_unpack(f.mm[pos - f.start : end - f.start]))

    def next_file_offset(self, offset: int) -> int:
        pos = offset * UNIT_SIZE
        return (pos - pos % self.file_size + self.file_size) // UNIT_SIZE

    def correct_min_offset(self, log_min: int) -> None:
        """Move ``min_offset`` to the first unit whose entry the log still holds;
        delete files whose every unit is below it (never the last file)."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            u = self.unit(mid)
            if u is None or u[0] < log_min or u[1] == BLANK_UNIT_SIZE:
                lo = mid + 1
            else:
                hi = mid
        self.min_offset = lo
        while len(self.files) > 1 and self.files[0].end <= lo * UNIT_SIZE:
            self.files.pop(0).delete()

    # ---- durability and lifetime ----

    def sync(self) -> None:
        """fdatasync every file written since the last sync (called outside the
        store lock: the file list is copied, and a file closed meanwhile by
        retention is skipped by `MappedFile.sync`)."""
        upto = self.max_offset * UNIT_SIZE
        synced = self._synced_pos
        for f in list(self.files):
            if f.end > synced:
                f.sync()
        self._synced_pos = max(synced, upto - upto % self.file_size)

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
        self._write_file = None

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        parent = os.path.dirname(self.directory)
        try:
            left = os.listdir(parent)
            if not left or left == [NAME_FILE]:
                shutil.rmtree(parent, ignore_errors=True)
        except FileNotFoundError:
            pass
        self.max_offset = self.min_offset = 0
        self.last_phys = -1
        self.room_end = 0
        self._write_file = None
        self._synced_pos = 0
