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
  consume-queue file) answers SERVICE_NOT_AVAILABLE when the disk is full
  (``disk_full`` says which file; RocketMQ's answer to a full disk), else
  CREATE_MAPEDFILE_FAILED, with nothing written: files are made before the
  entry and its units are written, and the next put tries again.  The index is
  written at flush; if its file cannot be made the keys wait for the next
  flush and the rest of the flush goes on.
- ``abort`` is created before recovery changes any file and removed at
  shutdown before ``lock`` is released, so a run interrupted at any point
  (even inside recovery) is seen as abnormal by the next one.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import threading
import time

from . import append_many as _many
from .append_many import append_one as _append_one
from . import replica
from .checkpoint import Checkpoint, remove_abort
from .commitlog import CommitLog
from .config import FlushDiskType, StoreConfig
from .consume_queue import UNIT_SIZE, ConsumeQueue
from .errors import PutStatus, StoreClosedError, StoreLockedError
from .index import IndexService
from .encoder import EncodedMessage
from .message import (
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    Message,
)
from .names import dir_name
from .reads import StoreReads
from .results import PutResult, RecoveryReport

log = logging.getLogger(__name__)

DELETE_QUEUE_TOPIC = _many.DELETE_QUEUE_TOPIC  # reserved: append() refuses it
_SKIP_TX = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _refused(e: ValueError) -> PutStatus:
    """The status of a message its encoding refused."""
    return PutStatus.PROPERTIES_SIZE_EXCEEDED if "properties" in str(e) else PutStatus.MESSAGE_ILLEGAL


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageStore(StoreReads):
    def __init__(self, config: StoreConfig):
        config.validate()
        self.config = config
        self.root = config.store_path_root_dir
        self.commitlog = CommitLog(os.path.join(self.root, "commitlog"), config.mapped_file_size_commit_log,
                                   config.warm_maped_file_enable)
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
        self.disk_full: str | None = None  # why the last put that needed a file was refused for space
        self._replica_from = 0  # end of the last entry dispatched (a replica's log may hold a partial one after it)
        self._batch_serial = 0  # `append_many` calls so far (`append_many.plan` marks the queues of one call with it)

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
            self.disk_full = None  # (for this reason now)
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
                return _refused(e)
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
            ts = _many.store_time(cl)
        elif ts < cl.last_store_ts:
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
        if msg.__class__ is Message:  # `_encode`, inlined: the hot path
            try:
                enc = EncodedMessage(msg)
            except ValueError as e:
                return PutResult(_refused(e))
        elif msg.__class__ is EncodedMessage:
            enc = msg
        else:
            enc = self._encode(msg)
            if enc.__class__ is PutStatus:
                return PutResult(enc)
        if enc.size > self._max_entry or enc.topic == DELETE_QUEUE_TOPIC:
            return PutResult(PutStatus.MESSAGE_ILLEGAL)
        notes = None
        try:
            with self._lock:
                put = _append_one(self, enc)  # the usual message, typed (None: it is not)
                if put is None:
                    notes = {}
                    phys, qoff, ts = self._append_locked(enc, notes)
                    put = PutResult(PutStatus.PUT_OK, phys, qoff, enc.size, ts, enc.queue_id, 1, phys + enc.size, enc)
        except OSError as e:
            return self._file_failed(e)
        if self._listeners:
            self._notify(notes if notes is not None else {(enc.topic, enc.queue_id): put.queue_offset + 1})
        return put

    def append_batch(self, msgs: list[Message | EncodedMessage]) -> PutResult:
        """Store several messages under one lock; a queue gets consecutive offsets.
        All or nothing: one bad message makes the whole batch MESSAGE_ILLEGAL.
        Written by `append_many` (one store time for the batch)."""
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
        status, rows, ts = self.append_many(encs)  # each passed `_encode`: none is refused, no row is None
        if status is not PutStatus.PUT_OK:
            return PutResult(status)
        offsets = [row[0] for row in rows]
        return PutResult(PutStatus.PUT_OK, offsets[0], rows[0][1], sum([e.size for e in encs]), ts, encs[0].queue_id,
                         len(encs), offsets[-1] + encs[-1].size, encs[0], offsets)

    def append_many(self, encs: list[EncodedMessage]) -> tuple[PutStatus, list[tuple[int, int] | None], int]:
        """Store independent encoded messages (any topics and queues) under one
        lock: ``(status, rows, store timestamp)`` with one row per message,
        ``(physical offset, queue offset)``, or None for a message the store
        refuses (MESSAGE_ILLEGAL: too big, reserved topic; the others are
        stored). A file that cannot be made refuses them all, before anything
        is written. Listeners hear once per queue, with its newest offset,
        after the last message is written. The broker's batched send path:
        `append_many.plan` and `append_many.write` (one loop each, typed when compiled)."""
        if not self._running:
            return PutStatus.SERVICE_NOT_AVAILABLE, [], 0
        rows: list[tuple[int, int] | None] = []
        with self._lock:
            self._batch_serial += 1
            try:
                cqs, touched = _many.plan(self, encs, self._batch_serial)
            except OSError as e:
                return self._file_failed(e).status, [], 0
            cl = self.commitlog
            ts = _many.store_time(cl)  # one store time for the call
            try:
                _many.write(self, encs, cqs, ts, rows)
            finally:  # units written before an error are synced at the next flush too
                self._dirty.update(touched)
            # each queue's newest offset as this call left it (read under the lock)
            notes = {(cq.topic, cq.queue_id): cq.max_offset for cq in touched} if self._listeners else None
        if notes:
            self._notify(notes)
        return PutStatus.PUT_OK, rows, ts

    def _file_failed(self, e: OSError) -> PutResult:
        """A file the disk could not give: a full disk (or quota, or file size
        limit) is SERVICE_NOT_AVAILABLE with ``disk_full`` saying why, as
        RocketMQ answers when its disk is full; another error is
        CREATE_MAPEDFILE_FAILED. Either way nothing was written, and the next
        put tries again (service resumes by itself when space returns)."""
        log.error("cannot create a store file, put refused: %s", e)
        if e.errno in _DISK_FULL:
            self.disk_full = f"{e.filename or self.root}: {e.strerror}"
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        return PutResult(PutStatus.CREATE_MAPEDFILE_FAILED)

    def disk_usage_percent(self) -> int:
        """Percent of the store's file system in use (the figure RocketMQ puts in its disk-full answer)."""
        try:
            st = os.statvfs(self.root)
        except OSError:
            return -1
        total = st.f_blocks * st.f_frsize
        return 100 - (st.f_bavail * st.f_frsize * 100 // total) if total else -1

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
            cp.log_flushed = flushed
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
            # One call for the run: compiled, `build_run` hashes a pass of entries with the GIL and
            # writes it into the mapping without (`index._put_entries`), so the event loop gets the
            # GIL back every pass; pure, the interpreter's switch interval hands it back.
            done, error = idx.build_run(pending)
            if error is not None:
                log.error("cannot create an index file, %d keyed entries wait: %s", len(pending) - done, error)
                with self._lock:
                    self._pending_index[:0] = pending[done:]
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


