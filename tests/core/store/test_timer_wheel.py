"""Timer wheel, timer log and checkpoint: on-disk layout and scheduling rules."""

import random
import struct

import pytest

from core.store.timer_wheel import (
    BLANK_SIZE, MAGIC_DEFAULT, MAGIC_ROLL, UNIT_SIZE, TimerCheckpoint, TimerLog,
    TimerWheelStore, normalise_precision,
)

BLANK_MAGIC_BYTES = bytes.fromhex("CBD43194")


def make(tmp_path, **kw):
    kw.setdefault("precision_ms", 100)
    kw.setdefault("slots_total", 600)
    kw.setdefault("roll_window_slots", 100)
    kw.setdefault("timerlog_file_size", 10 * UNIT_SIZE + BLANK_SIZE + 8)
    return TimerWheelStore(tmp_path, **kw)


def test_unit_bytes_follow_the_reference_layout(tmp_path):
    log = TimerLog(tmp_path / "timerlog", 4096)
    pos = log.append(-1, MAGIC_DEFAULT, 1_000, 2_500, 123456, 200, -7)
    log.flush()
    raw = (tmp_path / "timerlog" / ("0" * 20)).read_bytes()[:UNIT_SIZE]
    expected = (
        struct.pack(">i", 52) + struct.pack(">q", -1) + struct.pack(">i", 1) + struct.pack(">q", 1000)
        + struct.pack(">i", 2500) + struct.pack(">q", 123456) + struct.pack(">i", 200) + struct.pack(">i", -7)
        + bytes(8)
    )
    assert pos == 0 and raw == expected


