"""`MessageStore.append_many`: independent encoded messages under one lock.

One row per message ((physical offset, queue offset), or None for a message
the store refuses while the others are stored), one dispatch notification
per queue with its newest next offset, and everything found again after a
restart (consume queues kept, or rebuilt from the log).
"""

import shutil

import pytest

from core.store import MessageStore
from core.store.errors import PutStatus
from core.store.encoder import EncodedMessage
from core.store.message import TRANSACTION_PREPARED_TYPE, Message, decode_message
from core.store.store import DELETE_QUEUE_TOPIC

from .conftest import small_config


def enc(topic: str, queue_id: int, body: bytes, **props: str) -> EncodedMessage:
    return EncodedMessage(Message(topic, body, queue_id=queue_id, properties=dict(props)))


def bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    got = store.get_messages(topic, queue_id, 0, 1000)
    return [decode_message(m).body for m in got.messages]


def open_store(root, **kw) -> MessageStore:
    s = MessageStore(small_config(root, **kw))
    s.start()
    return s


# (topic, queue id, body) of a batch over three queues, interleaved
MIX = [("A", 0, b"a0-0"), ("A", 1, b"a1-0"), ("B", 0, b"b0-0"), ("A", 0, b"a0-1"),
       ("B", 0, b"b0-1"), ("A", 0, b"a0-2")]
EXPECTED = {("A", 0): [b"a0-0", b"a0-1", b"a0-2"], ("A", 1): [b"a1-0"], ("B", 0): [b"b0-0", b"b0-1"]}


def test_rows_for_a_mix_of_queues_and_one_notification_per_queue(tmp_path):
    store = open_store(tmp_path / "store")
    heard = []
    store.add_dispatch_listener(lambda t, q, n: heard.append((t, q, n)))
    try:
        encs = [enc(t, q, b) for t, q, b in MIX]
        status, rows, ts = store.append_many(encs)
        assert status is PutStatus.PUT_OK
        assert [r[1] for r in rows] == [0, 0, 0, 1, 1, 2]
        phys = [r[0] for r in rows]
        assert phys[0] == 0
        # one entry after the other in the log, in input order
        assert phys == [sum(e.size for e in encs[:i]) for i in range(len(encs))]
        assert store.max_phy_offset == sum(e.size for e in encs)
        # once per queue, its final next offset, in order of first appearance
        assert heard == [("A", 0, 3), ("A", 1, 1), ("B", 0, 2)]
        for (t, q), want in EXPECTED.items():
            assert bodies(store, t, q) == want
        for (t, q, b), (p, qoff) in zip(MIX, rows):
            m = decode_message(store.read_at(p))
            assert (m.topic, m.queue_id, m.queue_offset, m.physical_offset, m.body) == (t, q, qoff, p, b)
            assert m.store_timestamp == ts

        # a second batch continues every queue's offsets; a queue it does not touch is not notified
        heard.clear()
        status, rows, _ = store.append_many([enc("B", 0, b"b0-2"), enc("A", 0, b"a0-3"), enc("B", 0, b"b0-3")])
        assert status is PutStatus.PUT_OK
        assert [r[1] for r in rows] == [2, 3, 3]
        assert heard == [("B", 0, 4), ("A", 0, 4)]
    finally:
        store.shutdown()


def test_refused_messages_get_none_rows_and_the_others_are_stored(tmp_path):
    store = open_store(tmp_path / "store")  # 64 KiB segments: an entry must be below that
    heard = []
    store.add_dispatch_listener(lambda t, q, n: heard.append((t, q, n)))
    try:
        big = enc("A", 0, b"x" * (70 * 1024))
        reserved = enc(DELETE_QUEUE_TOPIC, 0, b"no")
        encs = [enc("A", 0, b"first"), big, enc("B", 2, b"second"), reserved, enc("A", 0, b"third")]
        status, rows, _ = store.append_many(encs)
        assert status is PutStatus.PUT_OK
        assert rows[1] is None and rows[3] is None
        assert [r[1] for r in (rows[0], rows[2], rows[4])] == [0, 0, 1]
        # nothing of the refused ones was written: the stored entries are back to back
        assert rows[2][0] == rows[0][0] + encs[0].size
        assert rows[4][0] == rows[2][0] + encs[2].size
        assert store.max_phy_offset == rows[4][0] + encs[4].size
        assert bodies(store, "A", 0) == [b"first", b"third"]
        assert bodies(store, "B", 2) == [b"second"]
        assert store.max_offset(DELETE_QUEUE_TOPIC, 0) == 0
        assert heard == [("A", 0, 2), ("B", 2, 1)]
    finally:
        store.shutdown()


def test_only_refused_messages_store_nothing(tmp_path):
    store = open_store(tmp_path / "store")
    try:
        status, rows, _ = store.append_many([enc("A", 0, b"x" * (70 * 1024))])
        assert status is PutStatus.PUT_OK and rows == [None]
        assert store.max_phy_offset == 0 and store.max_offset("A", 0) == 0
    finally:
        store.shutdown()


