"""Faults found in review: a disk that refuses new files, bad inputs to the
public calls, a consume queue with a hole after a crash, and calls that
must not hang or hand out bytes that are not an entry."""

import os
import threading

import pytest

from faults import max_file_size

from core.store import (
    GetMessageStatus, Message, MessageStore, PutStatus, StoreError, decode_message, encode_message, java_string_hash,
)
from core.store.mapped_file import MappedFile

from .conftest import small_config

SEG = 64 * 1024


def fill_segment(s, topic="T"):
    """Append until the next 1000-byte message needs a new segment; return the results."""
    out = []
    while s.max_phy_offset + 1092 + 8 <= SEG:
        out.append(s.append(Message(topic=topic, body=b"a" * 1000)))
    return out


def test_segment_creation_failure_answers_a_status_and_keeps_data(tmp_path):
    s = MessageStore(small_config(tmp_path))
    s.start()
    before = fill_segment(s)
    end = s.max_phy_offset
    with max_file_size(SEG // 2):
        r = s.append(Message(topic="T", body=b"b" * 1000))
        assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
        rb = s.append_batch([Message(topic="T", body=b"c" * 1000) for _ in range(3)])
        assert rb.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert s.max_phy_offset == end  # nothing half-written
        assert s.max_offset("T", 0) == len(before)
        s.flush()
    assert sorted(os.listdir(tmp_path / "commitlog")) == ["00000000000000000000"]  # no stray file
    # the disk has room again: the store goes on where it stopped
    r = s.append(Message(topic="T", body=b"d" * 1000))
    assert r.ok and (r.physical_offset, r.queue_offset) == (SEG, len(before))
    got = s.get_messages("T", 0, 0, 1000, max_bytes=1 << 30)
    assert [decode_message(m).body[:1] for m in got.messages] == [b"a"] * len(before) + [b"d"]
    s.shutdown()
    s = MessageStore(small_config(tmp_path))
    assert s.start().log_max_offset == r.end_offset
    assert s.max_offset("T", 0) == len(before) + 1
    s.shutdown()


def test_consume_queue_file_failure_writes_no_entry(tmp_path):
    # consume-queue files of 40,000 bytes: above the limit below
    s = MessageStore(small_config(tmp_path, mapped_file_size_consume_queue=20 * 2000))
    s.start()
    ok = s.append(Message(topic="Old", body=b"x"))
    end = s.max_phy_offset
    with max_file_size(32 * 1024):
        r = s.append(Message(topic="New", body=b"y"))
        assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
        r2 = s.append(Message(topic="Old", body=b"z", properties={"INNER_MULTI_DISPATCH": "session-1"}))
        assert r2.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert s.max_phy_offset == end  # no log entry without its units
        assert s.append(Message(topic="Old", body=b"w")).ok  # existing queues still take messages
    r = s.append(Message(topic="New", body=b"y"))
    assert r.ok and r.queue_offset == 0
    s.shutdown()
    s = MessageStore(small_config(tmp_path, mapped_file_size_consume_queue=20 * 2000))
    s.start()
    assert [s.max_offset("Old", 0), s.max_offset("New", 0), s.max_offset("session-1", 0)] == [2, 1, 0]
    assert decode_message(s.get_messages("Old", 0, 0).messages[0]).physical_offset == ok.physical_offset
    s.shutdown()


def test_index_file_failure_does_not_fail_flush(tmp_path):
    # index files of 40 KB holding 2 entries each: the third key needs a new file
    cfg = small_config(tmp_path, max_hash_slot_num=10_000, max_index_num=3)
    s = MessageStore(cfg)
    s.start()
    for k in ("k1", "k2"):
        s.append(Message(topic="T", body=k.encode(), properties={"KEYS": k}))
    s.flush()
    s.append(Message(topic="T", body=b"k3", properties={"KEYS": "k3"}))
    with max_file_size(32 * 1024):
        assert s.flush() == s.max_phy_offset  # the log and queues are flushed; the index waits for room
    for k in ("k1", "k2", "k3"):
        assert [decode_message(m).body for m in s.query_by_key("T", k).messages] == [k.encode()]
    s.shutdown()


def test_bad_inputs_answer_message_illegal(make_store):
    s = make_store()
    for bad in (
        Message(topic="T", body=b"x", queue_id=-1),
        Message(topic="T", body=b"x", queue_id=2**31),
        Message(topic="T", body=b"x", flag=2**40),
        Message(topic="T", body=b"x", born_timestamp=2**70),
        Message(topic="T", body="not bytes"),
        Message(topic="", body=b"x"),
        Message(topic="T", body=b"x", properties={"A": "\ud800"}),
    ):
        assert s.append(bad).status is PutStatus.MESSAGE_ILLEGAL, bad
        assert s.append_batch([Message(topic="T", body=b"ok"), bad]).status is PutStatus.MESSAGE_ILLEGAL
    assert s.max_phy_offset == 0
    assert s.topics() == []


def test_wait_flushed_past_the_log_end_answers_false(make_store):
    s = make_store()
    r = s.append(Message(topic="T", body=b"x"))
    got = []
    t = threading.Thread(target=lambda: got.append(s.wait_flushed(r.end_offset + 1000, timeout_s=0.2)), daemon=True)
    t.start()
    t.join(10)
    assert got == [False]
    assert s.wait_flushed(r.end_offset, timeout_s=5)


def test_read_at_refuses_a_position_inside_an_entry(make_store):
    s = make_store()
    fake = encode_message(Message(topic="T", body=b"inner"), physical_offset=0)
    r = s.append(Message(topic="T", body=b"xx" + fake))
    inner = r.physical_offset + 84 + 4 + 2  # where the fake entry starts, inside the body
    assert s.read_at(inner) is None
    msg_id = decode_message(s.read_at(r.physical_offset)).msg_id
    assert s.read_by_msg_id(msg_id[:-16] + "%016X" % inner) is None
    assert s.read_at(r.physical_offset) is not None


def test_java_string_hash_of_lone_surrogates():
    # Java hashes UTF-16 code units, paired or not
    assert java_string_hash("\ud800") == 0xD800
    assert java_string_hash("a\udc00b") == (ord("a") * 31 * 31 + 0xDC00 * 31 + ord("b"))
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00


def test_replay_heals_a_hole_in_a_consume_queue(tmp_path):
    s = MessageStore(small_config(tmp_path))
    s.start()
    rs = [s.append(Message(topic="T", body=b"m%02d" % i, properties={"TAGS": "t"})) for i in range(20)]
    s.shutdown()
    # a page of the queue file that never reached the disk (power loss): unit 3 is zeros
    path = tmp_path / "consumequeue" / "T" / "0" / ("%020d" % 0)
    with open(path, "r+b") as f:
        f.seek(3 * 20)
        f.write(bytes(20))
    open(tmp_path / "abort", "wb").close()
    s = MessageStore(small_config(tmp_path))
    s.start()
    got = s.get_messages("T", 0, 0, 100)
    assert got.status is GetMessageStatus.FOUND
    assert [decode_message(m).physical_offset for m in got.messages] == [r.physical_offset for r in rs]
    s.shutdown()


def test_mapped_file_sync_after_close_is_a_no_op(tmp_path):
    # the flusher may hold a file that retention or delete_queue closes meanwhile
    f = MappedFile.create(str(tmp_path), 0, 4096)
    f.mm[0:3] = b"abc"
    f.sync()
    f.delete()
    f.sync()
    assert not os.path.exists(f.path)


def test_second_start_is_refused_and_leaks_no_lock(tmp_path):
    s = MessageStore(small_config(tmp_path))
    s.start()
    s.append(Message(topic="T", body=b"x"))
    with pytest.raises(StoreError):
        s.start()
    s.shutdown()
    assert not os.path.exists(tmp_path / "abort")
    s2 = MessageStore(small_config(tmp_path))  # the lock was released
    assert not s2.start().abnormal_exit
    assert s2.max_offset("T", 0) == 1
    s2.shutdown()


def test_append_many_reserves_the_reference_records_of_long_dispatch_lists(tmp_path):
    """A message whose multi-dispatch list needs reference records, in a batch
    where the main entries fit the segment but the records do not, and the
    next segment cannot be made: the batch answers SERVICE_NOT_AVAILABLE and
    nothing is written (the records were left out of the reservation once, and
    the OSError escaped half-way through the batch)."""
    from core.store.encoder import EncodedMessage
    from core.store.message import PROPERTY_INNER_MULTI_DISPATCH

    s = MessageStore(small_config(tmp_path))
    s.start()
    names = ",".join(f"%LMQ%session-{i:06d}" for i in range(1000))  # > 16 KiB of queue names
    big = lambda: EncodedMessage(Message("T", b"x", properties={PROPERTY_INNER_MULTI_DISPATCH: names}))
    small = lambda: EncodedMessage(Message("T", b"y" * 100))
    refs = sum(r.size for r in big().dispatch_refs)
    assert refs > 0
    assert s.append_many([big()])[0] is PutStatus.PUT_OK  # makes the session queues' files
    room = small().size + big().size + 8 + refs // 2  # both main entries fit, their records do not
    pad = SEG - room - s.max_phy_offset - EncodedMessage(Message("T", b"")).size
    assert s.append_many([EncodedMessage(Message("T", b"p" * pad))])[0] is PutStatus.PUT_OK
    end, units = s.max_phy_offset, s.max_offset("T", 0)
    with max_file_size(SEG // 2):
        status, rows, _ = s.append_many([small(), big()])
    assert status is PutStatus.SERVICE_NOT_AVAILABLE and rows == []
    assert (s.max_phy_offset, s.max_offset("T", 0)) == (end, units)
    assert s.max_offset("%LMQ%session-000999", 0) == 1
    status, rows, _ = s.append_many([small(), big()])  # room again: both stored, records and all
    assert status is PutStatus.PUT_OK and all(rows)
    assert s.max_offset("%LMQ%session-000999", 0) == 2
    s.shutdown()
