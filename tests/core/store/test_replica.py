"""The store's replication primitives: `read_log` on a master, `append_replica`
on a slave, `truncate_log` for a deposed master.

A slave fed the master's chunks (of any size, split inside entries) holds the
same bytes at the same offsets, the same consume-queue units (multi-dispatch
ones included), finds messages by key, survives a restart mid-entry, and
refuses chunks that are not where its log ends or that hold a bad entry.
"""

import os
import random

import pytest

from core.store import MessageStore, ReplicaError, truncate_log
from core.store.message import PROPERTY_INNER_MULTI_DISPATCH, Message, decode_message

from .conftest import small_config

SEG = 64 * 1024


def open_store(root, **kw) -> MessageStore:
    s = MessageStore(small_config(root, **kw))
    s.start()
    return s


def fill(master: MessageStore, n: int, start: int = 0) -> None:
    rnd = random.Random(start)
    for i in range(start, start + n):
        props = {"KEYS": f"k{i}"}
        if i % 5 == 0:
            props[PROPERTY_INNER_MULTI_DISPATCH] = "%LMQ%s1,%LMQ%s2"
        body = bytes(rnd.randrange(256) for _ in range(rnd.randrange(10, 3000)))
        assert master.append(Message("T", body, queue_id=i % 3, properties=props)).ok


def replicate(master: MessageStore, slave: MessageStore, chunk: int) -> int:
    """Copy like the HA link does: from the slave's end, chunks of at most ``chunk`` bytes."""
    pos = slave.max_phy_offset if slave.max_phy_offset or slave.dispatched_offset else master.min_phy_offset
    n = 0
    while True:
        data = master.read_log(pos, chunk)
        if not data:
            return n
        pos = slave.append_replica(pos, data)
        n += 1


def segment_bytes(root) -> dict[str, bytes]:
    d = os.path.join(root, "commitlog")
    return {name: open(os.path.join(d, name), "rb").read() for name in sorted(os.listdir(d))}


def units(store: MessageStore, topic: str, qid: int) -> list:
    return store.read_units(topic, qid, 0, 10_000)[0]


@pytest.fixture
def pair(tmp_path):
    """A master store with 10 messages and an empty slave store."""
    master = open_store(tmp_path / "m")
    slave = open_store(tmp_path / "s")
    fill(master, 10)
    yield master, slave
    master.shutdown()
    slave.shutdown()


@pytest.mark.parametrize("chunk", [32 * 1024, 1000, 97])
def test_a_slave_holds_the_masters_bytes_and_queues(tmp_path, chunk):
    master = open_store(tmp_path / "m")
    slave = open_store(tmp_path / "s")
    try:
        fill(master, 120)  # ~180 KiB: three segments, BLANK fillers included
        heard = []
        slave.add_dispatch_listener(lambda t, q, n: heard.append((t, q, n)))
        replicate(master, slave, chunk)
        assert slave.max_phy_offset == master.max_phy_offset == slave.dispatched_offset
        for topic, qid in [("T", 0), ("T", 1), ("T", 2), ("%LMQ%s1", 0), ("%LMQ%s2", 0)]:
            assert units(slave, topic, qid) == units(master, topic, qid)
            assert slave.max_offset(topic, qid) == master.max_offset(topic, qid) > 0
        assert ("T", 2, 40) in heard
        got = slave.query_by_key("T", "k77")
        assert [decode_message(m).properties["KEYS"] for m in got.messages] == ["k77"]
        master.flush()
        slave.flush()
    finally:
        master.shutdown()
        slave.shutdown()
    assert segment_bytes(tmp_path / "m") == segment_bytes(tmp_path / "s")