def test_wheel_file_size_and_slot_bytes(tmp_path):
    store = make(tmp_path, slots_total=50)
    assert (tmp_path / "timerwheel").stat().st_size == 2 * 50 * 32
    store.schedule(target_ms=250, now_ms=0, offset_py=9, size_py=90)
    store.flush()
    slot_index = (300 // 100) % 100  # rounded up to the precision
    raw = (tmp_path / "timerwheel").read_bytes()[slot_index * 32:(slot_index + 1) * 32]
    assert struct.unpack(">qqqii", raw) == (3, 0, 0, 1, 0)


def test_never_early_at_most_one_precision_late(tmp_path):
    store = make(tmp_path)
    rnd = random.Random(7)
    targets = {}
    for i in range(500):
        t = rnd.randrange(1, 9_000)
        fire = store.schedule(target_ms=t, now_ms=0, offset_py=i, size_py=1)
        assert t <= fire < t + 100
        targets[i] = t
    seen = []
    for slot in range(0, 9_100, 100):
        for u in store.due(slot):
            assert u.target_ms == targets[u.offset_py] and slot >= u.target_ms
            seen.append(u.offset_py)
    assert sorted(seen) == list(range(500))


def test_units_of_a_slot_come_back_in_schedule_order(tmp_path):
    store = make(tmp_path)
    for i in range(25):  # spans several timer log files, with BLANK fillers
        store.schedule(target_ms=500, now_ms=0, offset_py=i, size_py=1)
    assert [u.offset_py for u in store.due(500)] == list(range(25))
    files = sorted((tmp_path / "timerlog").iterdir())
    assert len(files) == 3
    first = files[0].read_bytes()
    assert first[10 * UNIT_SIZE + 12:10 * UNIT_SIZE + 16] == BLANK_MAGIC_BYTES


def test_long_delays_roll(tmp_path):
    store = make(tmp_path)  # window = 100 slots x 100 ms = 10 s
    fire = store.schedule(target_ms=50_000, now_ms=0, offset_py=1, size_py=1)
    assert fire == 10_000
    (u,) = store.due(10_000)
    assert u.magic & MAGIC_ROLL and u.target_ms == 50_000
    # excess under a third of the window: parked at half the window
    fire = store.schedule(target_ms=12_000, now_ms=0, offset_py=2, size_py=1)
    assert fire == 5_000


def test_a_slot_from_an_earlier_lap_reads_empty(tmp_path):
    store = make(tmp_path, slots_total=10, roll_window_slots=5)  # 20 slots: lap = 2 s
    store.schedule(target_ms=300, now_ms=0, offset_py=1, size_py=1)
    assert store.due(300) and store.due(2_300) == []


def test_reopen_keeps_slots_and_truncates_a_torn_unit(tmp_path):
    store = make(tmp_path, timerlog_file_size=4096)
    for i in range(3):
        store.schedule(target_ms=700, now_ms=0, offset_py=i, size_py=1)
    store.checkpoint.last_timer_queue_offset = 3
    store.close()
    path = tmp_path / "timerlog" / ("0" * 20)
    data = bytearray(path.read_bytes())
    data[3 * UNIT_SIZE:3 * UNIT_SIZE + 10] = struct.pack(">i", 52) + b"\x01" * 6  # a torn 4th unit
    path.write_bytes(bytes(data))
    again = make(tmp_path, timerlog_file_size=4096)
    assert again.log.write_pos == 3 * UNIT_SIZE
    assert [u.offset_py for u in again.due(700)] == [0, 1, 2]
    assert again.checkpoint.last_timer_queue_offset == 3


def test_checkpoint_round_trip(tmp_path):
    cp = TimerCheckpoint(tmp_path / "config" / "timercheck", 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 600)
    cp.save()
    assert (tmp_path / "config" / "timercheck").stat().st_size == 4096
    assert TimerCheckpoint.load(tmp_path / "config" / "timercheck") == cp


def test_a_changed_layout_waits_until_the_timers_filed_in_the_old_one_have_fired(tmp_path):
    """Precision and slot count place a slot in the wheel file: read in another
    layout, timers filed in the old one would never be found. The old layout
    stays while any of them is unfired; then the asked one takes over."""
    now = 1_700_000_000_000
    old = TimerWheelStore(tmp_path, precision_ms=1000, slots_total=600, timerlog_file_size=4096)
    for i in range(3):
        old.schedule(target_ms=now + 5100 + i, now_ms=now, offset_py=i, size_py=1)
    old.checkpoint.last_read_time_ms = now
    old.close()
    kept = TimerWheelStore(tmp_path, precision_ms=100, slots_total=900, timerlog_file_size=4096)
    assert (kept.precision_ms, kept.slots_total) == (1000, 600) and "3 timer(s)" in kept.layout_note
    assert [u.offset_py for u in kept.due(now + 6000)] == [0, 1, 2]
    kept.checkpoint.last_read_time_ms = now + 6000  # they have fired
    kept.close()
    switched = TimerWheelStore(tmp_path, precision_ms=100, slots_total=900, timerlog_file_size=4096)
    assert (switched.precision_ms, switched.slots_total, switched.layout_note) == (100, 900, "")
    assert (tmp_path / "timerwheel").stat().st_size == 2 * 900 * 32 and switched.due(now + 6000) == []
    switched.schedule(target_ms=now + 7050, now_ms=now + 6000, offset_py=9, size_py=1)
    assert [u.offset_py for u in switched.due(now + 7100)] == [9]
    switched.close()
    assert TimerCheckpoint.load(tmp_path / "config" / "timercheck").precision_ms == 100


@pytest.mark.parametrize("asked, got", [(1000, 1000), (100, 100), (300, 200), (999, 500), (50, 100), (5000, 1000)])
def test_precision_candidates(asked, got):
    assert normalise_precision(asked) == got


def test_schedule_many_writes_what_schedule_writes(tmp_path):
    """The batched filing path leaves the same timer log and wheel bytes as one call per unit,
    rolls included, across a timer log file boundary."""
    now = 1_700_000_000_000
    (tmp_path / "one").mkdir()
    (tmp_path / "many").mkdir()
    units = [(1000 + i * 300, 300, now + (i * 7919) % 9000 + 1) for i in range(200)]
    units += [(99_000, 250, now + 5_000_000), (99_300, 250, now - 5)]  # beyond the window: ROLL; overdue
    one = TimerWheelStore(tmp_path / "one", precision_ms=1000, slots_total=3600, roll_window_slots=3000,
                          timerlog_file_size=52 * 37 + 16)
    many = TimerWheelStore(tmp_path / "many", precision_ms=1000, slots_total=3600, roll_window_slots=3000,
                           timerlog_file_size=52 * 37 + 16)
    slots_one = [one.schedule(due, now, phys, size) for phys, size, due in units]
    slots_many = many.schedule_many(units[:50], now) + many.schedule_many(units[50:], now)
    assert slots_many == slots_one
    assert many.log.write_pos == one.log.write_pos
    for slot in sorted(set(slots_one)):
        assert [(u.offset_py, u.magic, u.delayed_ms) for u in many.due(slot)] == \
               [(u.offset_py, u.magic, u.delayed_ms) for u in one.due(slot)]
    one.close()
    many.close()
    for name in ("timerwheel",):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes()
    logs_one = sorted((tmp_path / "one" / "timerlog").iterdir())
    logs_many = sorted((tmp_path / "many" / "timerlog").iterdir())
    assert [p.name for p in logs_one] == [p.name for p in logs_many] and len(logs_one) > 1
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(logs_one, logs_many))


