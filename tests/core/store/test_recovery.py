"""Recovery: a torn tail is cut, corruption before the tail is reported with
its file and offset, and truncated only when the config says so."""

import os

import pytest

from core.store import CorruptSegmentError, GetMessageStatus, Message, MessageStore, decode_message, encode_message

from .conftest import small_config


def fill(root, n, **kw):
    s = MessageStore(small_config(root, **kw))
    s.start()
    rs = [s.append(Message(topic="T", body=b"body-%04d" % i + b"." * 200, properties={"KEYS": "k%d" % i})) for i in range(n)]
    s.shutdown()
    return rs


def segment(root, start=0):
    return os.path.join(root, "commitlog", f"{start:020d}")


def poke(path, pos, data):
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def crash_marker(root):
    open(os.path.join(root, "abort"), "wb").close()


@pytest.mark.parametrize("abnormal", [False, True])
def test_torn_last_entry_is_truncated(tmp_path, abnormal):
    rs = fill(tmp_path, 20)
    end = rs[-1].end_offset
    # half of a 21st entry, as a crash in the middle of the copy leaves it
    torn = encode_message(Message(topic="T", body=b"x" * 300), queue_offset=20, physical_offset=end, store_timestamp=rs[-1].store_timestamp)
    poke(segment(tmp_path), end, torn[: len(torn) // 2])
    if abnormal:
        crash_marker(tmp_path)
    s = MessageStore(small_config(tmp_path))
    report = s.start()
    assert report.abnormal_exit is abnormal
    assert report.log_max_offset == end
    assert report.truncated_bytes_at == end
    assert report.corruption is None
    with open(segment(tmp_path), "rb") as f:
        f.seek(end)
        assert f.read(len(torn)) == bytes(len(torn))
    assert s.max_offset("T", 0) == 20
    r = s.append(Message(topic="T", body=b"next"))
    assert (r.physical_offset, r.queue_offset) == (end, 20)
    s.shutdown()


def test_last_entry_with_bad_crc_is_dropped_with_its_unit(tmp_path):
    rs = fill(tmp_path, 20)
    last = rs[-1]
    poke(segment(tmp_path), last.end_offset - 30, b"\xff")  # in the body
    crash_marker(tmp_path)
    s = MessageStore(small_config(tmp_path))
    report = s.start()
    assert report.log_max_offset == last.physical_offset
    assert report.cq_units_dropped == 1
    assert s.max_offset("T", 0) == 19
    assert s.get_messages("T", 0, 19).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    s.shutdown()


def test_corrupt_middle_entry_is_reported_with_file_and_offset(tmp_path):
    rs = fill(tmp_path, 20)
    bad = rs[7]
    poke(segment(tmp_path), bad.physical_offset + 100, b"\x00\x01\x02")  # body bytes: CRC mismatch
    s = MessageStore(small_config(tmp_path))
    with pytest.raises(CorruptSegmentError) as info:
        s.start()
    err = info.value
    assert err.path == segment(tmp_path)
    assert err.offset == bad.physical_offset
    assert err.file_offset == bad.physical_offset
    assert "CRC" in err.reason
    assert str(bad.physical_offset) in str(err) and err.path in str(err)
    # refused again on a second try: nothing was changed
    with pytest.raises(CorruptSegmentError):
        MessageStore(small_config(tmp_path)).start()

    s = MessageStore(small_config(tmp_path, truncate_on_corruption=True))
    report = s.start()
    assert report.corruption is not None and report.corruption.offset == bad.physical_offset
    assert report.log_max_offset == bad.physical_offset
    assert s.max_offset("T", 0) == 7
    got = s.get_messages("T", 0, 0, 100)
    assert [decode_message(m).body[:9] for m in got.messages] == [b"body-%04d" % i for i in range(7)]
    assert s.query_by_key("T", "k9").messages == []
    r = s.append(Message(topic="T", body=b"new"))
    assert (r.physical_offset, r.queue_offset) == (bad.physical_offset, 7)
    s.shutdown()
    # and the cut is final: a clean start afterwards
    s = MessageStore(small_config(tmp_path))
    assert s.start().corruption is None
    assert s.max_offset("T", 0) == 8
    s.shutdown()


def test_corrupt_header_in_an_earlier_segment(tmp_path):
    rs = fill(tmp_path, 700)  # ~3 segments of 64 KiB
    seg1 = [r for r in rs if 65536 <= r.physical_offset < 2 * 65536]
    bad = seg1[5]
    poke(segment(tmp_path, 65536), bad.physical_offset - 65536 + 4, b"\x00\x00\x00\x00")  # magic
    crash_marker(tmp_path)
    with pytest.raises(CorruptSegmentError) as info:
        MessageStore(small_config(tmp_path)).start()
    assert info.value.path == segment(tmp_path, 65536)
    assert info.value.offset == bad.physical_offset
    assert info.value.file_offset == bad.physical_offset - 65536
    assert "magic" in info.value.reason
