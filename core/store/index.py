"""Index files: message keys to commit-log offsets (reference 5.3 layout).

File layout (big-endian)::

    header  40 bytes: beginTimestamp int64, endTimestamp int64,
                      beginPhyOffset int64, endPhyOffset int64,
                      hashSlotCount int32 (slots in use), indexCount int32
    slots   maxHashSlotNum * 4: int32 number of the latest entry (0 = empty)
    entries maxIndexNum * 20: keyHash int32, phyOffset int64,
                      timeDiff int32 (s since beginTimestamp), prevIndex int32

Rules kept:
- The key is ``topic + "#" + key``; hash = abs(Java String.hashCode), 0 when
  still negative; slot = hash % slots.  indexCount starts at 1: entry 0 is
  never used, so prevIndex 0 ends a chain.
- Lookups walk a slot's chain backwards and stop at prevIndex <= 0,
  > indexCount, == self, or a time before ``begin``.
- Files are named by creation time ``yyyyMMddHHmmssSSS`` (local time); a full
  file is never written again.  ``endPhyOffset`` is the end of the last
  indexed entry, so replaying the log skips what is already indexed.
- Hash collisions are expected: callers verify each hit against the entry.
- Compiled, a run writes its entries without the GIL (the event loop runs
  meanwhile): runs, lookups and deletions of one service must not overlap
  (the store holds its index lock around each).
"""

from __future__ import annotations

import mmap
import os
import struct
import time

from .mapped_file import allocate
from .java_hash import java_string_hash, java_string_hashes, load_numpy

try:
    import cython
except ImportError:  # a pure-Python install: nothing here is compiled
    from . import _cython_shadow as cython

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = 20
_I = struct.Struct(">i")


def key_hash(text: str) -> int:
    h = abs(java_string_hash(text))
    return 0 if h > 0x7FFFFFFF else h  # Java: Math.abs(Integer.MIN_VALUE) < 0


def message_key_hash(topic: str, key: str) -> int:
    """`key_hash` of ``topic + "#" + key`` (what a message key is indexed
    under); compiled, without making that string."""
    if cython.compiled:
        h = _java_hash_units(_java_hash_units(_java_hash_units(0, topic), "#"), key)
        s = cython.cast(cython.int, h)
        return 0 if s == -0x80000000 else abs(s)
    return key_hash(f"{topic}#{key}")


def _java_hash_units(h, text):
    """``String.hashCode`` continued over ``text``'s UTF-16 code units (compiled only)."""
    ch = cython.declare(cython.Py_UCS4)
    for ch in text:
        c = cython.cast(cython.uint, ch)  # the code point, as a number
        if c > 0xFFFF:  # a surrogate pair in Java
            h = h * 31 + (0xD800 + ((c - 0x10000) >> 10))
            h = h * 31 + (0xDC00 + ((c - 0x10000) & 0x3FF))
        else:
            h = h * 31 + c
    return h


def _key_texts(rows: list[tuple]) -> list[str]:
    """The ``topic#key`` strings of `IndexService.build_run`'s rows, in its order."""
    texts = []
    for topic, uniq, keys, _phys, _size, _ts in rows:
        if keys:
            texts += [f"{topic}#{k}" for k in keys]
        if uniq:
            texts.append(f"{topic}#{uniq}")
    return texts


def key_hashes(texts: list[str]) -> list[int]:
    """`key_hash` of each text (hashed together: `java_string_hashes`)."""
    return [0 if h == -0x80000000 else abs(h) for h in java_string_hashes(texts)]