def test_clean_deletes_only_timer_log_files_whose_slots_have_all_fired(tmp_path):
    """A full timer log file goes once every slot its units can point at is
    before the read time, with a whole wheel lap as the margin (more than any
    roll window); the file being written and later files stay, and their units
    are still read."""
    (tmp_path / "w").mkdir()
    file_size = 52 * 10 + 16  # ten units a file
    w = TimerWheelStore(tmp_path / "w", precision_ms=1000, slots_total=3600, roll_window_slots=60,
                        timerlog_file_size=file_size)
    t0 = 1_700_000_000_000
    for i in range(35):  # one unit a second, each due 10 s later: files 0..2 full, file 3 being written
        w.schedule(t0 + i * 1000 + 10_000, t0 + i * 1000, 1000 + i, 100)
    files = lambda: sorted(p.name for p in (tmp_path / "w" / "timerlog").iterdir())
    assert len(files()) == 4
    window = 3600 * 1000 + 1000  # a whole lap of the wheel (slots_total slots) and one precision
    assert w.clean(t0 + 9 * 1000 + window - 1) == []  # file 0's last unit (written at t0+9s) may still be due
    gone = w.clean(t0 + 19 * 1000 + window)  # files 0 and 1 are done, file 2's last unit (t0+29s) is not
    assert gone == [f"{0:020d}", f"{file_size:020d}"]
    assert files() == [f"{2 * file_size:020d}", f"{3 * file_size:020d}"]
    assert [u.offset_py for u in w.due(t0 + 40_000)] == [1030]  # a unit of the file being written
    assert [u.offset_py for u in w.due(t0 + 30_000)] == [1020]  # and of the full file kept
    assert w.clean(t0 + 10**9) == [f"{2 * file_size:020d}"]  # never the file being written
    w.close()


def test_clean_keeps_a_file_when_the_clock_stepped_back_or_the_window_shrank(tmp_path):
    """Write times are the wall clock: after a step back a file's last unit can
    be older than an earlier one, and a restart can shrink the roll window.
    Neither makes a file with an unfired slot look done."""
    (tmp_path / "a").mkdir()
    w = TimerWheelStore(tmp_path / "a", precision_ms=100, slots_total=1000, roll_window_slots=100,
                        timerlog_file_size=3 * 52 + 16)
    slot = w.schedule_many([(0, 100, 109_000)], 100_000)[0]  # due in 9 s
    w.schedule_many([(100, 100, 95_100), (200, 100, 95_100), (300, 100, 95_200)], 95_000)  # clock back 5 s
    assert w.clean(95_000 + w.roll_window_ms + w.precision_ms) == []
    assert [u.offset_py for u in w.due(slot)] == [0]
    w.close()
    (tmp_path / "b").mkdir()
    w = TimerWheelStore(tmp_path / "b", precision_ms=100, slots_total=1000, roll_window_slots=100,
                        timerlog_file_size=3 * 52 + 16)
    slot = w.schedule_many([(i * 100, 100, 109_000) for i in range(4)], 100_000)[0]
    w.close()
    w = TimerWheelStore(tmp_path / "b", precision_ms=100, slots_total=1000, roll_window_slots=50,
                        timerlog_file_size=3 * 52 + 16)
    assert w.clean(105_100) == []
    assert len(w.due(slot)) == 4
    w.close()
