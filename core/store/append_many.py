"""The store's typed append paths: `MessageStore.append_many`'s two loops
(what a call needs, then the writes), and `append_one`, `MessageStore.append`'s
write of one plain message.

`plan` (before anything is written) finds each message's consume queue,
counts the units each queue gets and makes every file the call needs
(`ConsumeQueue.ensure_room`, `CommitLog.reserve`): ``OSError`` there means
nothing was written. `write` then stamps and copies each entry into the
mapped segment and writes its unit, the same bytes `MessageStore._append_locked`
writes one call per message.

Rules kept (the caller holds the store lock across both):
- A message is either *refused* (too big, the reserved topic: no row, no
  bytes), *plain* (one unit in its topic's queue) or *general* (multi-dispatch,
  dispatch references, a half or rolled-back transaction, a buffer that is not
  a bytearray): a general one goes through `_append_locked`, so the rare
  shapes have one implementation.
- Units of one queue are consecutive and in log order; the log position
  (``CommitLog.write_pos``) and ``last_store_ts`` are written back before a
  general message or a segment roll (`CommitLog.append` does those) and
  when `write` returns or raises.
- ``touched`` lists each queue the call writes to, once, in the order of
  its first unit (the order listeners hear of them); a queue's
  ``batch_mark`` says which call counted it (``batch_need``: its units).

`append_one` writes the same bytes as `write` for one plain message whose
queue unit and log entry fit in the files already made and mapped
(``ConsumeQueue.room_end`` and ``_write_file``, the current segment with 8
bytes to spare); for anything else it answers None, writing nothing, and the
store takes `_append_locked`.

Compiled (append_many.pxd), the loops read `EncodedMessage` and
`ConsumeQueue` fields as C fields and write through the mappings' buffers
(held only while `write` runs: nothing closes a mapping under the store
lock); interpreted, the same steps use struct and slice assignment.
"""

from __future__ import annotations

import struct
import time

from .consume_queue import UNIT, UNIT_SIZE, ConsumeQueue
from .errors import PutStatus
from .encoder import EncodedMessage
from .message import TRANSACTION_MASK, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE
from .results import PutResult

try:
    import cython
except ImportError:  # a pure-Python install: nothing here is compiled
    from . import _cython_shadow as cython

DELETE_QUEUE_TOPIC = "%MQGATE%DELETE_QUEUE"  # reserved: the store's delete_queue markers (store.py)

_GENERAL = object()  # `plan`'s mark of a message `write` hands to `_append_locked`
_QQ = struct.Struct(">qq")
_Q = struct.Struct(">q")
_PUT_OK = PutStatus.PUT_OK
_PUT_RESULT_FIELDS = ("status", "physical_offset", "queue_offset", "wrote_bytes", "store_timestamp", "queue_id",
                      "msg_num", "end_offset", "_host", "_offsets")

if cython.compiled:  # where `_put_ok` fills a PutResult's slots (append_many.pxd)
    _AT_STATUS = _slot_offset(PutResult, "status")
    _AT_PHYS = _slot_offset(PutResult, "physical_offset")
    _AT_QOFF = _slot_offset(PutResult, "queue_offset")
    _AT_BYTES = _slot_offset(PutResult, "wrote_bytes")
    _AT_TS = _slot_offset(PutResult, "store_timestamp")
    _AT_QID = _slot_offset(PutResult, "queue_id")
    _AT_NUM = _slot_offset(PutResult, "msg_num")
    _AT_END = _slot_offset(PutResult, "end_offset")
    _AT_HOST = _slot_offset(PutResult, "_host")
    _AT_OFFSETS = _slot_offset(PutResult, "_offsets")
    _RESULT_BY_SLOTS = (getattr(PutResult, "__slots__", None) == _PUT_RESULT_FIELDS
                        and all((_AT_STATUS, _AT_PHYS, _AT_QOFF, _AT_BYTES, _AT_TS, _AT_QID, _AT_NUM, _AT_END,
                                 _AT_HOST, _AT_OFFSETS)))