class IndexFile:
    __slots__ = ("path", "slots", "max_entries", "fd", "mm", "begin_ts", "end_ts", "begin_phys", "end_phys", "slot_count", "count")

    def __init__(self, path: str, slots: int, max_entries: int, create: bool):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = HEADER_SIZE + slots * 4 + max_entries * ENTRY_SIZE
        try:
            if create:
                allocate(self.fd, 0, size)  # a full disk fails here, not as SIGBUS in a write
                os.ftruncate(self.fd, size)
            else:
                size = os.fstat(self.fd).st_size
            self.mm = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            self.fd = -1
            if create:
                os.unlink(path)
            raise
        self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.slot_count, self.count = HEADER.unpack_from(self.mm, 0)
        if create or self.count < 1:
            self.count = 1
        self.slots = slots
        self.max_entries = (size - HEADER_SIZE - slots * 4) // ENTRY_SIZE

    @property
    def full(self) -> bool:
        return self.count >= self.max_entries

    def finish_entry(self, end_phys: int, store_ts: int) -> None:
        """Record that the log is indexed up to ``end_phys`` (written to the header)."""
        if self.begin_ts == 0:
            self.begin_ts = store_ts
            self.begin_phys = end_phys
        self.end_phys = end_phys
        self.end_ts = max(self.end_ts, store_ts)
        self.write_header()

    def write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.slot_count, self.count)

    def select(self, hash_: int, max_num: int, begin: int, end: int, out: list[int]) -> None:
        mm = self.mm
        (n,) = _I.unpack_from(mm, HEADER_SIZE + (hash_ % self.slots) * 4)
        base = HEADER_SIZE + self.slots * 4
        seen = 0
        while 0 < n < self.count and len(out) < max_num and seen < self.count:
            h, phys, diff, prev = ENTRY.unpack_from(mm, base + n * ENTRY_SIZE)
            ts = self.begin_ts + diff * 1000
            if ts < begin - 999:  # timeDiff is truncated to seconds
                break
            if h == hash_ and ts <= end:
                out.append(phys)
            if prev <= 0 or prev > self.count or prev == n:
                break
            n = prev
            seen += 1

    def sync(self) -> None:
        self.write_header()
        os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            self.write_header()
            self.mm.close()
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _load(f: IndexFile) -> tuple:
    """The fields `IndexService.build_run` keeps in locals while it writes ``f``."""
    return f.mm, f.count, f.slots, f.slot_count, f.begin_ts, f.begin_phys, f.end_ts


def _store(f: IndexFile, count: int, slot_count: int, begin_ts: int, begin_phys: int, end_ts: int) -> None:
    f.count = count
    f.slot_count = slot_count
    f.begin_ts = begin_ts
    f.begin_phys = begin_phys
    f.end_ts = end_ts


def _build_run(svc: IndexService, rows: list[tuple], hashes) -> tuple[int, OSError | None]:
    """`IndexService.build_run`; compiled, the written file's mapping is held
    (``view``) while `_build_rows` runs and let go before this returns."""
    if cython.compiled:
        pinned = False
        try:
            return _build_rows(svc, rows, hashes, cython.address(view), cython.address(pinned))
        finally:
            if pinned:
                PyBuffer_Release(cython.address(view))
    return _build_rows(svc, rows, hashes, None, None)


# Entries a compiled run writes in one pass without the GIL (`_put_entries`).
_PENDING = 256


def _build_rows(svc: IndexService, rows: list[tuple], hashes, view, pinned) -> tuple[int, OSError | None]:
    """`IndexService.build_run`'s loop; ``view`` and ``pinned`` (compiled
    only) hold the written file's mapping. Compiled, the hashes are taken
    with the GIL and kept as (hash, offset, time) in ``pending``; the
    writes into the mapping (page faults on the slot table, most of the
    run's time) are `_put_entries`, without the GIL, so the event loop is
    not held up by the flusher's thread while they run."""
    f = svc.files[-1] if svc.files else None
    n = slots = slot_count = begin_ts = begin_phys = end_ts = max_entries = 0  # set by _load before use
    if cython.compiled:
        p = cython.NULL
        m = 0
        held = bytearray(_PENDING * cython.sizeof(_Entry))
        pending = cython.cast(_Entries, cython.cast(cython.p_char, held))
    if f is not None:  # the written file's fields live in locals, stored back before it is left
        mm, n, slots, slot_count, begin_ts, begin_phys, end_ts = _load(f)
        max_entries = f.max_entries
        if cython.compiled:
            p = _pin(mm, view, pinned, slots, max_entries)
    at = 0
    pack_entry = ENTRY.pack_into
    pack_int = _I.pack_into
    unpack_int = _I.unpack_from
    for i, row in enumerate(rows):
        topic = row[0]
        uniq = row[1]
        keys = row[2]
        n_keys = len(keys)
        k = n_keys + 1 if uniq else n_keys
        phys = row[3]
        if f is not None and phys < f.end_phys:
            at += k  # already indexed (replay)
            continue
        ts = row[5]
        if cython.compiled:
            if m and n + m >= max_entries:  # what waits fills the file: written first, then it rolls
                with cython.nogil:
                    _put_entries(p, slots, pending, m, cython.address(n), cython.address(slot_count),
                                 cython.address(begin_ts), cython.address(begin_phys), cython.address(end_ts))
                m = 0
        if f is None or n >= max_entries:
            if f is not None:
                _store(f, n, slot_count, begin_ts, begin_phys, end_ts)
            try:
                f = svc._writable(ts)
            except OSError as e:
                return i, e
            mm, n, slots, slot_count, begin_ts, begin_phys, end_ts = _load(f)
            max_entries = f.max_entries
            if cython.compiled:
                p = _pin(mm, view, pinned, slots, max_entries)
        for j in range(k):
            if hashes is not None:
                h = hashes[at + j]
            else:
                h = message_key_hash(topic, keys[j] if j < n_keys else uniq)
            if cython.compiled:
                if n + m < max_entries and m < _PENDING:
                    pending[m].h = h
                    pending[m].phys = phys
                    pending[m].ts = ts
                    m += 1
                    continue
                if m:  # the file or ``pending`` is full: write what waits
                    with cython.nogil:
                        _put_entries(p, slots, pending, m, cython.address(n), cython.address(slot_count),
                                     cython.address(begin_ts), cython.address(begin_phys), cython.address(end_ts))
                    m = 0
            if n >= max_entries:
                _store(f, n, slot_count, begin_ts, begin_phys, end_ts)
                try:
                    f.finish_entry(phys, ts)
                    f = svc._writable(ts)
                except OSError as e:
                    return i, e
                mm, n, slots, slot_count, begin_ts, begin_phys, end_ts = _load(f)
                max_entries = f.max_entries
                if cython.compiled:
                    p = _pin(mm, view, pinned, slots, max_entries)
            if cython.compiled:
                pending[0].h = h
                pending[0].phys = phys
                pending[0].ts = ts
                m = 1
                continue
            slot_pos = HEADER_SIZE + (h % slots) * 4
            prev = unpack_int(mm, slot_pos)[0]
            if prev <= 0 or prev > n:
                prev = 0
                slot_count += 1
            if n <= 1 or begin_ts == 0:
                begin_ts = ts
                begin_phys = phys
            diff = (ts - begin_ts) // 1000
            if diff < 0:
                diff = 0
            pack_entry(mm, HEADER_SIZE + slots * 4 + n * ENTRY_SIZE, h, phys, diff, prev)
            pack_int(mm, 36, n + 1)  # indexCount, then the slot
            pack_int(mm, slot_pos, n)
            n += 1
            end_ts = ts
        at += k
    if cython.compiled:
        if m:
            with cython.nogil:
                _put_entries(p, slots, pending, m, cython.address(n), cython.address(slot_count),
                             cython.address(begin_ts), cython.address(begin_phys), cython.address(end_ts))
    if f is not None:
        _store(f, n, slot_count, begin_ts, begin_phys, end_ts)
    return len(rows), None


