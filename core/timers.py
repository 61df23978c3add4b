"""Timer messages of any delay: RocketMQ 5's timer wheel, driven by trio.

A message asks for later delivery with one of these properties (checked in
this order, like RocketMQ 5's ``HookUtils``): ``TIMER_DELAY_SEC``,
``TIMER_DELAY_MS``, ``TIMER_DELIVER_MS`` (absolute ms), or the ONS-style
``__STARTDELIVERTIME`` (absolute ms; open-source RocketMQ ignores it, we
honour it). A 4.x ``DELAY`` level wins over all of them (the level path
handles it and the timer properties are dropped).

The path of one timer message:

1. put hook (`TimerMessageService.put_hook`): a due time in the future is
   refused beyond ``timerMaxDelaySec`` (MESSAGE_ILLEGAL with a reason);
   otherwise the message is re-targeted to topic ``rmq_sys_wheel_timer``
   queue 0 with ``TIMER_OUT_MS``, ``REAL_TOPIC`` and ``REAL_QID`` and
   stored like any message (so it is durable and replicated).
2. enqueue: the service reads that queue's 20-byte units from its
   checkpointed offset (their tags code is the due time, see
   `core.store.message.queue_tags_code`) and files each in the wheel
   (`core.store.timer_wheel.TimerWheelStore`), without reading the log.
3. dequeue: one precision before each slot time it takes the slot's units
   into an in-memory heap ordered by due time, and at each timer's own due
   time (never before) reads it back from the commit log and sends it to
   its real topic and queue (timer properties
   removed, ``TIMER_ENQUEUE_MS`` / ``TIMER_DEQUEUE_MS`` added), or, for a
   ROLL unit (a delay beyond the wheel's window), back into the timer topic
   with ``TIMER_ROLL_TIMES`` + 1.

Rules kept here:
- One task does enqueue and dequeue, so the two never race.
- The checkpoint (``config/timercheck``) advances only after the messages
  of a slot are stored (durable when the broker is SYNC_FLUSH), and the
  timer queue offset only after the wheel and log are flushed; after a
  crash the service replays from there. A timer may fire twice around a
  crash (same UNIQ_KEY); none is lost. A slot fires over its whole
  precision, so the checkpoint also says up to which time (and timer log
  position) its timers are stored (`_fired_through`): after a clean stop
  none fires twice.
- A delivery the broker refuses is tried again: every second for as long
  as it takes when the refusal is about the broker's state (stopping, a
  slave, no write permission: nothing fires meanwhile, and the checkpoint
  waits for it); 16 times, after 0.5 s then twice as long each time (at
  most a minute), when it is about the topic or the disk (a topic made
  read-only, shrunk or deleted; a file it cannot make), filed again in the
  wheel for that time like a new timer (so the checkpoint moves on and a
  restart keeps it), then dropped and logged; MESSAGE_ILLEGAL drops it at
  once. Other timers fire on time meanwhile. A stored batch is booked even
  when the service is being cancelled.
- Producers cannot send to ``rmq_sys_wheel_timer`` themselves
  (NO_PERMISSION): an entry there names its own real topic and due time.
- A timer whose slot has already been taken still goes to the wheel (for
  replay) and joins the heap; ``_read_time`` (what the checkpoint saves) stays
  before the earliest slot with a timer not yet stored.
- The loop fires at most one batch per turn and files new timers between
  batches: a filing backlog would make timers late.
- The clock is injectable (``now_ms``) so tests can drive it with trio's
  MockClock; sleeping always uses trio's clock.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import trio

from core.broker import Broker, SendResult, SendStatus
from core.store.message import (
    PROPERTY_DELAY, PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, PROPERTY_TIMER_OUT_MS, TIMER_TOPIC, TIMER_TRIGGERS, TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, Message, message_from_entry,
)
from core.store.timer_wheel import MAGIC_ROLL, TimerWheelStore

log = logging.getLogger(__name__)

TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS, START_DELIVER_TIME = TIMER_TRIGGERS
TIMER_OUT_MS = PROPERTY_TIMER_OUT_MS
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
_HALF_TYPES = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
_TRIGGER_SCALES = ((TIMER_DELAY_SEC, 1000), (TIMER_DELAY_MS, 1), (TIMER_DELIVER_MS, 0), (START_DELIVER_TIME, 0))  # 0: absolute
_ENQUEUE_BATCH = 4096
_FILE_RETRY_S = 1.0  # after a timer log file the disk could not give
_FIRE_BATCH = 1 << 20  # when behind, fire everything due in one go: firing goes before new sends
_RETRY_STATE_S = 1.0  # a timer refused because of the broker's state is tried again this often
_RETRY_FIRST_S = 0.5  # one refused because of its topic or the disk: after this, then twice as long each time
_RETRY_MAX_S = 60.0
_RETRY_TIMES = 16  # for refusals not about the broker's state (a topic made read-only, shrunk or deleted): ~9 min


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class TimerConfig:
    """RocketMQ 5 names: timerWheelEnable, timerPrecisionMs, timerMaxDelaySec,
    timerRollWindowSlot; ``slots_total`` is the wheel's slot count per lap."""

    enabled: bool = True
    precision_ms: int = 1000
    max_delay_s: int = 3 * 86400
    slots_total: int = 7 * 86400
    roll_window_slots: int | None = None
    timerlog_file_size: int = 100 * 1024 * 1024
    checkpoint_interval_s: float = 1.0  # how often progress is saved (a crash may re-fire up to this much)


