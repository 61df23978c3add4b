"""Timer wheel, timer log and timer checkpoint (RocketMQ 5 on-disk layout).

A timer message is first stored in the commit log (topic
``rmq_sys_wheel_timer``); this module only keeps *when* each such entry is due:

``timerlog/``  segment files named by 20-digit start offset; 52-byte units::

    size int32 (=52) | prevPos int64 | magic int32 | currWriteTimeMs int64 |
    delayedTime int32 | offsetPy int64 | sizePy int32 | topicHash int32 |
    reserved int64

  ``prevPos`` links every unit to the previous unit of the same slot, so a
  slot is a list walked backwards from its ``lastPos``. A unit that does not
  fit (with 16 bytes to spare) is preceded by a 16-byte BLANK filler
  ``[int32 remaining][int64 0][int32 BLANK_MAGIC]`` and goes to the next file.

``timerwheel`` one file of ``2 * slots_total`` slots of 32 bytes::

    timeMs / precisionMs int64 | firstPos int64 | lastPos int64 | num int32 | magic int32

  slot index = ``(time_ms // precision_ms) % (2 * slots_total)``. A slot whose
  stored time is not the asked time is empty (it belongs to another lap).

``config/timercheck`` 4 KiB: lastReadTimeMs, lastTimerLogFlushPos,
  lastTimerQueueOffset, masterTimerQueueOffset, stateVersion, timestamp,
  counter (int64 each; RocketMQ's fields), then two of ours that RocketMQ
  leaves zero: firedThroughMs and firedThroughLogPos (every unit written
  before that log position whose firing time is at or before that time has
  been stored, so a restart does not fire it again), then precisionMs and
  slotsTotal, the wheel's layout (0: not recorded).

Rules kept here:
- A unit's slot time is its target rounded *up* to the precision, so a
  timer never fires early and fires at most one precision late (RocketMQ
  rounds down; the layout is the same, the guarantee is stronger).
- Delays at or beyond the roll window are parked at ``now + window`` (or
  half the window when the excess is under a third of it) with the ROLL bit;
  the caller re-enqueues them when that slot comes due.
- Everything is derived from the commit log: the caller replays the
  ``rmq_sys_wheel_timer`` queue from the checkpoint's queue offset, so a unit
  written twice around a crash fires twice (same UNIQ_KEY); none is lost.
- No threads, no clock: times are passed in.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .mapped_file import allocate
from .message import BLANK_MAGIC

MAGIC_DEFAULT = 1
MAGIC_ROLL = 2
MAGIC_DELETE = 4

UNIT_SIZE = 52
_UNIT = struct.Struct(">iqiqiqiiq")
_SLOT = struct.Struct(">qqqii")
_SCAN_BYTES = 2048 * _SLOT.size  # slots compared at once by `TimerWheel.units_after`
_ZERO_SCAN = bytes(_SCAN_BYTES)
_BLANK = struct.Struct(">iqi")
_CHECKPOINT = struct.Struct(">qqqqqqqqqqq")
BLANK_SIZE = _BLANK.size  # 16
_INT32 = 1 << 31
MAX_DELAY_FIELD_MS = _INT32 - 1  # a unit's delay field (int32 ms): the longest delay a timer may ask for
ROLL_WINDOW_MARGIN_SLOTS = 60  # slots of the wheel kept out of the roll window (when it has more than 120)
assert _UNIT.size == UNIT_SIZE and _SLOT.size == 32

PRECISIONS_MS = (100, 200, 500, 1000)


def normalise_precision(precision_ms: int) -> int:
    """RocketMQ's rule: the largest candidate not above the asked value (min 100)."""
    best = PRECISIONS_MS[0]
    for p in PRECISIONS_MS:
        if p <= precision_ms:
            best = p
    return best


@dataclass(frozen=True, slots=True)
class Slot:
    time_ms: int
    first_pos: int
    last_pos: int
    num: int
    magic: int


