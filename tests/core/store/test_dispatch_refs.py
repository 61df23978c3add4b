"""Multi-dispatch lists longer than an entry's property block (32,767 bytes).

A message for thousands of persistent MQTT sessions lists their queues in
INNER_MULTI_DISPATCH. What does not fit in the entry goes into reference
records right after it; every queue gets one unit pointing at the one
stored entry, and replaying the log recreates exactly the same units.
"""

import shutil

from core.store import MessageStore, StoreConfig
from core.store.message import (DISPATCH_REF_TOPIC, MAX_PROPERTIES_BYTES, Message, decode_message,
                                multi_dispatch_queues)

N = 1500


def config(root, segment=1 << 20):
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=segment,
                       mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=64, max_index_num=256)


def names(tag: str, n: int = N) -> list[str]:
    return [f"%LMQ%{tag}-device-{i:07d}" for i in range(n)]


def units_of(store, queues):
    return {q: store.read_units(q, 0, 0, 100)[0] for q in queues}


def test_every_queue_of_a_long_list_gets_one_unit_at_the_entry(tmp_path):
    store = MessageStore(config(tmp_path))
    store.start()
    queues = names("a")
    r = store.append(Message("devices", b"to everyone", properties={"INNER_MULTI_DISPATCH": ",".join(queues)}))
    assert r.ok
    entry = decode_message(store.read_at(r.physical_offset))
    assert len(multi_dispatch_queues(entry.properties)) < N  # the rest is in reference records
    for q in (queues[0], queues[N // 2], queues[-1]):
        got = store.get_messages(q, 0, 0, 10)
        assert [decode_message(m).body for m in got.messages] == [b"to everyone"]
    size = len(store.read_at(r.physical_offset))
    assert all(u == [(r.physical_offset, size, 0)] for u in units_of(store, queues).values())
    assert store.max_offset(DISPATCH_REF_TOPIC, 0) == 0  # reference records get no queue of their own
    store.shutdown()


def test_replay_recreates_the_same_units(tmp_path):
    store = MessageStore(config(tmp_path, segment=64 * 1024))  # small segments: records cross segment ends
    store.start()
    a, b = names("a"), names("b", 700)
    for i in range(3):
        assert store.append(Message("devices", b"a%d" % i, properties={"INNER_MULTI_DISPATCH": ",".join(a)})).ok
        assert store.append(Message("devices", b"b%d" % i, properties={"INNER_MULTI_DISPATCH": ",".join(b + a[:10])})).ok
    before = units_of(store, a + b)
    assert all(len(u) == 3 for u in units_of(store, b).values())
    assert len(before[a[0]]) == 6 and len(before[a[-1]]) == 3
    store.flush()
    store.shutdown()
    shutil.rmtree(tmp_path / "consumequeue")
    again = MessageStore(config(tmp_path, segment=64 * 1024))
    again.start()
    try:
        assert units_of(again, a + b) == before
    finally:
        again.shutdown()


def test_entries_keep_their_property_block_within_the_limit(tmp_path):
    store = MessageStore(config(tmp_path))
    store.start()
    r = store.append(Message("devices", b"x", properties={"INNER_MULTI_DISPATCH": ",".join(names("c", 2500)),
                                                          "mqttTopic": "devices/all"}))
    assert r.ok
    raw = store.read_at(r.physical_offset)
    m = decode_message(raw)
    text_len = len("\x02".join(f"{k}\x01{v}" for k, v in m.properties.items()).encode())
    assert text_len <= MAX_PROPERTIES_BYTES and m.properties["mqttTopic"] == "devices/all"
    store.shutdown()
