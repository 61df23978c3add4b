"""Facade basics: append, read back, restart."""

from core.store import GetMessageStatus, Message, MessageStore, PutStatus, decode_message

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


def test_second_process_or_instance_is_locked_out(tmp_path):
    import pytest

    from core.store import StoreLockedError

    s = MessageStore(small_config(tmp_path))
    s.start()
    with pytest.raises(StoreLockedError):
        MessageStore(small_config(tmp_path)).start()
    s.shutdown()
    t = MessageStore(small_config(tmp_path))
    t.start()
    t.shutdown()


def test_not_started_and_prepared_messages(tmp_path):
    s = MessageStore(small_config(tmp_path))
    assert s.append(msg(0)).status is PutStatus.SERVICE_NOT_AVAILABLE
    s.start()
    half = Message(topic="T", body=b"half", sysflag=0x4)  # TRANSACTION_PREPARED_TYPE
    r = s.append(half)
    assert r.ok and r.queue_offset == 0
    assert s.max_offset("T", 0) == 0  # prepared entries get no consume-queue unit
    assert decode_message(s.read_at(r.physical_offset)).body == b"half"
    assert s.append(msg(1)).queue_offset == 0
    s.shutdown()
