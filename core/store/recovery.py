"""Start-up recovery (reference 5.5): find the log's true end, then make the
derived data (consume queues, index) agree with it.

Steps, in order:
1. ``abort`` present means the last exit was abnormal.  Entry checking starts
   at the third-to-last segment after a normal exit; after an abnormal one, at
   the last segment whose first entry is older than the checkpoint (walking
   back), or at the first segment.
2. Entries are checked forward (`check_entry`: magic, lengths, position,
   CRC when checkCRCOnRecover).  At the first entry that fails, the rest of
   the log is searched for any valid entry (magic search in the segment, the
   first entry of each later segment).  None: it is a torn tail, cut there.
   Some, at or past the checkpoint's flushed offset: still the torn tail (a
   power cut keeps any subset of the pages written after the last fsync, so
   a lost page can sit before pages that reached the disk; nothing there was
   acknowledged as durable), cut there, the report naming the hole and the
   first valid-looking entry dropped.  Some, below that offset (or with no
   flushed offset known): the corruption is *before* the tail;
   `CorruptSegmentError` (file and offset) unless ``truncate_on_corruption``,
   which cuts there instead.  Cutting zeroes the rest of the segment and
   deletes later segments, so no stale entry is found by a later recovery;
   the report names the file and offset of every cut.
3. Consume queues are loaded, units pointing at or past the log end dropped,
   minimum offsets moved past retention.  Index files newer than the
   checkpoint are deleted after an abnormal exit.
4. The log is replayed from the earliest of: the end of the last entry any
   queue references, the end of what the index covers, and (abnormal exit)
   where checking began.  Replay is idempotent (`ConsumeQueue.put` skips
   present units, multi-dispatch units are only appended past a queue's last
   offset, the index skips what it covers), so replaying more than needed
   never changes a unit; a unit that differs from the log (a hole left by a
   page that never reached the disk) is rewritten.  Deleting the whole
   ``consumequeue`` directory rebuilds every queue from offset 0 (a single
   queue directory removed by hand is not noticed: replay starts at the end
   of what the other queues reference, as RocketMQ's reput does).

The ``abort`` marker is created before anything is changed, so recovery
interrupted half-way is redone as abnormal.  After an abnormal exit the
checked stretch of the log is fsynced before the store reports it flushed:
it may only be in the page cache of the run that died.
"""

from __future__ import annotations

import os
import struct

from .checkpoint import abort_exists, create_abort, remove_abort
from .commitlog import BLANK, check_entry
from .errors import CorruptSegmentError
from .message import (
    BLANK_MAGIC,
    MAGIC_V1,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_MASK,
    decode_message,
    multi_dispatch_queues,
    DISPATCH_REF_TOPIC,
    parse_dispatch_ref,
    queue_tags_code,
)
from .names import name_from_dir
from .results import RecoveryReport

_MAGIC_B = struct.pack(">i", MAGIC_V1)
_BLANK_B = struct.pack(">i", BLANK_MAGIC)


def recover(store) -> RecoveryReport:
    abnormal = abort_exists(store.root)
    if not abnormal:
        create_abort(store.root)
    try:
        return _recover(store, abnormal)
    except CorruptSegmentError:
        if not abnormal:
            remove_abort(store.root)  # refused before any change: the exit stays a normal one
        raise


def _recover(store, abnormal: bool) -> RecoveryReport:
    from .store import DELETE_QUEUE_TOPIC, _SKIP_TX

    cl = store.commitlog
    cp = store._checkpoint
    report = RecoveryReport()
    report.abnormal_exit = abnormal
    cl.load()
    segs = cl.segments

    # 1. where checking starts
    if abnormal:
        # the index replays from its own end (endPhyOffset), so the
        # index-inclusive minimum (messageIndexSafe) is not needed here
        min_ts = cp.min_ts()
        start = 0
        for i in range(len(segs) - 1, -1, -1):
            size, magic = struct.unpack_from(">ii", segs[i].mm, 0)
            if magic == MAGIC_V1:
                ts = cl_store_ts(segs[i].mm, 0)
                if ts and ts <= min_ts:
                    start = i
                    break
    else:
        start = max(0, len(segs) - 3)
    verify_from = segs[start].start if segs else 0
    report.verified_from = verify_from

    # 2. the log's end
    log_end, last_ts = _scan(store, verify_from, report)
    _cut(store, log_end, report)
    if abnormal:
        for seg in cl.segments:
            if seg.end > verify_from:
                seg.sync()
    cl.set_write_pos(log_end, last_ts)
    report.log_min_offset = cl.min_offset
    report.log_max_offset = log_end

    # 3. derived data
    _load_queues(store)
    cq_from = 0
    for cq in store._queues.values():
        report.cq_units_dropped += cq.truncate_at_phys(log_end)
        cq.correct_min_offset(cl.min_offset)
        if cq.max_offset > cq.min_offset:
            phys, size, _ = cq.unit(cq.max_offset - 1)
            cq_from = max(cq_from, phys + size)
    idx = store._index
    index_from = log_end
    if idx is not None:
        before = len(os.listdir(idx.directory)) if os.path.isdir(idx.directory) else 0
        idx.load(abnormal, cp.index_ts)
        report.index_files_dropped = before - len(idx.files)
        if not idx.files:
            idx.new_file(cl.min_offset)
        index_from = min(idx.end_phys, log_end)
    replay_from = min(cq_from, index_from, verify_from if abnormal else log_end)
    replay_from = max(replay_from, cl.min_offset)

    # 4. replay
    if replay_from < log_end:
        report.replayed_from = replay_from
        report.replayed_entries = _replay(store, replay_from, log_end, DELETE_QUEUE_TOPIC, _SKIP_TX, report)
        for cq in store._queues.values():
            cq.correct_min_offset(cl.min_offset)
    report.queues = len(store._queues)
    # Everything below the log end is durable now (checked and synced, or
    # flushed at the last shutdown): the flushed offset recovery will need.
    cp.log_flushed = report.log_max_offset
    cp.write()
    return report