def _count(cq: ConsumeQueue, mark: int, touched: list) -> None:
    if cq.batch_mark != mark:
        cq.batch_mark = mark
        cq.batch_need = 0
        touched.append(cq)
    cq.batch_need += 1


def plan(store, encs: list, mark: int) -> tuple[list, list]:
    """(per message: its `ConsumeQueue` if plain, None if refused, `_GENERAL`;
    the queues written, in order). Makes the files the call needs first:
    ``OSError`` before anything is written."""
    queues = store._queues
    max_entry = store._max_entry
    cqs: list = []
    touched: list = []
    general = False
    total = 8  # the plain entries' bytes, and room for a BLANK
    last_topic = None
    last_qid = None
    last_cq = None
    for obj in encs:
        enc = obj  # compiled: a type check (EncodedMessage)
        size = enc.size
        topic = enc.topic
        if size > max_entry or topic == DELETE_QUEUE_TOPIC:
            cqs.append(None)
            continue
        flag = enc.sysflag
        tx = flag & TRANSACTION_MASK
        if tx == TRANSACTION_PREPARED_TYPE or tx == TRANSACTION_ROLLBACK_TYPE:  # no unit
            cqs.append(_GENERAL)
            general = True
            continue
        qid = enc.queue_id
        if topic is last_topic and qid == last_qid:
            cq = last_cq
        else:
            cq = queues.get((topic, qid))
            if cq is None:
                cq = store._queue(topic, qid)
            last_topic = topic
            last_qid = qid
            last_cq = cq
        _count(cq, mark, touched)
        multi = enc.multi_dispatch
        if multi or enc.dispatch_refs or enc.buf.__class__ is not bytearray:
            for name in multi:
                _count(queues.get((name, 0)) or store._queue(name, 0), mark, touched)
            cqs.append(_GENERAL)
            general = True
        else:
            cqs.append(cq)
            total += size
    for cq in touched:
        if (cq.max_offset + cq.batch_need) * UNIT_SIZE > cq.room_end:
            cq.ensure_room(cq.batch_need)
    cl = store.commitlog
    if general:
        sizes = []
        for obj, c in zip(encs, cqs):
            if c is not None:
                sizes.append(obj.size)
                for ref in obj.dispatch_refs:  # reference records, written right after their entry
                    sizes.append(ref.size)
        if cl.write_pos - cl.current.start + sum(sizes) + 8 > cl.segment_size:
            cl.reserve(sizes)
    elif cl.write_pos - cl.current.start + total > cl.segment_size:
        cl.reserve([obj.size for obj, c in zip(encs, cqs) if c is not None])
    return cqs, touched