def test_a_stopped_store_refuses_the_whole_batch(tmp_path):
    store = open_store(tmp_path / "store")
    store.shutdown()
    status, rows, ts = store.append_many([enc("A", 0, b"late")])
    assert (status, rows, ts) == (PutStatus.SERVICE_NOT_AVAILABLE, [], 0)


@pytest.mark.parametrize("drop_queues", [False, True], ids=["queues-kept", "queues-rebuilt"])
def test_everything_is_there_after_a_restart(tmp_path, drop_queues):
    root = tmp_path / "store"
    store = open_store(root)
    encs = [enc(t, q, b, KEYS=f"k-{b.decode()}") for t, q, b in MIX]
    status, rows, _ = store.append_many(encs)
    assert status is PutStatus.PUT_OK
    end = store.max_phy_offset
    store.shutdown()
    if drop_queues:
        shutil.rmtree(root / "consumequeue")

    again = open_store(root)
    try:
        assert again.max_phy_offset == end
        for (t, q), want in EXPECTED.items():
            assert again.max_offset(t, q) == len(want)
            assert bodies(again, t, q) == want
        for (t, q, b), (p, qoff) in zip(MIX, rows):
            m = decode_message(again.read_at(p))
            assert (m.topic, m.queue_id, m.queue_offset, m.body) == (t, q, qoff, b)
        # keys were indexed
        got = again.query_by_key("A", "k-a0-1")
        assert [decode_message(m).body for m in got.messages] == [b"a0-1"]
        # and the queues go on from where they were
        status, rows, _ = again.append_many([enc("A", 0, b"a0-3"), enc("B", 0, b"b0-2")])
        assert status is PutStatus.PUT_OK and [r[1] for r in rows] == [3, 2]
    finally:
        again.shutdown()