class TimerUnit(NamedTuple):
    """One timer log unit (a tuple: a slot of 30,000 timers makes 30,000 of them at once)."""

    pos: int
    prev_pos: int
    magic: int
    write_time_ms: int
    delayed_ms: int
    offset_py: int
    size_py: int
    topic_hash: int

    @property
    def target_ms(self) -> int:
        return self.write_time_ms + self.delayed_ms

    @property
    def is_roll(self) -> bool:
        return bool(self.magic & MAGIC_ROLL)


def _open_allocated(path: Path, size: int) -> int:
    """A descriptor of ``path`` sized ``size`` with its disk blocks allocated
    (as the commit log's segments are): a full disk is an ``OSError``
    (ENOSPC, naming the file) here, never a SIGBUS at a write through the
    map. A file this call created and could not allocate is removed."""
    created = not os.path.exists(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != size or created:
            allocate(fd, 0, size)
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, size)
    except OSError as e:
        os.close(fd)
        if created:
            os.unlink(path)
        raise OSError(e.errno, f"{e.strerror} (allocating {size} bytes)", str(path)) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


class TimerWheel:
    """The slot file; a slot is the head and tail of one list in the timer log."""

    def __init__(self, path: Path, slots_total: int, precision_ms: int):
        self.path = Path(path)
        self.slots_total = slots_total
        self.precision_ms = precision_ms
        self.slot_count = 2 * slots_total
        size = self.slot_count * _SLOT.size
        fd = _open_allocated(self.path, size)
        try:
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd  # kept for flush: fdatasync releases the GIL, mmap.flush does not

    def _pos(self, time_ms: int) -> int:
        return ((time_ms // self.precision_ms) % self.slot_count) * _SLOT.size

    def get(self, time_ms: int) -> Slot | None:
        stamp, first, last, num, magic = _SLOT.unpack_from(self._map, self._pos(time_ms))
        if num <= 0 or stamp != time_ms // self.precision_ms:
            return None
        return Slot(stamp * self.precision_ms, first, last, num, magic)

    def put(self, time_ms: int, first_pos: int, last_pos: int, num: int, magic: int = 0) -> None:
        _SLOT.pack_into(self._map, self._pos(time_ms), time_ms // self.precision_ms, first_pos, last_pos, num, magic)

    def units_after(self, time_ms: int) -> int:
        """How many units the slots after ``time_ms`` hold (a scan of the whole
        file, run at every start: 64 KiB runs of never-written slots, most of
        the file, are skipped with one compare instead of 2048 unpacks)."""
        after = time_ms // self.precision_ms
        mm = self._map
        total = 0
        for start in range(0, len(mm), _SCAN_BYTES):
            chunk = mm[start : start + _SCAN_BYTES]
            if chunk == _ZERO_SCAN[: len(chunk)]:
                continue
            total += sum(num for stamp, _, _, num, _ in _SLOT.iter_unpack(chunk) if num > 0 and stamp > after)
            time.sleep(0)  # runs in a worker thread: let the event loop have the GIL between runs
        return total

    def clear(self, time_ms: int) -> None:
        _SLOT.pack_into(self._map, self._pos(time_ms), 0, -1, -1, 0, 0)

    def flush(self) -> None:
        os.fdatasync(self._fd)  # writes the pages dirtied through the map

    def close(self) -> None:
        self.flush()
        self._map.close()
        os.close(self._fd)


def _plausible(buf, pos: int) -> bool:
    """A unit written whole: known magic bits, a real commit-log entry."""
    _, _, magic, _, _, offset_py, size_py, _, _ = _UNIT.unpack_from(buf, pos)
    return 0 < magic <= (MAGIC_DEFAULT | MAGIC_ROLL | MAGIC_DELETE) and offset_py >= 0 and size_py > 0


class TimerLog:
    """Append-only 52-byte units in fixed-size segment files."""

    def __init__(self, directory: Path, file_size: int):
        if file_size < UNIT_SIZE + BLANK_SIZE:
            raise ValueError(f"timer log file size {file_size} cannot hold a unit")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.file_size = file_size
        self._files: dict[int, mmap.mmap] = {}
        self._fds: dict[int, int] = {}  # kept for flush (fdatasync releases the GIL, mmap.flush does not)
        starts = sorted(int(p.name) for p in self.dir.iterdir() if p.name.isdigit() and len(p.name) == 20)
        for start in starts:
            self._files[start] = self._open(start)
        self.write_pos = self._recover(starts[-1]) if starts else 0

    def _path(self, start: int) -> Path:
        return self.dir / f"{start:020d}"

    def _open(self, start: int) -> mmap.mmap:
        fd = _open_allocated(self._path(start), self.file_size)
        try:
            m = mmap.mmap(fd, self.file_size)
        except BaseException:
            os.close(fd)
            raise
        self._fds[start] = fd
        return m

    def _recover(self, start: int) -> int:
        """Write position after the last whole unit of the last file."""
        m = self._files[start]
        pos = 0
        while pos + 4 <= self.file_size:
            (size,) = struct.unpack_from(">i", m, pos)
            if size == UNIT_SIZE and pos + UNIT_SIZE <= self.file_size and _plausible(m, pos):
                pos += UNIT_SIZE
                continue
            if pos + BLANK_SIZE <= self.file_size and _BLANK.unpack_from(m, pos)[2] == BLANK_MAGIC and size == self.file_size - pos:
                return start + self.file_size
            break
        m[pos : min(pos + UNIT_SIZE, self.file_size)] = bytes(min(UNIT_SIZE, self.file_size - pos))
        return start + pos

    def append(self, prev_pos: int, magic: int, write_time_ms: int, delayed_ms: int,
               offset_py: int, size_py: int, topic_hash: int) -> int:
        start = self.write_pos - self.write_pos % self.file_size
        within = self.write_pos - start
        if start not in self._files:
            self._files[start] = self._open(start)
        if self.file_size - within < UNIT_SIZE + BLANK_SIZE:
            _BLANK.pack_into(self._files[start], within, self.file_size - within, 0, BLANK_MAGIC)
            start += self.file_size
            within = 0
            self._files[start] = self._open(start)
        _UNIT.pack_into(self._files[start], within, UNIT_SIZE, prev_pos, magic, write_time_ms,
                        delayed_ms, offset_py, size_py, topic_hash, 0)
        pos = start + within
        self.write_pos = pos + UNIT_SIZE
        return pos

    def read(self, pos: int) -> TimerUnit:
        start = pos - pos % self.file_size
        m = self._files.get(start)
        if m is None or pos % self.file_size + UNIT_SIZE > self.file_size:
            raise ValueError(f"no timer log unit at {pos}")
        size, prev, magic, wt, delayed, off, sz, th, _ = _UNIT.unpack_from(m, pos - start)
        if size != UNIT_SIZE:
            raise ValueError(f"corrupt timer log unit at {pos} in {self._path(start)}")
        return TimerUnit(pos, prev, magic, wt, delayed, off, sz, th)

    def last_write_ms(self, start: int) -> int | None:
        """``currWriteTimeMs`` of the last unit of a full file; None for the
        file being written or one whose last unit is not whole."""
        m = self._files.get(start)
        if m is None or start + self.file_size > self.write_pos:
            return None
        pos = (self.file_size - UNIT_SIZE - BLANK_SIZE) // UNIT_SIZE * UNIT_SIZE  # where append put the last unit
        if not _plausible(m, pos):
            return None
        return _UNIT.unpack_from(m, pos)[3]

    def delete_written_before(self, time_ms: int) -> list[str]:
        """Delete the full files whose last unit was written at or before
        ``time_ms`` (units are written in time order); returns their names."""
        gone = []
        for start in sorted(self._files):
            written = self.last_write_ms(start)
            if written is None or written > time_ms:
                break
            self._files.pop(start).close()
            os.close(self._fds.pop(start))
            self._path(start).unlink(missing_ok=True)
            gone.append(self._path(start).name)
        return gone

    def delete_before(self, pos: int) -> None:
        """Drop whole files that end at or before ``pos`` (all their slots fired)."""
        for start in sorted(self._files):
            if start + self.file_size <= pos and start + self.file_size <= self.write_pos - self.write_pos % self.file_size:
                self._files.pop(start).close()
                os.close(self._fds.pop(start))
                self._path(start).unlink(missing_ok=True)

    def flush(self) -> None:
        for fd in list(self._fds.values()):  # a copy: the trio thread may open a file meanwhile
            os.fdatasync(fd)

    def close(self) -> None:
        self.flush()
        for m in self._files.values():
            m.close()
        for fd in self._fds.values():
            os.close(fd)
        self._files.clear()
        self._fds.clear()


@dataclass
class TimerCheckpoint:
    path: Path
    last_read_time_ms: int = 0
    last_timerlog_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    timestamp: int = 0
    counter: int = 0
    fired_through_ms: int = 0
    fired_through_pos: int = 0
    precision_ms: int = 0
    slots_total: int = 0

    @classmethod
    def load(cls, path: Path) -> "TimerCheckpoint":
        path = Path(path)
        cp = cls(path)
        if path.exists() and path.stat().st_size >= _CHECKPOINT.size:
            (cp.last_read_time_ms, cp.last_timerlog_flush_pos, cp.last_timer_queue_offset,
             cp.master_timer_queue_offset, cp.state_version, cp.timestamp, cp.counter, cp.fired_through_ms,
             cp.fired_through_pos, cp.precision_ms, cp.slots_total) = _CHECKPOINT.unpack_from(path.read_bytes())
        return cp

    def save(self) -> None:
        """Write the 4 KiB page to a temp file, fsync, rename: never half-written."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = _CHECKPOINT.pack(self.last_read_time_ms, self.last_timerlog_flush_pos, self.last_timer_queue_offset,
                                self.master_timer_queue_offset, self.state_version, self.timestamp, self.counter,
                                self.fired_through_ms, self.fired_through_pos, self.precision_ms, self.slots_total)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(data.ljust(4096, b"\0"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


class TimerWheelStore:
    """When each timer entry is due: the wheel, the log and their checkpoint.

    ``schedule`` files a commit-log entry (``offset_py``/``size_py``) under its
    slot; ``due(slot_time)`` returns the units of one slot in the order they
    were scheduled. The caller owns the clock and the read position
    (``checkpoint.last_read_time_ms``): a target at or before a slot already
    read must be delivered by the caller at once, not scheduled.
    """

    def __init__(self, root: Path, *, precision_ms: int = 1000, slots_total: int = 7 * 86400,
                 roll_window_slots: int | None = None, timerlog_file_size: int = 100 * 1024 * 1024):
        self.root = Path(root)
        self.checkpoint = cp = TimerCheckpoint.load(self.root / "config" / "timercheck")
        self.precision_ms = normalise_precision(precision_ms)
        self.slots_total = slots_total
        self.layout_note = ""  # why the wheel keeps another layout than asked, if it does
        self.wheel = self._open_wheel(cp)
        cp.precision_ms, cp.slots_total = self.precision_ms, self.slots_total
        slots_total = self.slots_total
        window = 2 * 86400 if roll_window_slots is None else roll_window_slots
        self.roll_window_slots = max(1, min(window, slots_total - ROLL_WINDOW_MARGIN_SLOTS if slots_total > 120 else slots_total // 2))
        self.log = TimerLog(self.root / "timerlog", timerlog_file_size)

    def _open_wheel(self, cp: TimerCheckpoint) -> TimerWheel:
        """The wheel file in the layout asked for, or, while it still holds
        timers that have not fired, in the layout they were filed in (a slot's
        place depends on precision and slot count: read in another layout,
        they would never be found). The new layout applies at the first start
        with none left; ``layout_note`` says which it is."""
        path = self.root / "timerwheel"
        old = (cp.precision_ms, cp.slots_total)
        if 0 in old or old == (self.precision_ms, self.slots_total) or not path.exists():
            return TimerWheel(path, self.slots_total, self.precision_ms)
        wheel = TimerWheel(path, cp.slots_total, cp.precision_ms)
        left = wheel.units_after(cp.last_read_time_ms)
        if left:
            self.layout_note = (f"the timer wheel keeps precision {cp.precision_ms} ms and {cp.slots_total} slots "
                                f"(asked: {self.precision_ms} ms, {self.slots_total} slots) while {left} timer(s) "
                                f"filed in it have not fired; the new layout applies at the first start after that")
            self.precision_ms, self.slots_total = cp.precision_ms, cp.slots_total
            return wheel
        wheel.close()
        path.unlink()  # nothing left to fire in it: a fresh file in the new layout
        return TimerWheel(path, self.slots_total, self.precision_ms)

    @property
    def roll_window_ms(self) -> int:
        return self.roll_window_slots * self.precision_ms

    def slot_time(self, target_ms: int) -> int:
        p = self.precision_ms
        return -(-target_ms // p) * p

    def schedule(self, target_ms: int, now_ms: int, offset_py: int, size_py: int) -> int:
        """File one entry; returns the slot time it will fire at."""
        return self.schedule_many([(offset_py, size_py, target_ms)], now_ms)[0]

    def schedule_many(self, units: list[tuple[int, int, int]], now_ms: int) -> list[int]:
        """File ``(offset_py, size_py, target_ms)`` entries (the timer queue's
        units as `MessageStore.read_units` gives them); returns each one's slot
        time. A delay at or beyond the roll window is parked at ``now + window``
        (half the window when the excess is under a third of it) with the ROLL
        bit. Slot records are written once per slot, after its units."""
        window = self.roll_window_ms
        p = self.precision_ms
        log = self.log
        wheel = self.wheel
        slots: dict[int, list[int]] = {}  # slot time -> [first_pos, last_pos, num] while filing
        out: list[int] = []
        put = out.append
        for offset_py, size_py, target_ms in units:
            delay = target_ms - now_ms
            if delay >= window:
                magic = MAGIC_DEFAULT | MAGIC_ROLL
                park = window // 2 if delay - window < window // 3 else window
                fire_at = -(-(now_ms + park) // p) * p  # slot_time, inlined
            else:
                magic = MAGIC_DEFAULT
                fire_at = -(-(target_ms if target_ms > now_ms else now_ms) // p) * p
            state = slots.get(fire_at)
            if state is None:
                slot = wheel.get(fire_at)
                state = slots[fire_at] = [slot.first_pos, slot.last_pos, slot.num] if slot else [-1, -1, 0]
            if not -_INT32 <= delay < _INT32:  # the unit's delay field is an int32 of ms; the slot says when it fires
                delay = MAX_DELAY_FIELD_MS if delay > 0 else -_INT32  # (a far roll, or a garbage target replayed from an old log)
            pos = log.append(state[1], magic, now_ms, delay, offset_py, size_py, 0)
            if state[2] == 0:
                state[0] = pos
            state[1] = pos
            state[2] += 1
            put(fire_at)
        for fire_at, (first, last, num) in slots.items():
            wheel.put(fire_at, first, last, num)
        return out

    def due(self, slot_time: int) -> list[TimerUnit]:
        """The units filed under ``slot_time``, in the order they were scheduled.

        Slots are not cleared when read: which slots have fired is the
        checkpoint's ``last_read_time_ms``, so a crash between reading a slot
        and storing its messages loses nothing (the slot is read again).
        A slot from an earlier lap of the wheel reads as empty.
        """
        slot = self.wheel.get(slot_time)
        if slot is None:
            return []
        units = []
        pos = slot.last_pos
        while pos >= 0 and len(units) < slot.num:
            u = self.log.read(pos)
            units.append(u)
            if pos == slot.first_pos:
                break
            pos = u.prev_pos
        units.reverse()
        return units

    def clean(self, read_time_ms: int) -> list[str]:
        """Delete timer log files no unfired slot points into: every slot up to
        ``read_time_ms`` has fired (the checkpoint's ``last_read_time_ms``), and
        a unit's slot is at most one roll window and one precision after its
        write time. The margin kept is a whole lap of the wheel
        (``slots_total`` slots, longer than any roll window, whatever the window
        was when the unit was written), so a wall clock stepping back by less
        than lap - window (5 days by default) cannot make a file look done
        early. Call it only while no `flush` runs (it closes files)."""
        return self.log.delete_written_before(read_time_ms - (self.slots_total + 1) * self.precision_ms)

    def flush(self) -> None:
        self.log.flush()
        self.wheel.flush()
        self.checkpoint.last_timerlog_flush_pos = self.log.write_pos
        self.checkpoint.save()

    def close(self) -> None:
        self.flush()
        self.log.close()
        self.wheel.close()