def write(store, encs: list, cqs: list, ts: int, rows: list) -> None:
    """Write the messages `plan` planned, stamped with store time ``ts``;
    append a row to ``rows`` for each: (physical offset, queue offset), or None."""
    cl = store.commitlog
    seg_size = cl.segment_size
    pending = store._pending_index if store._index is not None else None
    scratch: dict = {}  # what `_append_locked` notes (``touched`` says it already)
    pos = cl.write_pos
    seg = cl.current
    start = seg.start
    held = False
    uheld = False  # compiled: ``unitview`` holds the mapping of ``ufile``, the last unit's file
    ufile = None
    ufstart = ufend = 0
    unit_size = UNIT_SIZE
    ts_obj = ts  # the Python ints of the rows and index notes: one per value, shared (compiled, ts is a C long)
    if cython.compiled:
        PyObject_GetBuffer(seg.mm, cython.address(segview), PyBUF_WRITABLE)
        held = True
        p = cython.cast(cython.p_uchar, segview.buf)
    try:
        for i in range(len(encs)):
            c = cqs[i]
            if c is None:
                rows.append(None)
                continue
            enc = encs[i]
            if c is _GENERAL or pos - start + enc.size + 8 > seg_size:  # the latter: a BLANK, the next segment
                if pos != cl.write_pos:  # the log's state, for `_append_locked` and `CommitLog.append`
                    cl.write_pos = pos
                    cl.last_store_ts = ts
                if c is _GENERAL:
                    phys, qoff, _ts = store._append_locked(enc, scratch, ts)
                    rows.append((phys, qoff))
                else:
                    cq = c
                    qoff = cq.max_offset
                    phys = cl.append(enc, qoff, ts)
                pos = cl.write_pos
                if cl.current is not seg:
                    seg = cl.current
                    start = seg.start
                    if held:
                        PyBuffer_Release(cython.address(segview))
                        held = False
                        PyObject_GetBuffer(seg.mm, cython.address(segview), PyBUF_WRITABLE)
                        held = True
                        p = cython.cast(cython.p_uchar, segview.buf)
                if c is _GENERAL:
                    continue
            else:
                cq = c
                qoff = cq.max_offset
                phys = pos
                rel = pos - start
                buf = enc.buf
                if cython.compiled:
                    b = cython.cast(cython.p_uchar, PyByteArray_AS_STRING(buf))
                    tspos = enc.store_ts_pos
                    put_int64(b + 20, qoff)  # QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP
                    put_int64(b + 28, phys)
                    put_int64(b + tspos, ts)
                    memcpy(p + rel, b, enc.size)
                else:
                    _QQ.pack_into(buf, 20, qoff, phys)
                    _Q.pack_into(buf, enc.store_ts_pos, ts)
                    seg.mm[rel : rel + enc.size] = buf
                pos = phys + enc.size
            size = enc.size
            upos = qoff * unit_size
            if upos >= cq.room_end:
                cq.ensure_room(1)  # `plan` made room: not reached
            f = cq._write_file
            if cython.compiled:
                if f is not ufile or upos < ufstart or upos >= ufend:  # another file than the last unit's
                    if f is None or upos >= f.start + cq.file_size or upos < f.start:
                        f = cq._write_file = cq._file_at(upos)
                    if uheld:
                        PyBuffer_Release(cython.address(unitview))
                        uheld = False
                    PyObject_GetBuffer(f.mm, cython.address(unitview), PyBUF_WRITABLE)
                    uheld = True
                    ufile = f
                    ufstart = f.start
                    ufend = ufstart + cq.file_size
                u = cython.cast(cython.p_uchar, unitview.buf) + (upos - ufstart)
                put_int64(u, phys)
                put_int32(u + 8, size)
                put_int64(u + 12, enc.tags_code)
            else:
                if f is None or upos >= f.start + cq.file_size or upos < f.start:
                    f = cq._write_file = cq._file_at(upos)
                UNIT.pack_into(f.mm, upos - f.start, phys, size, enc.tags_code)
            cq.max_offset = qoff + 1
            cq.last_phys = phys
            phys_obj = phys
            if pending is not None and (enc.uniq_key or enc.keys):
                pending.append((enc.topic, enc.uniq_key, enc.keys, phys_obj, enc.size, ts_obj))
            rows.append((phys_obj, qoff))
    finally:
        if pos != cl.write_pos:
            cl.write_pos = pos
            cl.last_store_ts = ts
        if held:
            PyBuffer_Release(cython.address(segview))
        if uheld:
            PyBuffer_Release(cython.address(unitview))


def _put_ok(phys: int, qoff: int, size: int, ts: int, enc: EncodedMessage) -> PutResult:
    """``PutResult(PUT_OK, phys, qoff, size, ts, enc.queue_id, 1, phys + size, enc)``. Compiled,
    allocated and its ten slots filled in C, not through ``PutResult.__init__`` (~3k instructions)."""
    if cython.compiled:
        if _RESULT_BY_SLOTS:
            r = PyType_GenericAlloc(cython.cast(cython.pointer(PyTypeObject), PutResult), 0)
            _put_slot(r, _AT_STATUS, _PUT_OK)
            _put_slot(r, _AT_PHYS, phys)
            _put_slot(r, _AT_QOFF, qoff)
            _put_slot(r, _AT_BYTES, size)
            _put_slot(r, _AT_TS, ts)
            _put_slot(r, _AT_QID, enc.queue_id)
            _put_slot(r, _AT_NUM, 1)
            _put_slot(r, _AT_END, phys + size)
            _put_slot(r, _AT_HOST, enc)
            _put_slot(r, _AT_OFFSETS, None)
            return r
    return PutResult(_PUT_OK, phys, qoff, size, ts, enc.queue_id, 1, phys + size, enc)


