"""Timer-topic units carry the delivery time as their tags code, and replay keeps it."""

import shutil

from core.store import MessageStore, StoreConfig
from core.store.message import TIMER_TOPIC, Message, tags_code


def config(root):
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 16,
                       mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=64, max_index_num=256)


def test_due_time_is_the_tags_code_and_survives_a_rebuild(tmp_path):
    store = MessageStore(config(tmp_path))
    store.start()
    due = [1_800_000_000_123 + i * 977 for i in range(50)]
    for i, d in enumerate(due):
        r = store.append(Message(TIMER_TOPIC, b"x%d" % i, properties={"TIMER_OUT_MS": str(d), "TAGS": "t"}))
        assert r.ok
    store.append(Message("Other", b"y", properties={"TAGS": "TagA", "TIMER_OUT_MS": "5"}))
    units, nxt = store.read_units(TIMER_TOPIC, 0, 0, 1000)
    assert nxt == 50 and [u[2] for u in units] == due
    assert store.read_units("Other", 0, 0, 10)[0][0][2] == tags_code("TagA")  # other topics: the tag hash
    store.shutdown()

    shutil.rmtree(tmp_path / "consumequeue")
    again = MessageStore(config(tmp_path))
    again.start()
    try:
        rebuilt, nxt = again.read_units(TIMER_TOPIC, 0, 0, 1000)
        assert nxt == 50 and rebuilt == units
        assert again.read_units(TIMER_TOPIC, 0, 20, 5) == (units[20:25], 25)
        assert again.read_units(TIMER_TOPIC, 0, 50, 5) == ([], 50)
    finally:
        again.shutdown()
