"""Partition planning: exact ranges, readable end of a live log, corruption."""

import os
import random

import numpy as np
import pytest

from core.store.encoder import encode_message
from core.store.message import Message
from spark import plan


def _fill(LogWriter, tmp_path, n=400, segment_size=8192, seed=7, preallocate=True):
    rnd = random.Random(seed)
    w = LogWriter(str(tmp_path), segment_size, preallocate=preallocate)
    for i in range(n):
        body = bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 5, 40, 300, 900])))
        w.append(Message(topic=rnd.choice(["devices", "t2"]), body=body, properties={"UNIQ_KEY": str(i)}), 1000 + i)
    return w


def _entry_starts(ranges):
    out = []
    for r in ranges:
        rel = r.starts_in_range()
        assert len(rel) == r.count
        out.extend((r.start + rel).tolist())
    return out


@pytest.mark.parametrize("max_bytes", [1, 200, 1000, 5000, 8192, 1 << 30])
def test_every_entry_in_exactly_one_range(log_writer, tmp_path, max_bytes):
    w = _fill(log_writer, tmp_path)
    ranges, end = plan.plan(str(tmp_path), None, None, max_bytes)
    assert _entry_starts(ranges) == w.positions
    assert end == w.pos
    for r in ranges:
        assert r.path.endswith(f"{r.base:020d}")
        assert r.base <= r.start < r.end <= r.base + 8192
        assert r.end - r.start <= max_bytes or r.count == 1
        sizes = np.diff(np.append(r.starts_in_range(), r.end - r.start))
        assert sizes.sum() == r.end - r.start
    assert len(ranges) >= len(os.listdir(tmp_path / "commitlog"))


def test_ranges_from_a_middle_position_to_a_stop(log_writer, tmp_path):
    w = _fill(log_writer, tmp_path)
    start, stop = w.positions[37], w.positions[301]
    ranges, end = plan.plan(str(tmp_path), start, stop, 3000)
    assert _entry_starts(ranges) == w.positions[37:301]
    assert end == stop


@pytest.mark.parametrize("cut", [3, 8, 40, 90, 120])
def test_torn_last_entry_is_skipped(log_writer, tmp_path, cut):
    w = _fill(log_writer, tmp_path, n=50)
    good_end = w.pos
    nxt = encode_message(Message(topic="devices", body=b"x" * 50), 0, w.pos, 5)
    w.write_raw(nxt[:cut])  # the rest of the preallocated segment is zeros
    ranges, end = plan.plan(str(tmp_path), None, None, 1 << 20)
    assert end == good_end
    assert _entry_starts(ranges) == w.positions


def test_unfinished_body_fails_the_tail_crc(log_writer, tmp_path):
    w = _fill(log_writer, tmp_path, n=50)
    good_end = w.pos
    nxt = bytearray(encode_message(Message(topic="devices", body=b"y" * 200), 0, w.pos, 5))
    nxt[100:200] = bytes(100)  # lengths all present, body still being copied
    w.write_raw(bytes(nxt))
    assert plan.plan(str(tmp_path), None, None, 1 << 20)[1] == good_end


def test_truncated_file_without_preallocation(log_writer, tmp_path):
    w = _fill(log_writer, tmp_path, n=60, preallocate=False)
    good_end = w.pos
    nxt = encode_message(Message(topic="devices", body=b"z" * 30), 0, w.pos, 5)
    w.write_raw(nxt[:70])
    ranges, end = plan.plan(str(tmp_path), None, None, 1 << 20)
    assert end == good_end and _entry_starts(ranges) == w.positions


def test_entry_with_a_wrong_position_is_not_an_entry(log_writer, tmp_path):
    # stale bytes of an entry written for another position (after a truncation)
    w = _fill(log_writer, tmp_path, n=20)
    good_end = w.pos
    w.write_raw(encode_message(Message(topic="devices", body=b"old"), 0, w.pos + 4096, 5))
    assert plan.plan(str(tmp_path), None, None, 1 << 20)[1] == good_end


