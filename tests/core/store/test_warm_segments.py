"""``warmMapedFileEnable`` (issue 17): commit-log segments written with zeros
and synced before any message goes in, the next one made ahead by a thread.

What "written" means is read from the file system itself (FIEMAP): a
segment made with the key off is fallocated, its extents *unwritten* (the
state in which a thin-provisioned device lost an acknowledged message, see
docs/RELIABILITY.md); with the key on no byte of it is a hole or unwritten.
The full disk is RLIMIT_FSIZE (`faults.max_file_size`): a real EFBIG from the
kernel, in the thread that makes segments ahead and in the put that needs one.
"""

import fcntl
import os
import struct
import time

from faults import max_file_size

from core.store import Message, MessageStore, PutStatus, decode_message

from .conftest import small_config

SEG = 64 * 1024
_FS_IOC_FIEMAP = 0xC020660B  # _IOWR('f', 11, struct fiemap)
_FIEMAP_FLAG_SYNC = 0x1
_FIEMAP_EXTENT_UNWRITTEN = 0x800
_HEAD = struct.Struct("=QQIIII")  # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count, reserved
_EXTENT = struct.Struct("=QQQQQIIII")  # logical, physical, length, reserved64[2], flags, reserved[3]


def not_written(path, start: int = 0) -> int:
    """Bytes of ``path`` from ``start`` that have no written block: holes and
    unwritten (fallocated) extents, as the file system reports them."""
    size = os.path.getsize(path)
    count = 256
    buf = bytearray(_HEAD.size + count * _EXTENT.size)
    _HEAD.pack_into(buf, 0, start, size - start, _FIEMAP_FLAG_SYNC, 0, count, 0)
    with open(path, "rb") as f:
        fcntl.ioctl(f.fileno(), _FS_IOC_FIEMAP, buf)  # OSError on a file system without FIEMAP (tmpfs)
    mapped = _HEAD.unpack_from(buf)[3]
    assert mapped < count, "more extents than the buffer holds"
    written = 0
    for i in range(mapped):
        logical, _, length, _, _, flags, *_ = _EXTENT.unpack_from(buf, _HEAD.size + i * _EXTENT.size)
        if not flags & _FIEMAP_EXTENT_UNWRITTEN:
            lo, hi = max(logical, start), min(logical + length, size)
            written += max(0, hi - lo)
    return size - start - written


def segment_path(root, start: int) -> str:
    return os.path.join(root, "commitlog", f"{start:020d}")