def test_a_batch_across_segment_ends_is_stored_whole(tmp_path):
    root = tmp_path / "store"
    segment = 4096
    store = open_store(root, mapped_file_size_commit_log=segment)
    n = 40
    encs = [enc("S", i % 3, bytes([65 + i % 26]) * (300 + 7 * i)) for i in range(n)]
    total = sum(e.size for e in encs)
    assert total > 5 * segment  # several segment ends inside the batch
    status, rows, _ = store.append_many(encs)
    assert status is PutStatus.PUT_OK and None not in rows
    phys = [r[0] for r in rows]
    assert phys == sorted(phys) and len(set(phys)) == n
    # no entry straddles a segment end
    for p, e in zip(phys, encs):
        assert p // segment == (p + e.size - 1) // segment
    assert len({p // segment for p in phys}) >= 6
    assert [r[1] for r in rows] == [i // 3 for i in range(n)]
    want = {q: [bytes([65 + i % 26]) * (300 + 7 * i) for i in range(n) if i % 3 == q] for q in range(3)}
    for q in range(3):
        assert bodies(store, "S", q) == want[q]
    for i, p in enumerate(phys):
        assert decode_message(store.read_at(p)).body == bytes([65 + i % 26]) * (300 + 7 * i)
    store.shutdown()

    again = open_store(root, mapped_file_size_commit_log=segment)
    try:
        for q in range(3):
            assert bodies(again, "S", q) == want[q]
        for i, p in enumerate(phys):
            m = decode_message(again.read_at(p))
            assert (m.queue_id, m.queue_offset, m.physical_offset) == (i % 3, i // 3, p)
    finally:
        again.shutdown()


def test_multi_dispatch_and_half_messages_in_a_batch(tmp_path):
    """Messages that go through the one-at-a-time path keep their place among the others."""
    store = open_store(tmp_path / "store")
    try:
        half = Message("H", b"half", queue_id=0, sysflag=TRANSACTION_PREPARED_TYPE)  # a half message: no queue unit
        encs = [enc("A", 0, b"plain-0"), enc("A", 0, b"to-lmq", INNER_MULTI_DISPATCH="%LMQ%x,%LMQ%y"),
                EncodedMessage(half), enc("A", 0, b"plain-1")]
        status, rows, _ = store.append_many(encs)
        assert status is PutStatus.PUT_OK
        assert [r[1] for r in rows] == [0, 1, 0, 2]
        assert bodies(store, "A", 0) == [b"plain-0", b"to-lmq", b"plain-1"]
        assert bodies(store, "%LMQ%x", 0) == [b"to-lmq"] and bodies(store, "%LMQ%y", 0) == [b"to-lmq"]
        assert store.max_offset("H", 0) == 0
        assert decode_message(store.read_at(rows[2][0])).body == b"half"
    finally:
        store.shutdown()


def test_notification_has_the_final_offset_when_a_multi_dispatch_entry_comes_first(tmp_path):
    store = open_store(tmp_path / "store")
    heard = []
    store.add_dispatch_listener(lambda t, q, n: heard.append((t, q, n)))
    try:
        encs = [enc("A", 0, b"to-lmq", INNER_MULTI_DISPATCH="%LMQ%x"), enc("A", 0, b"plain-1"),
                enc("A", 0, b"plain-2")]
        status, rows, _ = store.append_many(encs)
        assert status is PutStatus.PUT_OK and [r[1] for r in rows] == [0, 1, 2]
        assert store.max_offset("A", 0) == 3
        # queue A/0 ends at next offset 3; the listener must not hear the stale 1
        assert sorted(heard) == [("%LMQ%x", 0, 1), ("A", 0, 3)]
    finally:
        store.shutdown()


def _log_and_units(store: MessageStore) -> tuple[bytes, dict]:
    """The written log with each entry's STORETIMESTAMP zeroed (the clock's), and
    every consume queue's units."""
    log = bytearray()
    pos = store.min_phy_offset
    while pos < store.max_phy_offset:
        entry = store.commitlog.read_entry(pos)
        if entry is None:  # a BLANK: the next segment
            pos += store.config.mapped_file_size_commit_log - pos % store.config.mapped_file_size_commit_log
            continue
        m = decode_message(entry)
        at = 56 if len(m.born_host) == 8 else 68
        log += entry[:at] + bytes(8) + entry[at + 8:]
        pos += len(entry)
    units = {key: cq.units(cq.min_offset, cq.max_offset) for key, cq in store._queues.items()}
    return bytes(log), units


def test_the_batch_writes_what_one_append_at_a_time_writes(tmp_path):
    """The batched loop, the one-message path (`append`, typed for a plain
    message: `append_many.append_one`) and the general one (`_append_locked`,
    what they hand the rare shapes) leave the same log bytes (store times
    aside), units and index keys: across segment ends, consume-queue file
    ends, refused, multi-dispatch and half messages."""
    kw = dict(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=20 * 8)
    batched, single = open_store(tmp_path / "batched", **kw), open_store(tmp_path / "single", **kw)
    general = open_store(tmp_path / "general", **kw)
    heard = {"single": [], "general": []}
    single.add_dispatch_listener(lambda t, q, n: heard["single"].append((t, q, n)))
    general.add_dispatch_listener(lambda t, q, n: heard["general"].append((t, q, n)))
    try:
        encs = []
        for i in range(90):
            body = bytes([48 + i % 10]) * (40 + 13 * i % 300)
            if i % 17 == 5:
                encs.append(enc("A", 0, b"x" * 5000))  # refused: more than a segment
            elif i % 11 == 3:
                encs.append(enc("A", i % 2, body, INNER_MULTI_DISPATCH=f"%LMQ%s{i % 3},%LMQ%t"))
            elif i % 13 == 7:
                encs.append(EncodedMessage(Message("H", body, sysflag=TRANSACTION_PREPARED_TYPE)))
            else:
                encs.append(enc("AB"[i % 2], i % 3, body, KEYS=f"k{i} all", UNIQ_KEY=f"U{i:04d}"))
        status, rows, _ = batched.append_many(encs)
        assert status is PutStatus.PUT_OK
        again = [enc_again(e) for e in encs]
        singles = [single.append(e) for e in again]
        assert [r if r is None else r[1] for r in rows] == [s.queue_offset if s.ok else None for s in singles]
        assert [r if r is None else r[0] for r in rows] == [s.physical_offset if s.ok else None for s in singles]
        generals = [_append_general(general, e) for e in map(enc_again, encs)]
        assert [(s.physical_offset, s.queue_offset) if s.ok else None for s in singles] == generals
        assert heard["single"] == heard["general"] and heard["single"]
        assert _log_and_units(batched) == _log_and_units(single) == _log_and_units(general)
        batched.flush(), single.flush(), general.flush()
        for key in ("k3", "all", "U0002"):
            got = [sorted(decode_message(e).body for e in s.query_by_key("A", key, 100).messages)
                   for s in (batched, single, general)]
            assert got[0] == got[1] == got[2]
        assert [m.body for m in map(decode_message, batched.query_by_key("A", "all", 100).messages)]
    finally:
        batched.shutdown()
        single.shutdown()
        general.shutdown()


def _append_general(store: MessageStore, e: EncodedMessage) -> tuple[int, int] | None:
    """``e`` written by `MessageStore._append_locked` (what `append` takes for the rare shapes and
    `append_many.write` hands them): (physical offset, queue offset), None if the store refuses it."""
    if e.size > store._max_entry:
        return None
    notes: dict = {}
    with store._lock:
        phys, qoff, _ts = store._append_locked(e, notes)
    store._notify(notes)
    return phys, qoff


def enc_again(e: EncodedMessage) -> EncodedMessage:
    """The same entry as a new object (the first was stamped by its append)."""
    m = decode_message(bytes(e.buf))
    return EncodedMessage(Message(m.topic, m.body, queue_id=m.queue_id, flag=m.flag, properties=m.properties,
                                  sysflag=m.sysflag, born_timestamp=m.born_timestamp, born_host=m.born_host,
                                  store_host=m.store_host, reconsume_times=m.reconsume_times,
                                  prepared_transaction_offset=m.prepared_transaction_offset))