def cl_store_ts(mm, rel: int) -> int:
    (sysflag,) = struct.unpack_from(">i", mm, rel + 36)
    return struct.unpack_from(">q", mm, rel + (68 if sysflag & 0x10 else 56))[0]


def _scan(store, pos: int, report: RecoveryReport) -> tuple[int, int]:
    """Check entries from ``pos``; return (end of the valid log, last store ts)."""
    cl = store.commitlog
    check_crc = store.config.check_crc_on_recover
    size_cfg = cl.segment_size
    last_ts = 0
    while True:
        seg = cl.segment_for(pos)
        if seg is None:
            return pos, last_ts
        rel = pos - seg.start
        size, reason = check_entry(seg.mm, rel, size_cfg, pos, check_crc)
        if size > 0:
            last_ts = cl_store_ts(seg.mm, rel)
            pos += size
            continue
        if size == BLANK:
            pos = seg.end
            continue
        _corruption_check(store, pos, seg, rel, reason, report)
        return pos, last_ts


def _corruption_check(store, pos, seg, rel, reason, report) -> None:
    after = find_valid_after(store.commitlog, pos)
    if after is None:
        return  # a torn (or clean) tail
    flushed = store._checkpoint.log_flushed
    if flushed is not None and pos >= flushed:
        report.torn_hole = (seg.path, pos, after)  # written after the last flush: the tail, not corruption
        return
    err = CorruptSegmentError(seg.path, pos, rel, f"{reason}; a valid entry follows at offset {after}")
    if not store.config.truncate_on_corruption:
        raise err
    report.corruption = err


def find_valid_after(cl, pos: int) -> int | None:
    """Offset of a valid entry (or end-of-segment BLANK) after ``pos``, if any."""
    seg = cl.segment_for(pos)
    size_cfg = cl.segment_size
    rel = pos - seg.start
    mm = seg.mm
    for magic in (_MAGIC_B, _BLANK_B):
        p = mm.find(magic, rel + 5)
        while p != -1:
            cand = p - 4
            size, _ = check_entry(mm, cand, size_cfg, seg.start + cand, True)
            if size > 0 or (size == BLANK and cand > rel):
                return seg.start + cand
            p = mm.find(magic, p + 1)
    for later in cl.segments:
        if later.start > seg.start and check_entry(later.mm, 0, size_cfg, later.start, True)[0] > 0:
            return later.start
    return None


def _cut(store, log_end: int, report: RecoveryReport) -> None:
    """Zero the log from ``log_end`` on and delete the segments after it."""
    cl = store.commitlog
    seg = cl.segment_for(log_end)
    while cl.segments and cl.segments[-1].start > log_end:
        gone = cl.segments.pop()
        if _nonzero_after(gone.mm, 0):  # all zeros: made ahead (warmMapedFileEnable), nothing was cut
            report.truncated_bytes_at = log_end
            report.truncated_file = report.truncated_file or gone.path
        gone.delete()
    if seg is not None:
        rel = log_end - seg.start
        if _nonzero_after(seg.mm, rel):
            seg.zero_from(rel)
            os.fsync(seg.fd)
            report.truncated_bytes_at = log_end
            report.truncated_file = seg.path
    elif cl.segments and cl.segments[-1].end == log_end:
        pass  # the log ended with a BLANK: set_write_pos rolls a new segment