def _put_entries(p, slots, pending, m, n, slot_count, begin_ts, begin_phys, end_ts):
    """Write ``m`` entries of ``pending`` into the mapping at ``p`` (compiled
    only; runs without the GIL): the same stores, in the same order, as the
    pure loop of `_build_rows` (the entry, then indexCount, then the slot);
    the file's counters are the ones at ``n`` .. ``end_ts``."""
    for i in range(m):
        h = pending[i].h
        ts = pending[i].ts
        phys = pending[i].phys
        count = n[0]
        slot_pos = 40 + (h % slots) * 4  # HEADER_SIZE; a hash is never negative
        prev = get_int32(p + slot_pos)
        if prev <= 0 or prev > count:
            prev = 0
            slot_count[0] += 1
        if count <= 1 or begin_ts[0] == 0:
            begin_ts[0] = ts
            begin_phys[0] = phys
        diff = (ts - begin_ts[0]) // 1000 if ts > begin_ts[0] else 0  # never negative: C division is floor division
        q = p + 40 + slots * 4 + count * 20  # HEADER_SIZE, ENTRY_SIZE
        put_int32(q, h)
        put_int64(q + 4, phys)
        put_int32(q + 12, diff)
        put_int32(q + 16, prev)
        put_int32(p + 36, count + 1)
        put_int32(p + slot_pos, count)
        n[0] = count + 1
        end_ts[0] = ts


def _pin(mm, view, pinned, slots, max_entries):
    """The address of ``mm``'s bytes, held in ``view`` (compiled only; the one
    held before is let go). Checks that the mapping holds every slot and entry."""
    if pinned[0]:
        PyBuffer_Release(view)
        pinned[0] = False
    PyObject_GetBuffer(mm, view, PyBUF_WRITABLE)
    pinned[0] = True
    if view.len < HEADER_SIZE + slots * 4 + max_entries * ENTRY_SIZE:
        raise ValueError("index file mapping smaller than its geometry")
    return cython.cast(cython.p_uchar, view.buf)