IDLE_SAVE_S = 60.0  # how often an idle wheel's progress is saved (`TimerMessageService._idle_since_save`)


class TimerError(ValueError):
    """The timer properties of a message cannot be honoured; the text says why."""


def due_time_ms(props: dict[str, str], now_ms: int) -> int | None:
    """The requested delivery time, or None if the message is not a timer message
    (the first of ``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS``, ``TIMER_DELIVER_MS``,
    ``__STARTDELIVERTIME`` present decides)."""
    for key, scale in _TRIGGER_SCALES:
        raw = props.get(key)
        if raw is None:
            continue
        try:
            value = int(raw)
        except ValueError:
            raise TimerError(f"property {key}={raw!r} is not an integer") from None
        return now_ms + value * scale if scale else value
    return None


class TimerMessageService:
    """Owns the wheel; `install` puts `put_hook` on the broker, `run` goes in its nursery."""

    def __init__(self, broker: Broker, config: TimerConfig = TimerConfig(), *,
                 now_ms: Callable[[], int] = wall_clock_ms, root: Path | None = None):
        self.broker = broker
        self.config = config
        self.now_ms = now_ms
        self.root = Path(root) if root is not None else broker.root
        self.wheel: TimerWheelStore | None = None
        self._queue_offset = 0
        self._read_time = 0  # every slot up to this time has its messages stored
        self._taken = 0  # every slot up to this time has been read out of the wheel into _pending
        self._pending: list[tuple[int, int, int, bool, int]] = []  # heap of (due, offset, size, roll, slot)
        self._outstanding: dict[int, int] = {}  # slot time -> timers of it in _pending or being stored
        self._delivering: int | None = None  # the earliest heap key of the batch being stored
        self._retry: list[tuple[int, tuple]] = []  # heap of (try again at, item): refused by the broker's state
        self._attempts: dict[int, int] = {}  # commit log offset -> deliveries refused for its topic (`_fire_due`)
        self._stored_through = (0, 0)  # from the checkpoint: (time, log position), see `_fired_through`
        self._wake = trio.Event()
        # what the last saved checkpoint held: (trio time of the save, timer queue offset, timer log
        # end, timers pending); None before the first save of this run
        self._saved: tuple[float, int, int, int] | None = None
        self.fired = 0
        self.rolled = 0
        self.scheduled = 0
        self.refused = 0
        self._max_delay_ms = config.max_delay_s * 1000

    # ---------------------------------------------------------------- put path

    def install(self) -> None:
        """Make the broker park timer messages (call once, before sends). The
        hook runs only on messages that ask for a timer."""
        self.broker.add_put_hook(self.put_hook, when=TIMER_TRIGGERS)

    def put_hook(self, msg: Message) -> SendResult | None:
        props = msg.properties
        if props.keys().isdisjoint(TIMER_TRIGGERS) or msg.topic == TIMER_TOPIC:  # every send comes here: kept cheap
            return None
        if props.get(PROPERTY_DELAY, "0") not in ("", "0"):
            for k in TIMER_TRIGGERS:  # the 4.x delay level wins
                props.pop(k, None)
            return None
        if msg.sysflag & TRANSACTION_MASK in _HALF_TYPES:
            return None  # half messages are parked by the transaction path, timers apply at commit
        now = self.now_ms()
        try:
            due = due_time_ms(props, now)
        except TimerError as e:
            return self._refuse(msg, str(e))
        for k in TIMER_TRIGGERS:
            props.pop(k, None)
        if due <= now:
            return None
        if not self.config.enabled:
            return self._refuse(msg, "timer messages are not enabled on this broker (timerWheelEnable=false)")
        if due - now > self._max_delay_ms:
            return self._refuse(msg, f"delivery {(due - now) // 1000} s ahead exceeds timerMaxDelaySec "
                                     f"{self.config.max_delay_s}")
        props[TIMER_OUT_MS] = str(due)
        props[PROPERTY_REAL_TOPIC] = msg.topic
        props[PROPERTY_REAL_QID] = str(msg.queue_id)
        msg.topic = TIMER_TOPIC
        msg.queue_id = 0
        return None

    def _refuse(self, msg: Message, reason: str) -> SendResult:
        self.refused += 1
        return SendResult(SendStatus.MESSAGE_ILLEGAL, topic=msg.topic, remark=reason)

    # ---------------------------------------------------------------- service

    @property
    def pending(self) -> int:
        """Timers filed and not yet fired (rolls count once): counted from the
        wheel at start, then up at each filing and down at each firing."""
        return max(0, self.wheel.checkpoint.counter) if self.wheel else 0

    @property
    def filed_through(self) -> int:
        """The offset in the timer queue up to which its units are filed in the wheel."""
        return self._queue_offset

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        cfg = self.config
        self.wheel = await trio.to_thread.run_sync(lambda: TimerWheelStore(
            self.root, precision_ms=cfg.precision_ms, slots_total=cfg.slots_total,
            roll_window_slots=cfg.roll_window_slots, timerlog_file_size=cfg.timerlog_file_size))
        cp = self.wheel.checkpoint
        precision = self.wheel.precision_ms
        self._queue_offset = cp.last_timer_queue_offset
        now = self.now_ms()
        if self.wheel.layout_note:
            log.warning("%s", self.wheel.layout_note)
        self._read_time = (cp.last_read_time_ms or now) // precision * precision  # on the grid, if precision changed
        self._taken = self._read_time
        self._stored_through = (cp.fired_through_ms, cp.fired_through_pos)
        # filed and not fired, counted afresh from the slots this run will read: after a crash the saved
        # count is stale (timers fired since it was saved fire again, and are counted down again)
        cp.counter = await trio.to_thread.run_sync(self.wheel.wheel.units_after, self._read_time)
        await self.broker.ensure_topic(TIMER_TOPIC, 1)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._checkpoint_loop)
                task_status.started(self)
                while True:
                    await self._enqueue_new()
                    await self._fire_due()
                    next_at = self._taken  # the next slot is taken when its earliest possible due time comes
                    if self._pending and self._pending[0][0] < next_at:
                        next_at = self._pending[0][0]
                    if self._retry and self._retry[0][0] < next_at:
                        next_at = self._retry[0][0]
                    wait_s = max(0.0, (next_at - self.now_ms()) / 1000)
                    with trio.move_on_after(wait_s):
                        await self.broker.wait_for_messages(TIMER_TOPIC, 0, self._queue_offset)
        finally:
            with trio.CancelScope(shield=True):
                await self._checkpoint(force=True)
                await trio.to_thread.run_sync(self.wheel.close)

    async def _checkpoint_loop(self) -> None:
        """Save progress every interval, in its own task: the firing loop never waits on a disk."""
        while True:
            await trio.sleep(self.config.checkpoint_interval_s)
            await self._checkpoint()

    async def _enqueue_new(self) -> None:
        """File every new entry of the timer queue in the wheel.

        The due time is the unit's tags code (`queue_tags_code`), so filing
        reads 20-byte units only, never the log.
        """
        wheel = self.wheel
        store = self.broker.store
        while True:
            units, next_offset = store.read_units(TIMER_TOPIC, 0, self._queue_offset, _ENQUEUE_BATCH)
            if next_offset == self._queue_offset:
                await trio.lowlevel.checkpoint()
                return
            if not units:  # every unit of the batch gone (retention) or blank: nothing to file, move past
                self._queue_offset = next_offset
                continue
            taken = self._taken
            # every unit goes to the wheel (a crash replays unfired slots from there); one whose slot
            # is already taken also joins the in-memory queue, to fire at its due time
            try:
                slots = wheel.schedule_many(units, self.now_ms())
            except OSError as e:
                # A timer log file the disk cannot give (full disk, I/O error): the
                # units stay in the timer queue, filed again on a later round.
                log.error("cannot file %d timer(s) in the timer log, trying again in %.0f s: %s",
                          len(units), _FILE_RETRY_S, e)
                await trio.sleep(_FILE_RETRY_S)
                return
            if min(slots) <= taken:
                for (phys, size, due), slot in zip(units, slots):
                    if slot <= taken:
                        self._add_pending(due, phys, size, False, slot)
            self.scheduled += len(units)
            wheel.checkpoint.counter += len(units)
            self._queue_offset = next_offset
            # no yield between batches: filing keeps up with the senders (a backlog here fires late)

    def _add_pending(self, due: int, offset: int, size: int, roll: bool, slot: int) -> None:
        heapq.heappush(self._pending, (due, offset, size, roll, slot))
        self._outstanding[slot] = self._outstanding.get(slot, 0) + 1
        self._update_read_time()

    def _fired_through(self) -> int:
        """A time such that every timer taken out of the wheel with a heap key
        (due time; slot start for a roll) up to it has been stored: the heap
        fires in key order, and slots not taken yet hold only later keys. A
        slot fires over its whole precision, so after a restart this, not
        ``_read_time``, tells which of a part-fired slot's timers are done."""
        through = self._taken
        if self._pending and self._pending[0][0] < through:
            through = self._pending[0][0]
        if self._delivering is not None and self._delivering < through:
            through = self._delivering
        for _, item in self._retry:
            if item[0] < through:
                through = item[0]
        return through - 1

    def _update_read_time(self) -> None:
        """Slots before the earliest one with a timer not yet stored are done (what the checkpoint saves)."""
        out = self._outstanding
        self._read_time = (min(out) - self.wheel.precision_ms) if out else self._taken

    async def _fire_due(self) -> None:
        """Take slots out of the wheel one precision ahead, and store each timer at its due time.

        A slot at time S holds the timers due in (S - precision, S]; it is read
        into a heap when the clock reaches S - precision, and each timer is
        stored as soon as the clock reaches its own due time: never early, and
        late only by the time the loop takes (not by the precision). A ROLL
        unit is sent on when its slot is taken.
        """
        wheel = self.wheel
        precision = wheel.precision_ms
        pending = self._pending
        pop = heapq.heappop
        while True:
            now = self.now_ms()
            while self._taken <= now:
                slot = self._taken + precision
                try:
                    units = wheel.due(slot)
                except ValueError as e:  # a unit the timer log no longer holds: say so, keep serving the others
                    log.error("timer slot %d cannot be read, its timers are skipped: %s", slot, e)
                    lost = wheel.wheel.get(slot)
                    wheel.checkpoint.counter -= lost.num if lost else 0
                    units = []
                if units:
                    push = heapq.heappush
                    stored_ms, stored_pos = self._stored_through
                    n = 0
                    for u in units:
                        roll = bool(u.magic & MAGIC_ROLL)
                        key = slot - precision if roll else u.write_time_ms + u.delayed_ms
                        if key <= stored_ms and u.pos < stored_pos and slot - precision <= stored_ms:
                            wheel.checkpoint.counter -= 1
                            continue  # stored before the last checkpoint (a slot fires over its whole precision)
                        push(pending, (key, u.offset_py, u.size_py, roll, slot))
                        n += 1
                    if n:
                        self._outstanding[slot] = self._outstanding.get(slot, 0) + n
                self._taken = slot
            self._update_read_time()
            retry = self._retry
            if (not pending or pending[0][0] > now) and (not retry or retry[0][0] > now):
                return
            batch = []
            while retry and retry[0][0] <= now:
                batch.append(heapq.heappop(retry)[1])
            earliest = min(item[0] for item in batch) if batch else None
            first_new = len(batch)
            while pending and pending[0][0] <= now and len(batch) < _FIRE_BATCH:
                batch.append(pop(pending))
            if len(batch) > first_new and (earliest is None or batch[first_new][0] < earliest):
                earliest = batch[first_new][0]  # the heap pops in key order
            self._delivering = earliest
            with trio.CancelScope(shield=True):  # a stored batch is booked before shutdown (bounded by the flush wait)
                refused = await self._deliver(batch)
            self._delivering = None
            out = self._outstanding
            for item in batch:
                if refused and item in refused:
                    if refused[item] or item[3]:  # the broker's state (the only refusal a roll meets): in memory,
                        heapq.heappush(retry, (now + int(1000 * _RETRY_STATE_S), item))  # its slot kept outstanding
                        continue
                    self._retry_later(item, now)
                slot = item[4]
                left = out[slot] - 1
                if left:
                    out[slot] = left
                else:
                    del out[slot]
            self._update_read_time()
            return  # one batch a turn: the caller files new timers between batches, so none is filed late

    def _retry_later(self, item: tuple[int, int, int, bool, int], now: int) -> None:
        """A delivery refused for its topic or the disk: file the entry again
        for a later time (growing pauses), or drop it after `_RETRY_TIMES`."""
        _key, offset, size, _roll, _slot = item
        n = self._attempts.pop(offset, 0) + 1
        if n >= _RETRY_TIMES:
            log.error("timer entry at commit log offset %d dropped after %d refused deliveries", offset, n)
            self.wheel.checkpoint.counter -= 1
            return
        self._attempts[offset] = n
        at = now + int(1000 * min(_RETRY_MAX_S, _RETRY_FIRST_S * 2 ** (n - 1)))
        slot = self.wheel.schedule_many([(offset, size, at)], now)[0]  # a new unit (counted: the old one is done)
        if slot <= self._taken:
            self._add_pending(at, offset, size, False, slot)

    async def _deliver(self, items: list[tuple[int, int, int, bool, int]]) -> dict[tuple, bool]:
        """Store the real messages of fired timers (or roll them on); one flush wait.
        Returns the items the broker refused, to be tried again (like RocketMQ's
        PUT_NEED_RETRY), each with whether the refusal is about the broker's
        state (not running, a slave, no write permission: tried until it
        passes) or about the message's topic or the disk (tried `_RETRY_TIMES`
        times). MESSAGE_ILLEGAL is for good: logged and dropped."""
        out: list[tuple[Message, int | None]] = []
        sent = []
        now_text = str(self.now_ms())
        for item in items:
            offset, roll = item[1], item[3]
            raw = self.broker.store.read_at(offset)  # page-cache read: inline, no thread
            if raw is None:
                log.error("timer entry at commit log offset %d is gone (retention?); it cannot fire", offset)
                self.wheel.checkpoint.counter -= 1
                continue
            msg, store_ts = message_from_entry(raw)
            props = msg.properties
            sent.append(item)
            if roll:
                props[TIMER_ROLL_TIMES] = str(int(props.get(TIMER_ROLL_TIMES, "0")) + 1)
                msg.topic, msg.queue_id = TIMER_TOPIC, 0
                out.append((msg, 0))
                continue
            msg.topic = props.pop(PROPERTY_REAL_TOPIC, msg.topic)
            qid = int(props.pop(PROPERTY_REAL_QID, "0"))
            props[TIMER_ENQUEUE_MS] = str(store_ts)
            props[TIMER_DEQUEUE_MS] = now_text
            out.append((msg, qid))
        if not out:
            return {}
        results = await self.broker.send_many(out, internal=True)
        refused: dict[tuple, bool] = {}
        counter = self.wheel.checkpoint
        for item, (msg, _), r in zip(sent, out, results):
            if r.ok:
                if item[3]:
                    self.rolled += 1
                else:
                    self.fired += 1
                counter.counter -= 1  # a roll is counted again when re-enqueued
                if self._attempts:
                    self._attempts.pop(item[1], None)
            elif r.status is SendStatus.MESSAGE_ILLEGAL:
                log.error("timer delivery to %s refused for good, dropped: %s", msg.topic, r.remark)
                counter.counter -= 1
                self._attempts.pop(item[1], None)
            else:
                if not refused:
                    log.warning("timer delivery to %s refused (%s %s), tried again later", msg.topic, r.status.name, r.remark)
                refused[item] = r.status is SendStatus.SERVICE_NOT_AVAILABLE or not self.broker.writable()
        if len(refused) > 1:
            log.warning("%d timer deliveries of this batch refused, tried again later", len(refused))
        return refused

    def _idle_since_save(self) -> bool:
        """Nothing filed, pending or in flight now or at the last save, and
        nothing filed since: only the clock has moved. A crash then re-reads
        at most ``IDLE_SAVE_S`` of empty slots, and fires nothing twice (none
        was filed)."""
        saved = self._saved
        if saved is None or trio.current_time() - saved[0] >= IDLE_SAVE_S:
            return False
        wheel = self.wheel
        return (saved[3] == 0 and wheel.checkpoint.counter == 0 and not self._pending and not self._retry
                and self._delivering is None and saved[1] == self._queue_offset and saved[2] == wheel.log.write_pos)

    async def _checkpoint(self, *, force: bool = False) -> None:
        """Flush the wheel and log, then record how far enqueue and firing got.

        The positions are taken *before* the flush, so the saved checkpoint
        never claims more than what is on disk. An idle wheel (see
        `_idle_since_save`) is saved every ``IDLE_SAVE_S`` only, not every
        interval: a broker with no timers writes nothing each second.
        """
        wheel = self.wheel
        if wheel is None or (not force and self._idle_since_save()):
            return
        saving = (trio.current_time(), self._queue_offset, wheel.log.write_pos, wheel.checkpoint.counter)
        snapshot = dataclasses.replace(wheel.checkpoint, last_timer_queue_offset=self._queue_offset,
                                       last_read_time_ms=self._read_time, timestamp=self.now_ms(),
                                       last_timerlog_flush_pos=wheel.log.write_pos,
                                       fired_through_ms=self._fired_through(), fired_through_pos=wheel.log.write_pos)

        def save() -> None:
            wheel.log.flush()
            wheel.wheel.flush()
            snapshot.save()

        try:
            await trio.to_thread.run_sync(save)
        except OSError as e:
            # A full disk (the temp file cannot be made) or an I/O error: progress
            # stays at the last saved checkpoint (a restart replays from there,
            # which is safe), and the next interval tries again.
            log.error("timer checkpoint not saved, will retry: %s", e)
            return
        self._saved = saving
        live = wheel.checkpoint  # what TimerWheelStore.close() saves last
        for name in ("last_timer_queue_offset", "last_read_time_ms", "timestamp", "fired_through_ms", "fired_through_pos"):
            setattr(live, name, getattr(snapshot, name))
        # here, in the trio thread with no flush running: timer log files every unit of which has fired
        gone = wheel.clean(snapshot.last_read_time_ms)
        if gone:
            log.info("timer log: deleted %d file(s) whose timers have all fired: %s", len(gone), ", ".join(gone))