def _nonzero_after(mm, rel: int) -> bool:
    """Whether any byte from ``rel`` to the end of the map is non-zero (chunked)."""
    step = 1 << 20
    zeros = bytes(step)
    n = len(mm)
    p = rel
    while p < n:
        chunk = mm[p : min(p + step, n)]
        if chunk != zeros[: len(chunk)]:
            return True
        p += step
    return False


def _load_queues(store) -> None:
    base = os.path.join(store.root, "consumequeue")
    try:
        topic_dirs = os.listdir(base)
    except FileNotFoundError:
        return
    for td in topic_dirs:
        tpath = os.path.join(base, td)
        topic = name_from_dir(td, tpath)
        if topic is None or not os.path.isdir(tpath):
            continue
        for qd in os.listdir(tpath):
            if not qd.isdigit() or not os.path.isdir(os.path.join(tpath, qd)):
                continue
            cq = store._queue(topic, int(qd))
            cq.load()
            if not cq.files:
                cq.destroy()
                del store._queues[(topic, int(qd))]


def _replay(store, pos: int, end: int, delete_topic: str, skip_tx, report) -> int:
    """Re-dispatch every entry in [pos, end) to queues and index."""
    cl = store.commitlog
    size_cfg = cl.segment_size
    check_crc = store.config.check_crc_on_recover
    n = 0
    prev_ts = 0
    while pos < end:
        seg = cl.segment_for(pos)
        rel = pos - seg.start
        size, reason = check_entry(seg.mm, rel, size_cfg, pos, check_crc)
        if size == BLANK:
            pos = seg.end
            continue
        if size < 0:
            # below the checked region: a bad entry with the checked log after it
            err = CorruptSegmentError(seg.path, pos, rel, reason)
            if not store.config.truncate_on_corruption:
                raise err
            report.corruption = err
            _cut(store, pos, report)
            cl.set_write_pos(pos, prev_ts)
            for cq in store._queues.values():
                report.cq_units_dropped += cq.truncate_at_phys(pos)
            report.log_max_offset = pos
            break
        m = decode_message(seg.mm[rel : rel + size])
        n += 1
        pos += size
        prev_ts = m.store_timestamp
        dispatch_entry(store, m, size, None, delete_topic, skip_tx)
    for cq in store._queues.values():
        store._dirty.add(cq)
    return n


def dispatch_entry(store, m, size: int, notes: dict | None, delete_topic: str, skip_tx) -> None:
    """Make consume queues, multi-dispatch units and index agree with one
    decoded entry (replay and replication share it).  Idempotent: a unit
    already there is left, a multi-dispatch unit is only appended past the
    queue's last one.  ``notes`` None = replay (index keys hashed here);
    a dict = a live replica (queues' new max offsets for listeners, index
    keys queued for the next flush like an append's)."""
    if m.topic == delete_topic:
        qid, _, name = m.body.decode("utf-8", "surrogatepass").partition("\n")
        store._drop_queue(name, int(qid))
        return
    if m.sysflag & TRANSACTION_MASK in skip_tx:
        return
    if m.topic == DISPATCH_REF_TOPIC:  # units of a long multi-dispatch list, pointing at its entry
        ref = parse_dispatch_ref(m.properties)
        if ref is not None:
            ref_phys, ref_size, ref_tags = ref
            for name in multi_dispatch_queues(m.properties):
                lcq = store._queue(name, 0)
                if ref_phys > lcq.last_phys:
                    lcq.append(ref_phys, ref_size, ref_tags)
                    if notes is not None:
                        notes[(name, 0)] = lcq.max_offset
                        store._dirty.add(lcq)
        return
    tc = queue_tags_code(m.topic, m.properties)
    cq = store._queue(m.topic, m.queue_id)
    cq.put(m.queue_offset, m.physical_offset, size, tc)
    if notes is not None:
        notes[(m.topic, m.queue_id)] = cq.max_offset
        store._dirty.add(cq)
    for name in multi_dispatch_queues(m.properties):
        lcq = store._queue(name, 0)
        if m.physical_offset > lcq.last_phys:
            lcq.append(m.physical_offset, size, tc)
            if notes is not None:
                notes[(name, 0)] = lcq.max_offset
                store._dirty.add(lcq)
    idx = store._index
    if idx is None:
        return
    keys = m.properties.get(PROPERTY_KEYS, "").split()
    uniq = m.properties.get(PROPERTY_UNIQ_KEY)
    if notes is not None:
        if keys or uniq:
            store._pending_index.append((m.topic, uniq, keys, m.physical_offset, size, m.store_timestamp))
        return
    if m.physical_offset >= idx.end_phys:
        texts = [f"{m.topic}#{k}" for k in keys]
        if uniq:
            texts.append(f"{m.topic}#{uniq}")
        if texts:
            idx.build(texts, m.physical_offset, size, m.store_timestamp)
        else:
            idx.files[-1].finish_entry(m.physical_offset + size, m.store_timestamp)
