"""Consume queues and index files are derived data: deleting them and starting
again recreates the same bytes, multi-dispatch units included."""

import os
import shutil

from core.store import Message, MessageStore, decode_message, dir_name

from .conftest import small_config


def snapshot(root, sub):
    """{relative path: bytes} of every file under root/sub."""
    out = {}
    base = os.path.join(root, sub)
    for d, _dirs, files in os.walk(base):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, base)] = fh.read()
    return out


def write_traffic(s, n=600):
    for i in range(n):
        sessions = [f"client/{i % 3}", "sess ü"] if i % 4 == 0 else []
        props = {"TAGS": "t%d" % (i % 3), "KEYS": "k%d alt%d" % (i, i % 10), "UNIQ_KEY": "U%05d" % i}
        if sessions:
            props["INNER_MULTI_DISPATCH"] = ",".join(sessions)
        s.append(Message(topic="Dev" if i % 2 else "Svc", body=b"%d" % i + b"-" * 100, queue_id=i % 3, properties=props))


def test_consume_queues_and_index_rebuilt_identically(tmp_path):
    cfg = small_config(tmp_path)
    s = MessageStore(cfg)
    s.start()
    write_traffic(s)
    s.shutdown()
    cq_before = snapshot(tmp_path, "consumequeue")
    assert os.path.isdir(tmp_path / "consumequeue" / dir_name("client/0") / "0")
    assert dir_name("client/0").startswith("~")
    assert len(cq_before) > 8

    s = MessageStore(cfg)
    s.start()
    maxes = {(t, q): s.max_offset(t, q) for t in s.topics() for q in s.queue_ids(t)}
    hit_before = s.query_by_key("Dev", "alt7", max_num=100).messages
    s.shutdown()
    assert maxes[("sess ü", 0)] == 150 and maxes[("client/1", 0)] == 50

    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    s = MessageStore(cfg)
    report = s.start()
    assert report.replayed_from == 0 and report.replayed_entries == 600
    assert {(t, q): s.max_offset(t, q) for t in s.topics() for q in s.queue_ids(t)} == maxes
    assert sorted(s.query_by_key("Dev", "alt7", max_num=100).messages) == sorted(hit_before)
    assert len(hit_before) == 60  # i % 10 == 7: all odd, all "Dev"
    got = s.get_messages("client/1", 0, 0, 100, max_bytes=1 << 20)
    assert [int(decode_message(m).body.split(b"-")[0]) for m in got.messages[:3]] == [4, 16, 28]
    assert got.queue_offsets[:3] == [0, 1, 2]
    s.shutdown()
    assert snapshot(tmp_path, "consumequeue") == cq_before


def test_partial_loss_of_queues_is_rebuilt_on_abnormal_exit(tmp_path):
    cfg = small_config(tmp_path)
    s = MessageStore(cfg)
    s.start()
    write_traffic(s, 300)
    s.flush()
    write_traffic(s, 300)  # not flushed: no checkpoint covers it
    s.commitlog.flush()
    before = {(t, q): s.max_offset(t, q) for t in s.topics() for q in s.queue_ids(t)}
    s._running = False
    s._close_files()  # a crash: abort marker stays
    cq_full = snapshot(tmp_path, "consumequeue")
    # lose one session queue entirely and truncate another
    shutil.rmtree(tmp_path / "consumequeue" / dir_name("sess ü"))
    s = MessageStore(cfg)
    report = s.start()
    assert report.abnormal_exit
    assert {(t, q): s.max_offset(t, q) for t in s.topics() for q in s.queue_ids(t)} == before
    s.shutdown()
    assert snapshot(tmp_path, "consumequeue") == cq_full


def test_deleted_queue_stays_deleted_after_replay(tmp_path):
    cfg = small_config(tmp_path)
    s = MessageStore(cfg)
    s.start()
    for i in range(10):
        s.append(Message(topic="T", body=b"a%d" % i, properties={"INNER_MULTI_DISPATCH": "S"}))
    s.delete_queue("S", 0)
    assert s.max_offset("S", 0) == 0
    assert not os.path.exists(tmp_path / "consumequeue" / "S")
    for i in range(3):
        s.append(Message(topic="T", body=b"b%d" % i, properties={"INNER_MULTI_DISPATCH": "S"}))
    got = s.get_messages("S", 0, 0)
    assert [decode_message(m).body for m in got.messages] == [b"b0", b"b1", b"b2"]
    s.shutdown()
    before = snapshot(tmp_path, "consumequeue")
    shutil.rmtree(tmp_path / "consumequeue")
    s = MessageStore(cfg)
    s.start()
    assert s.max_offset("S", 0) == 3 and s.max_offset("T", 0) == 13
    assert [decode_message(m).body for m in s.get_messages("S", 0, 0).messages] == [b"b0", b"b1", b"b2"]
    assert "%MQGATE%DELETE_QUEUE" not in s.topics()
    s.shutdown()
    assert snapshot(tmp_path, "consumequeue") == before


def test_reserved_topic_is_refused(tmp_path):
    s = MessageStore(small_config(tmp_path))
    s.start()
    assert s.append(Message(topic="%MQGATE%DELETE_QUEUE", body=b"0\nT")).status.name == "MESSAGE_ILLEGAL"
    s.shutdown()
