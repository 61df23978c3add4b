"""Reads: the reference 2.5 status table, tag filters, offset by time, query by
key, lookup by offset message id, topic listing and directory names."""

import time

import pytest

from core.store import GetMessageStatus as S
from core.store import Message, MessageStore, decode_message, dir_name, entry_properties, tags_code
from core.store.names import name_from_dir

from .conftest import small_config


@pytest.fixture
def store(tmp_path):
    s = MessageStore(small_config(tmp_path))
    s.start()
    yield s
    s.shutdown()


def test_status_table(store):
    assert (r := store.get_messages("Nope", 0, 5)).status is S.NO_MATCHED_LOGIC_QUEUE and r.next_begin_offset == 0
    for i in range(5):
        store.append(Message(topic="T", body=b"%d" % i))
    r = store.get_messages("T", 0, 2, 2)
    assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (S.FOUND, 4, 0, 5)
    assert r.queue_offsets == [2, 3]
    r = store.get_messages("T", 0, 5)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_ONE, 5)
    r = store.get_messages("T", 0, 9)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 0)  # min == 0: back to min
    r = store.get_messages("T", 0, 0, 32, max_bytes=1)
    assert (r.status, len(r.messages), r.next_begin_offset) == (S.FOUND, 1, 1)  # at least one


def test_tag_filter(store):
    for i in range(12):
        store.append(Message(topic="T", body=b"%d" % i, properties={"TAGS": "ABC"[i % 3]}))
    want = {tags_code("A"), tags_code("C")}
    r = store.get_messages("T", 0, 0, 4, tag_codes=want)
    assert [decode_message(m).tags for m in r.messages] == ["A", "C", "A", "C"]
    assert r.queue_offsets == [0, 2, 3, 5]
    assert r.next_begin_offset == 6
    r = store.get_messages("T", 0, 0, 32, tag_codes={tags_code("Z")})
    assert (r.status, r.next_begin_offset, r.messages) == (S.NO_MATCHED_MESSAGE, 12, [])


def test_entry_filter_sees_whole_entries_and_counts_only_kept_ones(store):
    for i in range(6):
        store.append(Message(topic="T", body=b"%d" % i, properties={"n": str(i), "TAGS": "AB"[i % 2]}))
    seen = []

    def odd(raw: bytes) -> bool:
        props = entry_properties(raw)
        assert props == decode_message(raw).properties
        seen.append(props["n"])
        return int(props["n"]) % 2 == 1
    r = store.get_messages("T", 0, 0, 2, entry_filter=odd)
    assert [decode_message(m).body for m in r.messages] == [b"1", b"3"]
    assert r.queue_offsets == [1, 3] and r.next_begin_offset == 4 and seen == ["0", "1", "2", "3"]
    seen.clear()  # the tag check runs first: only B-tagged entries reach the filter
    r = store.get_messages("T", 0, 0, 32, tag_codes={tags_code("B")}, entry_filter=odd)
    assert seen == ["1", "3", "5"] and len(r.messages) == 3
    r = store.get_messages("T", 0, 0, 32, entry_filter=lambda raw: False)
    assert (r.status, r.next_begin_offset, r.messages) == (S.NO_MATCHED_MESSAGE, 6, [])


def test_offset_by_time(store):
    stamps = []
    for i in range(6):
        r = store.append(Message(topic="T", body=b"%d" % i))
        stamps.append(r.store_timestamp)
        time.sleep(0.003)
    assert store.offset_by_time("T", 0, 0) == 0
    assert store.offset_by_time("T", 0, stamps[3]) == stamps.index(stamps[3])
    assert store.offset_by_time("T", 0, stamps[3] + 1) == 4 if stamps[4] > stamps[3] else True
    assert store.offset_by_time("T", 0, stamps[-1] + 1000) == 6
    assert store.earliest_store_time("T", 0) == stamps[0]
    assert store.earliest_store_time() == stamps[0]
    assert store.store_time("T", 0, 2) == stamps[2]


def test_query_by_key_and_msg_id(store):
    rs = []
    for i in range(40):
        rs.append(store.append(Message(topic="T", body=b"%d" % i, properties={"KEYS": "order-%d common" % (i % 4), "UNIQ_KEY": "U%d" % i})))
        store.append(Message(topic="Other", body=b"o", properties={"KEYS": "common"}))
    hits = store.query_by_key("T", "order-1", max_num=100).messages
    assert sorted(decode_message(m).body for m in hits) == sorted(b"%d" % i for i in range(1, 40, 4))
    assert all(decode_message(m).topic == "T" for m in store.query_by_key("T", "common", 100).messages)
    assert len(store.query_by_key("T", "common", max_num=7).messages) == 7
    (one,) = store.query_by_key("T", "U17").messages
    assert decode_message(one).body == b"17"
    assert store.query_by_key("T", "U17", begin_ts=rs[17].store_timestamp + 10_000).messages == []
    res = store.query_by_key("T", "U17")
    assert res.index_last_update_phy_offset == store.max_phy_offset
    assert store.read_by_msg_id(rs[5].msg_id) == store.read_at(rs[5].physical_offset)
    assert decode_message(store.read_by_msg_id(rs[5].msg_id)).body == b"5"
    assert store.read_at(rs[5].physical_offset + 1) is None
    assert store.read_by_msg_id("nonsense") is None


def test_batch_gets_consecutive_offsets(store):
    store.append(Message(topic="B", body=b"first"))
    r = store.append_batch([Message(topic="B", body=b"%d" % i) for i in range(5)])
    assert r.queue_offset == 1 and r.msg_num == 5
    assert len(r.msg_ids) == 5 and r.msg_id == ",".join(r.msg_ids)
    got = store.get_messages("B", 0, 1, 10)
    assert [decode_message(m).queue_offset for m in got.messages] == [1, 2, 3, 4, 5]
    assert [decode_message(m).msg_id for m in got.messages] == r.msg_ids


def test_dispatch_listener(store):
    seen = []
    store.add_dispatch_listener(lambda t, q, n: seen.append((t, q, n)))
    store.append(Message(topic="T", body=b"x", queue_id=2, properties={"INNER_MULTI_DISPATCH": "s1,s2"}))
    store.append(Message(topic="T", body=b"x", queue_id=2))
    assert seen == [("T", 2, 1), ("s1", 0, 1), ("s2", 0, 1), ("T", 2, 2)]
    assert store.topics() == ["T", "s1", "s2"] and store.queue_ids("T") == [2]


@pytest.mark.parametrize("name", ["TopicTest", "%RETRY%g", "a|b", "a/b", "..", "", "ü", "x" * 300, "a,b c"])
def test_directory_names_round_trip(tmp_path, name):
    d = dir_name(name)
    assert "/" not in d and d not in (".", "..", "")
    p = tmp_path / d
    p.mkdir()
    if d.startswith("~~"):
        (p / ".name").write_text(name)
    assert name_from_dir(d, str(p)) == name
    if name in ("TopicTest", "%RETRY%g", "a|b"):
        assert d == name


def test_unknown_names_survive_restart(tmp_path):
    cfg = small_config(tmp_path)
    s = MessageStore(cfg)
    s.start()
    long_name = "session/" + "z" * 300
    s.append(Message(topic="T", body=b"x", properties={"INNER_MULTI_DISPATCH": long_name + ",a/b"}))
    s.shutdown()
    s = MessageStore(cfg)
    s.start()
    assert s.topics() == ["T", "a/b", long_name]
    assert s.max_offset(long_name, 0) == 1
    s.shutdown()
