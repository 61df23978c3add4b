"""Segment roll with BLANK filler, and SYNC_FLUSH group commit."""

import os
import struct
import threading

from core.store import FlushDiskType, GetMessageStatus, Message, MessageStore, PutStatus, decode_message

from .conftest import small_config

SEG = 64 * 1024


def entry_size(body_len, topic="T", props_len=0):
    return 91 + body_len + len(topic) + props_len


def test_roll_writes_blank_and_names_segments(tmp_path):
    s = MessageStore(small_config(tmp_path))
    s.start()
    body_len = 1000
    size = entry_size(body_len)  # 1092
    per_seg = (SEG - 8) // size  # entries that fit with 8 bytes to spare
    results = [s.append(Message(topic="T", body=bytes([i % 256]) * body_len)) for i in range(per_seg + 1)]
    last_in_first = results[per_seg - 1]
    assert last_in_first.physical_offset + size <= SEG - 8
    rolled = results[per_seg]
    assert rolled.physical_offset == SEG
    assert rolled.queue_offset == per_seg
    names = sorted(os.listdir(tmp_path / "commitlog"))
    assert names == ["00000000000000000000", f"{SEG:020d}"]
    with open(tmp_path / "commitlog" / names[0], "rb") as f:
        data = f.read()
    blank_at = per_seg * size
    remaining = SEG - blank_at
    assert data[blank_at : blank_at + 8] == struct.pack(">i", remaining) + bytes.fromhex("CBD43194")
    # reads cross the BLANK transparently, by queue offset
    got = s.get_messages("T", 0, per_seg - 1, 2)
    assert [decode_message(m).physical_offset for m in got.messages] == [last_in_first.physical_offset, SEG]
    s.shutdown()
    # restart: recovery walks past the BLANK
    s = MessageStore(small_config(tmp_path))
    report = s.start()
    assert report.log_max_offset == SEG + size
    assert s.append(Message(topic="T", body=b"x")).physical_offset == SEG + size
    s.shutdown()


def test_exact_fit_leaves_eight_bytes(tmp_path):
    s = MessageStore(small_config(tmp_path))
    s.start()
    small = entry_size(1)  # 93
    first = s.append(Message(topic="T", body=bytes(SEG - 8 - 2 * small - entry_size(0))))  # leaves exactly 2 x 93 + 8
    assert first.physical_offset == 0
    a = s.append(Message(topic="T", body=b"x"))
    b = s.append(Message(topic="T", body=b"x"))
    assert b.physical_offset + small == SEG - 8  # fits: entry + 8 bytes == remaining
    c = s.append(Message(topic="T", body=b"x"))
    assert c.physical_offset == SEG
    with open(tmp_path / "commitlog" / "00000000000000000000", "rb") as f:
        f.seek(SEG - 8)
        assert f.read(8) == struct.pack(">i", 8) + bytes.fromhex("CBD43194")
    assert a.ok
    s.shutdown()


def test_oversized_message_is_illegal(tmp_path):
    s = MessageStore(small_config(tmp_path))
    s.start()
    r = s.append(Message(topic="T", body=bytes(SEG)))
    assert r.status is PutStatus.MESSAGE_ILLEGAL
    r = s.append(Message(topic="T", body=b"x", properties={"P": "v" * 40000}))
    assert r.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert s.get_messages("T", 0, 0).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    s.shutdown()


def test_group_commit_shares_fsyncs(tmp_path):
    s = MessageStore(small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1 << 20))
    s.start()
    threads_n, per_thread = 16, 40
    results = [[] for _ in range(threads_n)]
    start = threading.Barrier(threads_n)

    def producer(k):
        start.wait()
        for i in range(per_thread):
            r = s.put(Message(topic="T", body=b"%d-%d" % (k, i), queue_id=k % 4))
            results[k].append(r)
            # durable when acknowledged
            assert s.flushed_offset >= r.end_offset

    before = s.commitlog.sync_count
    ts = [threading.Thread(target=producer, args=(k,)) for k in range(threads_n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    syncs = s.commitlog.sync_count - before
    puts = threads_n * per_thread
    assert all(r.status is PutStatus.PUT_OK for rs in results for r in rs)
    assert 0 < syncs < puts
    # queue offsets are consecutive per queue
    for q in range(4):
        offs = sorted(r.queue_offset for rs in results for r in rs if r.queue_id == q)
        assert offs == list(range(len(offs)))
    s.shutdown()


def test_flush_slower_than_timeout_is_flush_disk_timeout(tmp_path):
    s = MessageStore(small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=0))
    s.start()
    r = s.put(Message(topic="T", body=b"x"))
    assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert r.ok  # stored, only the flush was late
    assert s.get_messages("T", 0, 0).status is GetMessageStatus.FOUND
    assert s.wait_flushed(r.end_offset, 1.0)
    s.shutdown()


def test_the_write_fault_is_taken_at_start_and_changes_no_byte(tmp_path):
    """`set_write_pos` (after recovery) takes the page fault of the next write
    itself (`MappedFile.prefault`), not the first append: the bytes before and
    at the write position read back the same, and a restart appends after them."""
    s = MessageStore(small_config(tmp_path))
    s.start()
    first = s.append(Message(topic="T", body=b"before the restart"))
    s.flush()
    s.shutdown()
    seg = os.path.join(tmp_path, "commitlog", "00000000000000000000")
    with open(seg, "rb") as f:
        before = f.read()
    s = MessageStore(small_config(tmp_path))
    s.start()
    with open(seg, "rb") as f:
        assert f.read() == before
    cl = s.commitlog
    cl.current.prefault(cl.write_pos - cl.current.start)
    cl.current.prefault(cl.current.size)  # past the end: nothing
    second = s.append(Message(topic="T", body=b"after it"))
    assert second.physical_offset == first.physical_offset + entry_size(len(b"before the restart"))
    assert [decode_message(m).body for m in s.get_messages("T", 0, 0, 10).messages] == [b"before the restart", b"after it"]
    s.shutdown()