def test_corrupt_entry_in_a_sealed_segment_raises(log_writer, tmp_path):
    w = _fill(log_writer, tmp_path, n=200)
    first = os.path.join(tmp_path, "commitlog", f"{0:020d}")
    victim = w.positions[3]
    with open(first, "r+b") as f:
        f.seek(victim + 4)
        f.write(b"\x00\x00\x00\x00")  # magic
    with pytest.raises(plan.CorruptLogError) as e:
        plan.plan(str(tmp_path), None, None, 1 << 20)
    assert e.value.path == first and e.value.position == victim


def test_empty_and_missing_logs(log_writer, tmp_path):
    assert plan.plan(str(tmp_path), None, None, 100) == ([], 0)
    log_writer(str(tmp_path), 4096)
    assert plan.plan(str(tmp_path), None, None, 100) == ([], 0)
    assert plan.tail_end(str(tmp_path)) == 0


def test_tail_end_after_rolling(log_writer, tmp_path):
    w = _fill(log_writer, tmp_path, n=300)
    assert plan.tail_end(str(tmp_path)) == w.pos
    # a fresh segment with nothing in it yet: the end is its base
    segs = plan.list_segments(str(tmp_path))
    w._open( segs[-1].base + 8192)
    assert plan.tail_end(str(tmp_path)) == segs[-1].base + 8192
    # ... and a walk from the old end crosses the unused rest of the old segment
    assert plan.plan(str(tmp_path), w.pos, None, 1 << 20) == ([], w.pos)


def test_a_stop_past_a_blank_walks_into_the_next_segment(log_writer, tmp_path):
    w = _fill(log_writer, tmp_path, n=200)
    seg2 = [p for p in w.positions if p >= 8192]
    ranges, end = plan.plan(str(tmp_path), w.positions[10], seg2[3], 1 << 20)
    assert _entry_starts(ranges) == [p for p in w.positions if w.positions[10] <= p < seg2[3]]
    assert end == seg2[3]


def test_consume_queue_hints_never_change_the_result(log_writer, tmp_path):
    w = _fill(log_writer, tmp_path, n=300)
    rnd = random.Random(5)
    truth = plan.scan_log(str(tmp_path))
    pos = np.array(w.positions, dtype=np.int64)
    for hints in (
        pos,  # every entry
        pos[::3],  # some entries have no unit (prepared transactions, not dispatched yet)
        np.sort(np.concatenate([pos[::2], pos[1::7] + 5, [pos[-1] + 1, 3]])),  # units that are not entries
        np.zeros(0, dtype=np.int64),
    ):
        for i, seg in enumerate(plan.list_segments(str(tmp_path))):
            start = max(seg.base, int(rnd.choice(pos)) if i == 0 else seg.base)
            got = plan.scan_segment(seg, start, last=False, hints=hints)
            want = plan.scan_segment(seg, start, last=False)
            assert got.starts.tolist() == want.starts.tolist() and got.stop == want.stop
    assert [s.starts.tolist() for s in truth] == [s.starts.tolist() for s in plan.scan_log(str(tmp_path))]


def test_plan_uses_the_store_consume_queues(make_store, tmp_path):
    store = make_store(tmp_path, 16384)
    positions = [store.append(Message(topic="devices", body=b"x" * (i % 50), queue_id=i % 3)).physical_offset for i in range(500)]
    store.append(Message(topic="devices", body=b"half", sysflag=0x4))  # no consume-queue unit
    positions.append(store.append(Message(topic="devices", body=b"after")).physical_offset)
    hints = plan.queue_positions(str(tmp_path))
    assert hints.tolist() == positions
    ranges, end = plan.plan(str(tmp_path), None, None, 4000)
    starts = _entry_starts(ranges)
    assert [p for p in starts if p in set(positions)] == positions and len(starts) == len(positions) + 1