def _file_name(now_ms: int) -> str:
    t = time.localtime(now_ms // 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{now_ms % 1000:03d}"


class IndexService:
    """The list of index files; the newest one is written."""

    def __init__(self, directory: str, slots: int, max_entries: int):
        self.directory = directory
        self.slots = slots
        self.max_entries = max_entries
        self.files: list[IndexFile] = []

    def load(self, abnormal: bool, checkpoint_index_ts: int) -> None:
        # numpy (for hashing keys in bulk) is imported now, at start, not by the
        # flusher at the first message: that import held the GIL for about 0.3 s
        # while the first clients were served.
        load_numpy()
        os.makedirs(self.directory, exist_ok=True)
        expected = HEADER_SIZE + self.slots * 4 + self.max_entries * ENTRY_SIZE
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if not (len(name) == 17 and name.isdigit()):
                continue
            if os.path.getsize(path) != expected:
                os.unlink(path)  # other geometry: derived data, rebuilt by replay
                continue
            f = IndexFile(path, self.slots, self.max_entries, create=False)
            if abnormal and f.end_ts > checkpoint_index_ts:
                f.delete()  # may hold entries the checkpoint does not vouch for
                continue
            self.files.append(f)

    @property
    def end_phys(self) -> int:
        """The log is indexed below this offset."""
        return self.files[-1].end_phys if self.files else 0

    @property
    def last_ts(self) -> int:
        return self.files[-1].end_ts if self.files else 0

    def new_file(self, begin_phys: int) -> IndexFile:
        """An empty file covering the log from ``begin_phys`` (a fresh or rebuilt index)."""
        f = self._writable(int(time.time() * 1000))
        f.begin_phys = f.end_phys = begin_phys
        return f

    def _writable(self, now_ms: int) -> IndexFile:
        if self.files and not self.files[-1].full:
            return self.files[-1]
        prev = self.files[-1] if self.files else None
        name = _file_name(now_ms)
        while os.path.exists(os.path.join(self.directory, name)) or (prev and name <= os.path.basename(prev.path)):
            now_ms += 1
            name = _file_name(now_ms)
        f = IndexFile(os.path.join(self.directory, name), self.slots, self.max_entries, create=True)
        if prev is not None:
            prev.write_header()
            f.begin_phys = prev.end_phys
            f.end_phys = prev.end_phys
            f.begin_ts = f.end_ts = prev.end_ts
        self.files.append(f)
        return f

    def build(self, prefix_hash_keys: list[str], phys: int, size: int, store_ts: int) -> None:
        """Index one entry under each of its ``topic#key`` strings."""
        self.build_hashed([key_hash(t) for t in prefix_hash_keys], phys, size, store_ts)

    def build_hashed(self, hashes: list[int], phys: int, size: int, store_ts: int, finish: bool = True) -> None:
        """Index one entry under each of its key hashes (`key_hash`).  ``OSError``
        if a new file cannot be made; the index end stays before this entry.
        ``finish=False`` leaves the header's end (endPhyOffset, endTimestamp)
        to the caller's `IndexFile.finish_entry` after a run of entries: until
        then a crash replays the run (duplicate entries, which lookups drop)."""
        if phys < self.end_phys:
            return  # already indexed (replay)
        _, error = self.build_run([(None, None, hashes, phys, size, store_ts)], hashes)
        if error is not None:
            raise error
        if finish:
            self.files[-1].finish_entry(phys + size, store_ts)

    def build_run(self, rows: list[tuple], hashes: list[int] | None = None) -> tuple[int, OSError | None]:
        """`build_hashed` (``finish=False``) of each row of a run, in order, in
        one loop: a row is ``(topic, uniq key, keys, phys, size, store ts)``
        and its hashes are the next ``len(keys) + (1 if uniq key)`` of
        ``hashes``; without ``hashes``, those of its keys then its uniq key
        (`message_key_hash`). Returns (rows indexed, None), or (rows indexed
        before it, the error) when a new file could not be made. The same
        entries, in the same order, as one `build_hashed` per row. Each entry
        is written, then indexCount in the header, then its slot: after a
        crash no slot points past indexCount (a chain stays whole; the rest of
        the header is written by `IndexFile.finish_entry`). Compiled, the
        hashes and the file's bytes are C arithmetic on the mapped file
        (held for the call, released before it returns)."""
        if hashes is None and not cython.compiled:
            hashes = key_hashes(_key_texts(rows))  # together: numpy when it is there
        return _build_run(self, rows, hashes)
    def query(self, text: str, max_num: int, begin: int, end: int) -> list[int]:
        h = key_hash(text)
        out: list[int] = []
        for f in reversed(self.files):
            if len(out) >= max_num:
                break
            if f.count <= 1 or f.end_ts < begin or f.begin_ts > end:
                continue
            f.select(h, max_num, begin, end, out)
        return out

    def delete_below(self, log_min: int) -> int:
        n = 0
        while len(self.files) > 1 and self.files[0].end_phys <= log_min:
            self.files.pop(0).delete()
            n += 1
        return n

    def sync(self) -> None:
        for f in self.files[-2:]:
            f.sync()

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