def store_time(cl) -> int:
    """Now, in ms, as a store timestamp: never before the log's last one (``CommitLog.last_store_ts``).
    Compiled, the clock is read in C (``time.time_ns``'s clock, without a call and a big-int division)."""
    if cython.compiled:
        clock_gettime(CLOCK_REALTIME, cython.address(now))
        ts = now.tv_sec * 1000 + now.tv_nsec // 1000000
    else:
        ts = time.time_ns() // 1_000_000
    last = cl.last_store_ts
    return ts if ts >= last else last


def append_one(store, obj: EncodedMessage) -> PutResult | None:
    """Write one message (the caller holds the store lock and has refused the
    too big and the reserved topic) stamped with `store_time`, if it is plain
    and fits where its queue's unit file and the log's segment stand: its
    `PutResult`. None, with nothing written, for anything else."""
    enc = obj  # compiled: a type check (EncodedMessage)
    tx = enc.sysflag & TRANSACTION_MASK
    if (tx == TRANSACTION_PREPARED_TYPE or tx == TRANSACTION_ROLLBACK_TYPE or enc.multi_dispatch
            or enc.dispatch_refs or enc.buf.__class__ is not bytearray):
        return None
    queues = store._queues
    cq = queues.get((enc.topic, enc.queue_id))
    if cq is None:
        return None
    qoff = cq.max_offset
    upos = qoff * UNIT_SIZE
    f = cq._write_file
    if upos >= cq.room_end or f is None:
        return None
    fstart = f.start
    if upos < fstart or upos >= fstart + cq.file_size:
        return None
    cl = store.commitlog
    seg = cl.current
    size = enc.size
    phys = cl.write_pos
    rel = phys - seg.start
    if rel + size + 8 > cl.segment_size:  # a BLANK and the next segment: `CommitLog.append`
        return None
    ts = store_time(cl)
    buf = enc.buf
    if cython.compiled:
        b = cython.cast(cython.p_uchar, PyByteArray_AS_STRING(buf))
        put_int64(b + 20, qoff)  # QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP
        put_int64(b + 28, phys)
        tspos = enc.store_ts_pos
        put_int64(b + tspos, ts)
        PyObject_GetBuffer(seg.mm, cython.address(view), PyBUF_WRITABLE)
        memcpy(cython.cast(cython.p_uchar, view.buf) + rel, b, size)
        PyBuffer_Release(cython.address(view))
        PyObject_GetBuffer(f.mm, cython.address(view), PyBUF_WRITABLE)
        u = cython.cast(cython.p_uchar, view.buf) + (upos - fstart)
        put_int64(u, phys)
        put_int32(u + 8, size)
        put_int64(u + 12, enc.tags_code)
        PyBuffer_Release(cython.address(view))
    else:
        _QQ.pack_into(buf, 20, qoff, phys)
        _Q.pack_into(buf, enc.store_ts_pos, ts)
        seg.mm[rel : rel + size] = buf
        UNIT.pack_into(f.mm, upos - fstart, phys, size, enc.tags_code)
    cl.write_pos = phys + size
    cl.last_store_ts = ts
    cq.max_offset = qoff + 1
    cq.last_phys = phys
    dirty = store._dirty
    dirty.add(cq)
    if (enc.uniq_key or enc.keys) and store._index is not None:
        store._pending_index.append((enc.topic, enc.uniq_key, enc.keys, phys, size, ts))
    return _put_ok(phys, qoff, size, ts, enc)
