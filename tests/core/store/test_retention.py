"""Retention: old segments go (never the current one), queues follow."""

import os

from core.store import GetMessageStatus as S
from core.store import Message, MessageStore, decode_message

from .conftest import small_config

HOUR_MS = 3_600_000


def age(path, hours):
    st = os.stat(path)
    os.utime(path, (st.st_atime - hours * 3600, st.st_mtime - hours * 3600))


def test_expired_segments_deleted_and_min_offsets_follow(tmp_path):
    s = MessageStore(small_config(tmp_path, file_reserved_time=72))
    s.start()
    rs = [s.append(Message(topic="T", body=b"%05d" % i + b"." * 1000, properties={"KEYS": "k%d" % i})) for i in range(300)]
    s.flush()
    segs = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(segs) == 6
    for name in segs[:3]:
        age(tmp_path / "commitlog" / name, 73)
    age(tmp_path / "commitlog" / segs[-1], 100)  # the current one: never deleted
    deleted = s.delete_expired()
    assert [os.path.basename(p) for p in deleted] == segs[:3]
    assert sorted(os.listdir(tmp_path / "commitlog")) == segs[3:]
    first_kept = next(i for i, r in enumerate(rs) if r.physical_offset >= 3 * 65536)
    assert s.min_phy_offset == 3 * 65536
    assert s.min_offset("T", 0) == first_kept
    r = s.get_messages("T", 0, 0)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_TOO_SMALL, first_kept)
    r = s.get_messages("T", 0, first_kept, 1)
    assert decode_message(r.messages[0]).body.startswith(b"%05d" % first_kept)
    assert s.read_at(rs[0].physical_offset) is None
    assert s.query_by_key("T", "k1").messages == []
    assert len(s.query_by_key("T", "k%d" % first_kept).messages) == 1
    # consume-queue files wholly below the log are gone (200 units per file)
    cq_files = sorted(os.listdir(tmp_path / "consumequeue" / "T" / "0"))
    assert int(cq_files[0]) // 20 <= first_kept < int(cq_files[0]) // 20 + 200
    s.shutdown()
    # after a restart the minimum still holds, and a full rebuild starts there
    s = MessageStore(small_config(tmp_path))
    s.start()
    assert s.min_offset("T", 0) == first_kept
    s.shutdown()
    import shutil

    shutil.rmtree(tmp_path / "consumequeue")
    s = MessageStore(small_config(tmp_path))
    s.start()
    assert (s.min_offset("T", 0), s.max_offset("T", 0)) == (first_kept, 300)
    r = s.get_messages("T", 0, first_kept, 2)
    assert r.status is S.FOUND and r.queue_offsets == [first_kept, first_kept + 1]
    s.shutdown()


def test_disk_ratio_forces_deletion(tmp_path):
    s = MessageStore(small_config(tmp_path, disk_max_used_space_ratio=0))
    s.start()
    for i in range(150):
        s.append(Message(topic="T", body=b"." * 1000))
    assert len(os.listdir(tmp_path / "commitlog")) == 3
    deleted = s.delete_expired()
    assert len(deleted) == 2
    assert len(os.listdir(tmp_path / "commitlog")) == 1
    assert s.get_messages("T", 0, s.min_offset("T", 0)).status is S.FOUND
    s.shutdown()


def test_nothing_expires_early(tmp_path):
    s = MessageStore(small_config(tmp_path))
    s.start()
    for i in range(150):
        s.append(Message(topic="T", body=b"." * 1000))
    assert s.delete_expired() == []
    s.shutdown()


def test_a_fraction_of_an_hour_is_kept(tmp_path):
    """fileReservedTime 0.25: a segment finished 16 minutes ago goes, one of 14 minutes stays."""
    s = MessageStore(small_config(tmp_path, file_reserved_time=0.25))
    s.start()
    for i in range(200):
        s.append(Message(topic="T", body=b"." * 1000))
    s.flush()
    segs = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(segs) >= 3
    age(tmp_path / "commitlog" / segs[0], 16 / 60)
    age(tmp_path / "commitlog" / segs[1], 14 / 60)
    deleted = s.delete_expired()
    assert [os.path.basename(p) for p in deleted] == segs[:1]
    s.shutdown()