def test_a_restarted_slave_resumes_from_its_end_even_mid_entry(tmp_path):
    master = open_store(tmp_path / "m")
    slave = open_store(tmp_path / "s")
    fill(master, 60)
    data = master.read_log(0, 5000)  # ends inside an entry
    slave.append_replica(0, data)
    assert slave.dispatched_offset < slave.max_phy_offset == 5000
    slave.shutdown()  # the partial entry is a torn tail for recovery
    slave = open_store(tmp_path / "s")
    try:
        assert slave.max_phy_offset == slave.dispatched_offset < 5000
        fill(master, 30, start=60)
        replicate(master, slave, 4096)
        assert units(slave, "T", 0) == units(master, "T", 0)
        assert slave.max_phy_offset == master.max_phy_offset
    finally:
        master.shutdown()
        slave.shutdown()


def test_an_empty_slave_starts_where_the_masters_log_starts(tmp_path):
    master = open_store(tmp_path / "m", file_reserved_time=0)
    slave = open_store(tmp_path / "s")
    try:
        fill(master, 120)
        master.delete_expired(now_ms=2**62)  # retention took the first segments
        assert master.min_phy_offset >= SEG
        replicate(master, slave, 32 * 1024)
        assert slave.min_phy_offset == master.min_phy_offset
        assert slave.max_phy_offset == master.max_phy_offset
        assert units(slave, "T", 1)[-1] == units(master, "T", 1)[-1]
    finally:
        master.shutdown()
        slave.shutdown()


def test_chunks_not_at_the_end_are_refused_and_change_nothing(pair):
    master, slave = pair
    slave.append_replica(0, master.read_log(0, 2000))
    with pytest.raises(ReplicaError, match="ends at 2000"):
        slave.append_replica(3000, master.read_log(3000, 100))
    with pytest.raises(ReplicaError, match="at offset 100"):
        slave.append_replica(100, b"x")
    assert slave.max_phy_offset == 2000
    with pytest.raises(ReplicaError, match="crosses the end"):
        slave.append_replica(2000, bytes(SEG))


def test_a_corrupt_entry_is_cut_off_and_reported(pair):
    master, slave = pair
    data = bytearray(master.read_log(0, 32 * 1024))
    first = int.from_bytes(data[0:4], "big")
    data[first + 200] ^= 0xFF  # inside the second entry's body: its CRC fails
    with pytest.raises(ReplicaError, match=f"offset {first}.*CRC"):
        slave.append_replica(0, bytes(data))
    assert slave.max_phy_offset == slave.dispatched_offset == first
    assert len(units(slave, "T", 0)) == 1
    replicate(master, slave, 32 * 1024)  # the good bytes again, from where it was cut
    assert units(slave, "T", 1) == units(master, "T", 1)


def test_truncate_log_cuts_a_stopped_store_at_an_entry_boundary(tmp_path):
    root = tmp_path / "m"
    store = open_store(root)
    fill(store, 80)
    keep = units(store, "T", 0)[10]  # (phys, size, tags) of the 11th message of queue 0
    cut_at = keep[0] + keep[1]
    end = store.max_phy_offset
    with pytest.raises(Exception, match="in use"):
        truncate_log(str(root), SEG, cut_at)
    store.shutdown()
    assert truncate_log(str(root), SEG, cut_at) > 0
    store = open_store(root)
    try:
        assert store.max_phy_offset == cut_at < end
        assert len(units(store, "T", 0)) == 11
        assert all(u[0] < cut_at for u in units(store, "%LMQ%s1", 0))
        assert store.query_by_key("T", "k79").messages == []
        assert len(store.query_by_key("T", "k30").messages) == 1  # the index was rebuilt
        fill(store, 5, start=200)  # appends go on from the cut
        assert len(units(store, "T", 0)) > 11
    finally:
        store.shutdown()
    assert truncate_log(str(root), SEG, 10**12) == 0  # past the end: nothing to cut


def test_decode_segment_reads_each_file_up_to_its_filler(tmp_path):
    from core.store.message import decode_segment

    store = open_store(tmp_path / "m")
    fill(store, 120)  # three segments, two closed by a BLANK filler
    store.shutdown()
    d = tmp_path / "m" / "commitlog"
    got = [m for n in sorted(os.listdir(d)) for m in decode_segment((d / n).read_bytes())]
    assert [m.properties["KEYS"] for m in got] == [f"k{i}" for i in range(120)]