def wait_until(cond, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def fill_segment(s, topic="T"):
    """Append 1000-byte bodies until the next one needs a new segment."""
    seg_start = s.commitlog.current.start
    out = []
    while s.max_phy_offset - seg_start + 1092 + 8 <= SEG:
        out.append(s.append(Message(topic=topic, body=b"a" * 1000)))
        assert out[-1].ok
    return out


def test_segments_are_written_with_zeros_and_the_next_is_made_ahead(tmp_path):
    root = tmp_path / "warm"
    s = MessageStore(small_config(root, warm_maped_file_enable=True))
    s.start()
    ahead = s.commitlog.ahead
    try:
        assert not_written(segment_path(root, 0)) == 0
        wait_until(lambda: ahead.made == 1, "the next segment was never made ahead")
        assert not_written(segment_path(root, SEG)) == 0  # on disk, written, before the roll
        assert [seg.start for seg in s.commitlog.segments] == [0]  # not part of the log yet
        fill_segment(s)
        r = s.append(Message(topic="T", body=b"b" * 1000))
        assert r.ok and r.physical_offset == SEG  # rolled onto the segment made ahead...
        wait_until(lambda: ahead.made == 2, "the roll did not ask for the one after")  # ...and asked for the next
        assert not_written(segment_path(root, 2 * SEG)) == 0
    finally:
        s.shutdown()
    assert not os.path.exists(segment_path(root, 2 * SEG))  # made ahead, never used: deleted at shutdown

    # the same store with the key off: fallocated, i.e. unwritten extents (what the key avoids)
    cold = tmp_path / "cold"
    s = MessageStore(small_config(cold))
    s.start()
    s.shutdown()
    assert not_written(segment_path(cold, 0)) > 0
    # turned on later: at start the rest of the segment being written is zeroed and synced
    s = MessageStore(small_config(cold, warm_maped_file_enable=True))
    s.start()
    try:
        r = s.append(Message(topic="T", body=b"c" * 1000))
        assert not_written(segment_path(cold, 0)) == 0
        # a cut (replica or recovery: zero_from) keeps a warm segment written
        s.commitlog.current.zero_from(r.physical_offset)
        assert not_written(segment_path(cold, 0)) == 0
    finally:
        s.shutdown()


def test_a_full_disk_refuses_the_put_that_needs_a_segment_and_service_resumes(tmp_path):
    root = tmp_path / "store"
    s = MessageStore(small_config(root, warm_maped_file_enable=True))
    s.start()
    ahead = s.commitlog.ahead
    wait_until(lambda: ahead.made == 1, "the next segment was never made ahead")
    first = fill_segment(s)
    with max_file_size(SEG // 2):
        # the segment made ahead is real already: the roll takes it, the disk is not asked
        r = s.append(Message(topic="T", body=b"b" * 1000))
        assert r.ok and r.physical_offset == SEG
        wait_until(lambda: ahead.failed == 1, "the thread did not try the segment after")
        second = [r, *fill_segment(s)]
        end = s.max_phy_offset
        r = s.append(Message(topic="T", body=b"c" * 1000))
        assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "File too large" in s.disk_full, s.disk_full
        assert s.append_batch([Message(topic="T", body=b"c" * 1000)] * 3).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert s.max_phy_offset == end  # nothing half-written
        s.flush()
        assert sorted(os.listdir(root / "commitlog")) == [f"{0:020d}", f"{SEG:020d}"]  # no stray file
    r = s.append(Message(topic="T", body=b"d" * 1000))  # room again: the put makes its segment
    assert r.ok and r.physical_offset == 2 * SEG
    assert not_written(segment_path(root, 2 * SEG)) == 0
    s.shutdown()
    s = MessageStore(small_config(root, warm_maped_file_enable=True))
    report = s.start()
    try:
        assert report.log_max_offset == r.end_offset
        got = s.get_messages("T", 0, 0, 1000, max_bytes=1 << 30).messages
        assert [decode_message(m).body[:1] for m in got] == [b"a"] * len(first) + [b"b"] + [b"a"] * (len(second) - 1) + [b"d"]
    finally:
        s.shutdown()


def test_a_segment_made_ahead_and_left_by_a_crash_is_no_cut(tmp_path):
    """A crash leaves the made-ahead segment on disk: recovery deletes it and
    reports nothing cut (it held no entry)."""
    root = tmp_path / "store"
    s = MessageStore(small_config(root, warm_maped_file_enable=True))
    s.start()
    try:
        # made ahead before the roll (else the roll makes it itself, and only the one after is made ahead)
        wait_until(lambda: s.commitlog.ahead.made == 1, "the next segment was never made ahead")
        n = len(fill_segment(s)) + 1
        assert s.append(Message(topic="T", body=b"b" * 1000)).ok
        wait_until(lambda: s.commitlog.ahead.made == 2, "the roll did not ask for the one after")
        s.flush()
        crashed = tmp_path / "crashed"  # the files as a crash leaves them (abort marker included)
        os.makedirs(crashed / "commitlog")
        for name in os.listdir(root / "commitlog"):
            with open(root / "commitlog" / name, "rb") as src, open(crashed / "commitlog" / name, "wb") as dst:
                dst.write(src.read())
        for name in ("checkpoint", "abort"):
            with open(root / name, "rb") as src, open(crashed / name, "wb") as dst:
                dst.write(src.read())
        end = s.max_phy_offset
    finally:
        s.shutdown()
    assert os.path.exists(segment_path(crashed, 2 * SEG))
    s = MessageStore(small_config(crashed, warm_maped_file_enable=True))
    report = s.start()
    try:
        assert report.abnormal_exit and report.log_max_offset == end
        assert report.truncated_file is None, report
        assert s.max_offset("T", 0) == n == len(s.get_messages("T", 0, 0, 1000, max_bytes=1 << 30).messages)
    finally:
        s.shutdown()
