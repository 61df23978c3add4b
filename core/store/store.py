"""`MessageStore`: the facade over commit log, consume queues, index and checkpoint.

Rules kept:
- One lock (``CommitLog.lock``) orders every write: queue offset assignment,
  the log write, the consume-queue units (the topic's queue and each
  ``INNER_MULTI_DISPATCH`` queue) happen together, so units of one queue are
  in log order and queue offsets are consecutive.  Reads take the same lock
  (they are short), so retention never unmaps a file under a reader.
- Encoding happens before the lock; the locked part is a stamp, a copy into
  the map and one 20-byte unit per queue.  Index keys are only queued under
  the lock; hashing them happens in `flush` (or before a key query).
- Dispatch listeners run after the lock is released, on the appending
  thread, in append order per thread; they may call back into the store.
- Store timestamps never go backwards (a clock step back reuses the last one),
  which `offset_by_time`'s binary search relies on.
- Consume queues and index files are derived data: deleting them and
  starting again rebuilds them from the log (see `recovery`).
- ``delete_queue`` writes a marker entry (topic `DELETE_QUEUE_TOPIC`) to the
  log before dropping the files, so replaying the log drops the queue at the
  same point and recreates exactly the units that existed.
- A put that needs a file the disk cannot give (commit-log segment or
  consume-queue file) answers CREATE_MAPEDFILE_FAILED with nothing written:
  files are made before the entry and its units are written.  The index is
  written at flush; if its file cannot be made the keys wait for the next
  flush and the rest of the flush goes on.
- ``abort`` is created before recovery changes any file and removed at
  shutdown before ``lock`` is released, so a run interrupted at any point
  (even inside recovery) is seen as abnormal by the next one.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import time

from . import replica
from .checkpoint import Checkpoint, remove_abort
from .commitlog import CommitLog
from .config import FlushDiskType, StoreConfig
from .consume_queue import BLANK_UNIT_SIZE, UNIT_SIZE, ConsumeQueue
from .errors import GetMessageStatus, PutStatus, StoreClosedError, StoreLockedError
from .index import IndexService, key_hashes
from .message import (
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    EncodedMessage,
    Message,
    decode_message,
    parse_offset_msg_id,
)
from .names import dir_name
from .results import GetResult, PutResult, QueryResult, RecoveryReport

log = logging.getLogger(__name__)

DELETE_QUEUE_TOPIC = "%MQGATE%DELETE_QUEUE"  # reserved: append() refuses it
_SKIP_TX = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageStore:
    def __init__(self, config: StoreConfig):
        config.validate()
        self.config = config
        self.root = config.store_path_root_dir
        self.commitlog = CommitLog(os.path.join(self.root, "commitlog"), config.mapped_file_size_commit_log)
        self._lock = self.commitlog.lock
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._dirty: set[ConsumeQueue] = set()
        self._index = IndexService(os.path.join(self.root, "index"), config.max_hash_slot_num, config.max_index_num) if config.message_index_enable else None
        self._pending_index: list[tuple] = []
        self._index_lock = threading.Lock()
        self._aux_flush_lock = threading.Lock()
        self._listeners: list = []
        self._checkpoint: Checkpoint | None = None
        self._lock_fd = -1
        self._running = False
        self._max_entry = min(config.max_message_size, config.mapped_file_size_commit_log - 8)
        self._sync = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._sync_timeout_s = config.sync_flush_timeout / 1000
        self.report: RecoveryReport | None = None
        self._replica_from = 0  # end of the last entry dispatched (a replica's log may hold a partial one after it)

    # ---------------------------------------------------------------- lifetime

    def start(self) -> RecoveryReport:
        """Lock the directory, recover (reference 5.5), mark the run as live."""
        from .recovery import recover

        if self._running or self._lock_fd >= 0:
            raise StoreLockedError(f"{self.root}: this store is already started")
        os.makedirs(self.root, exist_ok=True)
        self._lock_fd = os.open(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise StoreLockedError(f"{self.root} is in use by another process") from None
        try:
            self._checkpoint = Checkpoint(os.path.join(self.root, "checkpoint"))
            self.report = recover(self)
        except BaseException:
            self._close_files()
            raise
        self._replica_from = self.commitlog.write_pos
        self._running = True
        return self.report

    def shutdown(self) -> None:
        """Flush everything, write the checkpoint, remove the abort marker."""
        if not self._running:
            return
        with self._lock:
            self._running = False  # appends from now on answer SERVICE_NOT_AVAILABLE
        self._flush_all()
        with self._lock:
            remove_abort(self.root)  # while the lock file is still held
            self._close_files()

    def _close_files(self) -> None:
        self.commitlog.close()
        for cq in self._queues.values():
            cq.close()
        self._queues.clear()
        if self._index is not None:
            self._index.close()
        if self._checkpoint is not None:
            self._checkpoint.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    def add_dispatch_listener(self, cb) -> None:
        """``cb(topic, queue_id, next_queue_offset)`` after each consume-queue
        append (multi-dispatch queues included; once per queue per
        `append_many`), outside the store lock."""
        self._listeners.append(cb)

    def remove_dispatch_listener(self, cb) -> None:
        self._listeners.remove(cb)

    # ---------------------------------------------------------------- writing

    def _encode(self, msg: Message | EncodedMessage) -> EncodedMessage | PutStatus:
        if isinstance(msg, EncodedMessage):
            enc = msg
        else:
            try:
                enc = EncodedMessage(msg)
            except ValueError as e:
                return PutStatus.PROPERTIES_SIZE_EXCEEDED if "properties" in str(e) else PutStatus.MESSAGE_ILLEGAL
        if enc.size > self._max_entry or enc.topic == DELETE_QUEUE_TOPIC:
            return PutStatus.MESSAGE_ILLEGAL
        return enc

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            directory = os.path.join(self.root, "consumequeue", dir_name(topic), str(queue_id))
            cq = self._queues[(topic, queue_id)] = ConsumeQueue(topic, queue_id, directory, self.config.mapped_file_size_consume_queue)
        return cq

    def _append_locked(self, enc: EncodedMessage, notes: dict, ts: int = 0) -> tuple[int, int, int]:
        """Write one entry and its units; return (phys, queue offset, store ts).
        ``notes`` gets each queue's new max offset (what listeners hear).
        ``OSError`` (a file the disk cannot give) only before anything is
        written: queue files first, then the log (which rolls before writing).
        ``ts`` 0 = now. The hot path: kept flat on purpose (each call costs ~0.1 us)."""
        cl = self.commitlog
        if not ts:
            ts = time.time_ns() // 1_000_000
        if ts < cl.last_store_ts:
            ts = cl.last_store_ts
        size = enc.size
        if enc.sysflag & TRANSACTION_MASK in _SKIP_TX:
            return cl.append(enc, 0, ts), 0, ts
        topic = enc.topic
        qid = enc.queue_id
        cq = self._queues.get((topic, qid)) or self._queue(topic, qid)
        qoff = cq.max_offset
        if qoff * UNIT_SIZE >= cq.room_end:
            cq.ensure_room(1)
        multi = enc.multi_dispatch
        if multi:
            lcqs = [self._queues.get((name, 0)) or self._queue(name, 0) for name in multi]
            for lcq in lcqs:
                if lcq.max_offset * UNIT_SIZE >= lcq.room_end:
                    lcq.ensure_room(1)
            refs = enc.dispatch_refs
            if refs:  # the entry and its reference records: room for all, or OSError before writing
                cl.reserve([size, *(r.size for r in refs)])
        phys = cl.append(enc, qoff, ts)
        tags = enc.tags_code
        notes[(topic, qid)] = cq.append(phys, size, tags)
        dirty = self._dirty
        dirty.add(cq)
        if multi:
            for name, lcq in zip(multi, lcqs):
                notes[(name, 0)] = lcq.append(phys, size, tags)
                dirty.add(lcq)
            for ref in enc.dispatch_refs:  # the names that did not fit, durable for replay
                ref.point_at(phys)
                cl.append(ref, 0, ts)
        if (enc.uniq_key or enc.keys) and self._index is not None:
            self._pending_index.append((topic, enc.uniq_key, enc.keys, phys, size, ts))
        return phys, qoff, ts

    def read_log(self, offset: int, max_bytes: int) -> bytes:
        """A master's side of replication: raw log bytes from ``offset``, at
        most ``max_bytes``, inside one segment (see `core.store.replica`)."""
        return replica.read_log(self, offset, max_bytes)

    def append_replica(self, offset: int, data: bytes) -> int:
        """A slave's side: write the master's bytes at ``offset`` (the log's
        end), dispatch the complete entries; return the new log end.
        `ReplicaError` when they cannot be taken (see `core.store.replica`)."""
        notes = replica.append_replica(self, offset, data)
        if notes and self._listeners:
            self._notify(notes)
        return self.commitlog.write_pos

    @property
    def dispatched_offset(self) -> int:
        """End of the last complete entry (a replica may have a partial one after it)."""
        return self._replica_from

    def _notify(self, notes: dict) -> None:
        for cb in self._listeners:
            for (topic, qid), nxt in notes.items():
                cb(topic, qid, nxt)

    def append(self, msg: Message | EncodedMessage) -> PutResult:
        """Store one message (no fsync).  Never raises for a bad message."""
        if not self._running:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        if msg.__class__ is EncodedMessage and msg.size <= self._max_entry and msg.topic != DELETE_QUEUE_TOPIC:
            enc = msg
        else:
            enc = self._encode(msg)
            if enc.__class__ is PutStatus:
                return PutResult(enc)
        notes: dict = {}
        try:
            with self._lock:
                phys, qoff, ts = self._append_locked(enc, notes)
        except OSError as e:
            return self._file_failed(e)
        if self._listeners:
            self._notify(notes)
        return PutResult(PutStatus.PUT_OK, phys, qoff, enc.size, ts, enc.queue_id, 1, phys + enc.size, enc)

    def append_batch(self, msgs: list[Message | EncodedMessage]) -> PutResult:
        """Store several messages under one lock; a queue gets consecutive offsets.
        All or nothing: one bad message makes the whole batch MESSAGE_ILLEGAL."""
        if not self._running:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        encs = []
        for m in msgs:
            enc = self._encode(m)
            if enc.__class__ is PutStatus:
                return PutResult(enc)
            encs.append(enc)
        if not encs:
            return PutResult(PutStatus.MESSAGE_ILLEGAL)
        notes: dict = {}
        offsets = []
        total = 0
        with self._lock:
            try:
                self._reserve(encs)
            except OSError as e:
                return self._file_failed(e)
            first_q = -1
            for enc in encs:
                phys, qoff, ts = self._append_locked(enc, notes)
                if first_q < 0:
                    first_q = qoff
                offsets.append(phys)
                total += enc.size
        if self._listeners:
            self._notify(notes)
        last = encs[-1]
        return PutResult(PutStatus.PUT_OK, offsets[0], first_q, total, ts, encs[0].queue_id, len(encs), offsets[-1] + last.size,
                         encs[0], offsets)

    def append_many(self, encs: list[EncodedMessage]) -> tuple[PutStatus, list[tuple[int, int] | None], int]:
        """Store independent encoded messages (any topics and queues) under one
        lock: ``(status, rows, store timestamp)`` with one row per message,
        ``(physical offset, queue offset)``, or None for a message the store
        refuses (MESSAGE_ILLEGAL: too big, reserved topic; the others are
        stored). A file that cannot be made refuses them all, before anything
        is written. Listeners hear once per queue, with its newest offset,
        after the last message is written. The broker's batched send path."""
        if not self._running:
            return PutStatus.SERVICE_NOT_AVAILABLE, [], 0
        max_entry = self._max_entry
        notes: dict = {}  # (topic, queue id) -> newest max offset
        rows: list[tuple[int, int] | None] = []
        row = rows.append
        append_locked = self._append_locked
        with self._lock:
            try:
                self._reserve(encs)
            except OSError as e:
                return self._file_failed(e).status, [], 0
            ts = time.time_ns() // 1_000_000  # one store time for the call (never before the last one)
            for enc in encs:
                if enc.size > max_entry or enc.topic == DELETE_QUEUE_TOPIC:
                    row(None)
                    continue
                phys, qoff, ts = append_locked(enc, notes, ts)
                row((phys, qoff))
        if self._listeners:
            self._notify(notes)
        return PutStatus.PUT_OK, rows, ts

    def _reserve(self, encs: list[EncodedMessage]) -> None:
        """Create every file a batch needs (caller holds the lock); ``OSError``
        before anything is written, so a batch is stored whole or not at all.
        Entries the store refuses (too big, reserved topic) need nothing.
        Usually every file is there already: the first loop only checks that."""
        queues = self._queues
        n_all = len(encs)
        cl = self.commitlog
        max_entry = self._max_entry
        total = 8
        for enc in encs:  # fast check: room for the whole batch in each queue and the segment
            cq = queues.get((enc.topic, enc.queue_id))
            if cq is None or enc.multi_dispatch or enc.size > max_entry or (cq.max_offset + n_all) * UNIT_SIZE > cq.room_end:
                break
            total += enc.size
        else:
            if cl.write_pos - cl.current.start + total <= cl.segment_size:
                return
        encs = [enc for enc in encs if enc.size <= max_entry and enc.topic != DELETE_QUEUE_TOPIC]  # what is written
        need: dict[tuple[str, int], int] = {}
        get = need.get
        for enc in encs:
            if enc.sysflag & TRANSACTION_MASK in _SKIP_TX:
                continue
            key = (enc.topic, enc.queue_id)
            need[key] = get(key, 0) + 1
            for name in enc.multi_dispatch:
                need[(name, 0)] = get((name, 0), 0) + 1
        for key, n in need.items():
            cq = queues.get(key) or self._queue(*key)
            if (cq.max_offset + n) * UNIT_SIZE > cq.room_end:
                cq.ensure_room(n)
        sizes = []
        for enc in encs:  # with the reference records of long multi-dispatch lists, written right after their entry
            sizes.append(enc.size)
            for ref in enc.dispatch_refs:
                sizes.append(ref.size)
        if cl.write_pos - cl.current.start + sum(sizes) + 8 > cl.segment_size:
            cl.reserve(sizes)

    def _file_failed(self, e: OSError) -> PutResult:
        log.error("cannot create a store file, put refused: %s", e)
        return PutResult(PutStatus.CREATE_MAPEDFILE_FAILED)

    def put(self, msg: Message | EncodedMessage | list) -> PutResult:
        """Append (a list: as a batch), then wait for the group commit when
        SYNC_FLUSH.  Blocking: for threads and scripts; trio code calls
        `append` and runs `wait_flushed` in a worker thread."""
        r = self.append_batch(msg) if isinstance(msg, list) else self.append(msg)
        if self._sync and r.status is PutStatus.PUT_OK and not self.commitlog.wait_flushed(r.end_offset, self._sync_timeout_s):
            r.status = PutStatus.FLUSH_DISK_TIMEOUT
        return r

    def wait_flushed(self, offset: int, timeout_s: float | None = None) -> bool:
        """Block until the log is durable below ``offset`` (a PutResult's
        ``end_offset``); thread-safe, concurrent waiters share one fsync.
        False after ``timeout_s`` (default syncFlushTimeout): FLUSH_DISK_TIMEOUT."""
        return self.commitlog.wait_flushed(offset, self._sync_timeout_s if timeout_s is None else timeout_s)

    def flush(self) -> int:
        """Sync the log (joining a running group commit), then the consume
        queues and index, then write the checkpoint.  Blocking; returns the
        flushed log offset."""
        if not self._running:
            raise StoreClosedError("store is not running")
        return self._flush_all()

    def flush_log(self) -> int:
        """Sync the commit log alone (joining a running group commit): what a
        SYNC_FLUSH ack needs.  Blocking; returns the flushed log offset."""
        if not self._running:
            raise StoreClosedError("store is not running")
        return self.commitlog.flush()

    def _flush_all(self) -> int:
        cl = self.commitlog
        flushed = cl.flush()
        with self._aux_flush_lock:
            physic_ts = cl.flushed_store_ts
            with self._lock:
                dirty, self._dirty = self._dirty, set()
                logics_ts = cl.last_store_ts
            for cq in dirty:
                cq.sync()
            index_ts = self._drain_index(sync=True)
            cp = self._checkpoint
            cp.physic_ts = max(cp.physic_ts, physic_ts)
            cp.logics_ts = max(cp.logics_ts, min(logics_ts, physic_ts) if physic_ts else logics_ts)
            if index_ts:
                cp.index_ts = max(cp.index_ts, index_ts)
            cp.write()
        return flushed

    def _drain_index(self, sync: bool = False) -> int:
        """Hash and write the queued index keys; return the index timestamp.
        A new index file the disk cannot give leaves the rest of the keys
        queued for the next call (logged), and the index end where it was."""
        idx = self._index
        if idx is None:
            return 0
        with self._index_lock:
            with self._lock:
                pending, self._pending_index = self._pending_index, []
                end_pos = self.commitlog.write_pos
                end_ts = self.commitlog.last_store_ts
            texts = []
            for topic, uniq, keys, _phys, _size, _ts in pending:
                if keys:
                    texts += [f"{topic}#{k}" for k in keys]
                if uniq:
                    texts.append(f"{topic}#{uniq}")
            hashes = key_hashes(texts)  # all at once: vectorised when numpy is there
            at = 0
            build = idx.build_hashed
            for i, (_topic, uniq, keys, phys, size, ts) in enumerate(pending):
                n = len(keys) + 1 if uniq else len(keys)
                try:
                    build(hashes[at : at + n], phys, size, ts, False)
                except OSError as e:
                    log.error("cannot create an index file, %d keyed entries wait: %s", len(pending) - i, e)
                    with self._lock:
                        self._pending_index[:0] = pending[i:]
                    break
                at += n
            else:
                idx.files[-1].finish_entry(end_pos, end_ts)
            if sync:
                idx.sync()
            return idx.last_ts

    def delete_queue(self, topic: str, queue_id: int) -> None:
        """Drop a queue's files (an ended session).  A marker entry in the log
        makes replay drop it at the same point."""
        if not self._running:
            raise StoreClosedError("store is not running")
        body = f"{queue_id}\n{topic}".encode("utf-8", "surrogatepass")
        enc = EncodedMessage(Message(topic=DELETE_QUEUE_TOPIC, body=body))
        with self._lock:
            cl = self.commitlog
            cl.append(enc, 0, max(_now_ms(), cl.last_store_ts))
            self._drop_queue(topic, queue_id)

    def _drop_queue(self, topic: str, queue_id: int) -> None:
        cq = self._queues.pop((topic, queue_id), None) or ConsumeQueue(
            topic, queue_id, os.path.join(self.root, "consumequeue", dir_name(topic), str(queue_id)), self.config.mapped_file_size_consume_queue)
        self._dirty.discard(cq)
        cq.destroy()

    # ---------------------------------------------------------------- reading

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int | None = None,
                     tag_codes: set[int] | frozenset[int] | None = None, max_bytes: int | None = None) -> GetResult:
        """Raw entries of (topic, queue_id) from ``offset`` (reference 2.5).
        ``tag_codes``: keep only units whose tags code is in the set (None = all)."""
        if max_count is None:
            max_count = self.config.max_transfer_count_on_message_in_memory
        if max_bytes is None:
            max_bytes = self.config.max_transfer_bytes_on_message_in_memory
        S = GetMessageStatus
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                return GetResult(S.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
            lo, hi = cq.min_offset, cq.max_offset
            if hi == 0:
                return GetResult(S.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
            if offset < lo:
                return GetResult(S.OFFSET_TOO_SMALL, lo, lo, hi)
            if offset == hi:
                return GetResult(S.OFFSET_OVERFLOW_ONE, offset, lo, hi)
            if offset > hi:
                return GetResult(S.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, lo, hi)
            units = cq.units(offset, max(16000 // 20, max_count))
            if units is None:
                return GetResult(S.OFFSET_FOUND_NULL, cq.next_file_offset(offset), lo, hi)
            cl = self.commitlog
            log_min = cl.min_offset
            msgs: list[bytes] = []
            qoffs: list[int] = []
            status = S.NO_MATCHED_MESSAGE
            total = 0
            scanned = 0
            for phys, size, tags in units:
                if msgs and (len(msgs) >= max_count or total + size > max_bytes):
                    break
                scanned += 1
                if phys < log_min or size == BLANK_UNIT_SIZE or size <= 0:
                    status = S.MESSAGE_WAS_REMOVING if not msgs else status
                    continue
                if tag_codes is not None and tags not in tag_codes:
                    continue
                data = cl.read(phys, size)
                if data is None:
                    status = S.MESSAGE_WAS_REMOVING if not msgs else status
                    continue
                msgs.append(data)
                qoffs.append(offset + scanned - 1)
                total += size
            if msgs:
                status = S.FOUND
            return GetResult(status, offset + scanned, lo, hi, msgs, qoffs)

    def read_units(self, topic: str, queue_id: int, offset: int, max_count: int) -> tuple[list[tuple[int, int, int]], int]:
        """The consume-queue units (commit-log offset, size, tags code) from
        ``offset``, without reading the log, and the offset after them.

        Units whose entry is gone (retention) or that are blank are left out
        but counted, so the returned offset always moves past them."""
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None or offset >= cq.max_offset:
                return [], offset
            offset = max(offset, cq.min_offset)
            units = cq.units(offset, min(max_count, cq.max_offset - offset))
            if units is None:
                return [], cq.next_file_offset(offset)
            log_min = self.commitlog.min_offset
            kept = [u for u in units if u[0] >= log_min and 0 < u[1] != BLANK_UNIT_SIZE]
            return kept, offset + len(units)

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to assign (0 for an unknown queue)."""
        cq = self._queues.get((topic, queue_id))
        return cq.max_offset if cq is not None else 0

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose store timestamp is >= ``timestamp_ms``
        (binary search); ``max_offset`` if every message is older, ``min_offset``
        if every message is newer."""
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                return 0
            lo, hi = cq.min_offset, cq.max_offset
            cl = self.commitlog
            while lo < hi:
                mid = (lo + hi) // 2
                u = cq.unit(mid)
                if u is None or u[1] == BLANK_UNIT_SIZE or cl.store_ts_at(u[0]) < timestamp_ms:
                    lo = mid + 1
                else:
                    hi = mid
            return lo

    def earliest_store_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        """Store timestamp of the first message still held (of one queue, or of
        the whole log when ``topic`` is None); -1 if there is none."""
        with self._lock:
            cl = self.commitlog
            if topic is None:
                pos = cl.min_offset
                while pos < cl.write_pos:
                    if cl.read_entry(pos) is not None:
                        return cl.store_ts_at(pos)
                    seg = cl.segment_for(pos)
                    pos = seg.end if seg else cl.write_pos
                return -1
            cq = self._queues.get((topic, queue_id))
            if cq is None or cq.max_offset <= cq.min_offset:
                return -1
            u = cq.unit(cq.min_offset)
            return cl.store_ts_at(u[0]) if u else -1

    def store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store timestamp of the message at a queue offset; -1 if none."""
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            u = cq.unit(offset) if cq is not None and offset >= cq.min_offset else None
            return self.commitlog.store_ts_at(u[0]) if u and u[1] != BLANK_UNIT_SIZE else -1

    def read_at(self, physical_offset: int) -> bytes | None:
        """The entry stored at a commit-log offset, or None."""
        with self._lock:
            if physical_offset < self.commitlog.min_offset:
                return None
            return self.commitlog.read_entry(physical_offset)

    def read_by_msg_id(self, msg_id: str) -> bytes | None:
        """The entry named by an offset message id (VIEW_MESSAGE_BY_ID)."""
        try:
            _host, phys = parse_offset_msg_id(msg_id)
        except ValueError:
            return None
        return self.read_at(phys)

    def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0, end_ts: int = 2**63 - 1) -> QueryResult:
        """Entries of ``topic`` whose UNIQ_KEY or one KEYS token is ``key`` and
        whose store time is in [begin_ts, end_ts], newest first, at most max_num."""
        idx = self._index
        if idx is None:
            return QueryResult([], 0, 0)
        self._drain_index()
        with self._index_lock:
            candidates = idx.query(f"{topic}#{key}", max_num * 4 + 16, begin_ts, end_ts)
            last_ts, last_phys = idx.last_ts, idx.end_phys
        out = []
        seen = set()
        for phys in candidates:
            if len(out) >= max_num or phys in seen:
                continue
            seen.add(phys)
            data = self.read_at(phys)
            if data is None:
                continue
            m = decode_message(data)
            if m.topic != topic or not begin_ts <= m.store_timestamp <= end_ts:
                continue
            if key in m.keys or m.properties.get("UNIQ_KEY") == key:
                out.append(data)
        return QueryResult(out, last_ts, last_phys)

    def topics(self) -> list[str]:
        with self._lock:  # appends on another thread add queues
            return sorted({t for t, _q in self._queues})

    def queue_ids(self, topic: str) -> list[int]:
        with self._lock:
            return sorted(q for t, q in self._queues if t == topic)

    @property
    def min_phy_offset(self) -> int:
        return self.commitlog.min_offset

    @property
    def max_phy_offset(self) -> int:
        """Where the next entry goes (the end of the written log)."""
        return self.commitlog.write_pos

    @property
    def flushed_offset(self) -> int:
        return self.commitlog.flushed

    # ---------------------------------------------------------------- retention

    def delete_expired(self, now_ms: int | None = None) -> list[str]:
        """Delete segments older than fileReservedTime (by file mtime), or the
        oldest ones while the disk is fuller than diskMaxUsedSpaceRatio; never
        the one being written.  Queue minimum offsets and index files follow.
        Returns the deleted segment paths."""
        if now_ms is None:
            now_ms = _now_ms()
        reserved_ms = self.config.file_reserved_time * 3_600_000
        usage = shutil.disk_usage(self.commitlog.directory)
        disk_full = usage.used * 100 > self.config.disk_max_used_space_ratio * usage.total

        def expired(seg) -> bool:
            return disk_full or os.stat(seg.path).st_mtime * 1000 + reserved_ms <= now_ms

        taken = self.commitlog.delete_head_segments(expired)
        for seg in taken:
            seg.delete()
        if taken:
            with self._lock:
                log_min = self.commitlog.min_offset
                for cq in self._queues.values():
                    cq.correct_min_offset(log_min)
            if self._index is not None:
                with self._index_lock:
                    self._index.delete_below(log_min)
        return [seg.path for seg in taken]


