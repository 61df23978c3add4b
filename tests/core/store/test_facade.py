"""Facade basics: append, read back, restart."""

from core.store import GetMessageStatus, Message, MessageStore, PutStatus, decode_message, tags_code

from .conftest import small_config


def msg(i, topic="T", qid=0, **props):
    return Message(topic=topic, body=b"m%d" % i, queue_id=qid, properties=props)


def test_append_read_restart(tmp_path):
    cfg = small_config(tmp_path)
    s = MessageStore(cfg)
    s.start()
    results = [s.append(msg(i)) for i in range(10)]
    assert [r.queue_offset for r in results] == list(range(10))
    assert all(r.status is PutStatus.PUT_OK for r in results)
    got = s.get_messages("T", 0, 3, 4)
    assert got.status is GetMessageStatus.FOUND
    assert [decode_message(m).body for m in got.messages] == [b"m3", b"m4", b"m5", b"m6"]
    assert got.next_begin_offset == 7
    s.shutdown()
    s = MessageStore(cfg)
    report = s.start()
    assert not report.abnormal_exit
    assert s.max_offset("T", 0) == 10
    assert s.append(msg(10)).queue_offset == 10
    s.shutdown()
