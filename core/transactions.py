"""Transactional messages, RocketMQ 4.x two-topic design (reference 7).

A producer sends a *half* message (``TRAN_MSG=true``, ``PGROUP``, sysFlag
0x4); it is parked, invisible, until END_TRANSACTION commits it (the real
message is stored) or rolls it back; a half nobody ends is *checked back*
with the producer group and finally rolled back.

Storage (all of it ordinary broker messages, so it is recovered and
replicated like any other):

- ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 holds halves: the original topic and
  queue in ``REAL_TOPIC`` / ``REAL_QID``, transaction bits reset to
  NOT_TYPE (a PREPARED entry would get no consume-queue unit). Before each
  check the half is appended again (a *copy*) with ``TRANSACTION_CHECK_TIMES``
  + 1 and ``TRAN_PREPARED_QUEUE_OFFSET`` = the queue offset of the first
  half of the transaction (its *origin*); so the check counter is durable
  and every copy names its transaction.
- ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0 holds one op message per ended
  transaction: tag ``d``, body = queue offset of the half (or copy) that
  was ended, decimal ASCII (4.9.x form).
- Progress, as consumer offsets of group ``CID_RMQ_SYS_TRANS``: on the half
  queue the *low-water mark* H (every half below H belongs to an ended
  transaction); on the op queue an offset O (every op below O names a
  transaction whose origin is below H). A restart reads halves from H and
  ops from O and rebuilds the pending set; pending halves are checked again.

Rules kept here:

- A half is a message with ``TRAN_MSG=true`` whose transaction bits are
  not COMMIT/ROLLBACK (Java decides by the property too). Its ``DELAY``
  and timer properties are held as ``TRAN_HELD_<name>`` while it is a half
  (else the delay and timer hooks would park a copy) and restored at
  commit, where they take effect, and in the check-back body.
- A transaction ends once: the first commit, rollback or discard wins;
  any later END_TRANSACTION for it (original or copy, from a check or not)
  changes nothing and is answered SUCCESS. Commit = the real message
  (REAL_TOPIC/REAL_QID, sysFlag COMMIT, ``preparedTransactionOffset`` =
  the half's commit-log offset, original born data, ``TRAN_MSG`` removed),
  then the op; rollback = the op only. A crash between the two can commit
  twice after the restart's check (at least once, as RocketMQ).
- Checks: first at ``transactionTimeOut`` after the half was stored (or
  ``CHECK_IMMUNITY_TIME_IN_SECONDS``, never less), then every
  ``transactionCheckInterval`` per transaction; each check re-appends the
  half and sends CHECK_TRANSACTION_STATE, oneway, to one live channel of
  the producer group (round robin). A check that finds no producer of the
  group connected is not made: no copy, not counted against
  ``transactionCheckMax``, tried again an interval later (a 5.x client can
  take minutes to reopen the stream checks travel on after a broker
  restart, and its application may well answer COMMIT); the broker logs
  that once per group per interval. A transaction already checked
  ``transactionCheckMax`` times, or older (born) than ``fileReservedTime``
  (as RocketMQ's needSkip; its log may be deleted then), is rolled back at
  its next due time (op message) and its half is also written to
  ``TRANS_CHECK_MAX_TIME_TOPIC`` for operators.
- Times: due times live on the trio clock. A half read as it arrives
  waits from the moment it is read; after a restart, the time since its
  store timestamp (wall-clock ms, ``wall_ms``) counts too.
- Op messages are written one at a time (a lock), so they are recorded in
  the order of their queue offsets and O never skips an unrecorded op.
- Memory: one entry per pending transaction, plus the ended ones and their
  ops above H (an old pending transaction holds H back: one whose producer
  stays away holds it for up to ``fileReservedTime``).
- The system topics (one queue each) are created when first used, as
  RocketMQ does; a slave runs no checks (its master does).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import trio

from core.broker import (
    SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, Broker, BrokerConfig, BrokerRole, SendResult,
)
from core.broker.topics import TRANS_CHECK_MAX_TIME_TOPIC
from core.remoting import RemotingCommand, RequestCode
from core.store.encoder import encode_message
from core.store.message import (
    PROPERTY_DELAY, PROPERTY_PGROUP, PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, PROPERTY_TAGS, PROPERTY_TRAN_MSG,
    PROPERTY_UNIQ_KEY, PROPERTY_WAIT, TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE, Message, StoredMessage, decode_message, offset_msg_id,
)
from core.timers import START_DELIVER_TIME, TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS, TIMER_OUT_MS, TIMER_TOPIC

__all__ = [
    "SYS_TRANS_GROUP", "OP_TAG", "PROPERTY_CHECK_TIMES", "PROPERTY_PREPARED_QUEUE_OFFSET", "PROPERTY_CHECK_IMMUNITY",
    "TransactionConfig", "TransactionService", "transaction_origin",
]

log = logging.getLogger("mqgate.transactions")

SYS_TRANS_GROUP = "CID_RMQ_SYS_TRANS"
OP_TAG = "d"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
HELD_PREFIX = "TRAN_HELD_"
_HELD = (PROPERTY_DELAY, TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS, START_DELIVER_TIME)
_READ_BATCH = 64


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class TransactionConfig:
    """``transactionTimeOut``, ``transactionCheckInterval`` (ms), ``transactionCheckMax``;
    ``max_age_ms``: ``fileReservedTime`` (0: no age limit)."""

    timeout_ms: int = 6000
    check_interval_ms: int = 60000
    check_max: int = 15
    max_age_ms: int = 72 * 3_600_000

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> "TransactionConfig":
        return cls(config.transaction_timeout, config.transaction_check_interval, config.transaction_check_max,
                   round(config.file_reserved_time * 3_600_000))


@dataclass(slots=True)
class PendingTransaction:
    origin: int  # half-queue offset of the first half
    queue_offset: int  # of the latest half (copy) of it
    physical_offset: int
    producer_group: str
    uniq_key: str
    check_times: int  # checks that reached a producer
    due: float  # trio time of the next check
    born_ms: int  # wall-clock ms the producer sent it (its store time when the producer gave none)


def transaction_origin(half: StoredMessage) -> int:
    """The half-queue offset naming the transaction of a half or of a copy."""
    raw = half.properties.get(PROPERTY_PREPARED_QUEUE_OFFSET)
    if raw is not None:
        try:
            return int(raw)
        except ValueError:
            pass
    return half.queue_offset


def _restore_held(props: dict[str, str]) -> dict[str, str]:
    for key in _HELD:
        value = props.pop(HELD_PREFIX + key, None)
        if value is not None:
            props[key] = value
    return props


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class TransactionService:
    """Half messages, END_TRANSACTION and check-back for one broker.

    ``install()`` puts the half hook on the broker (after the delay and timer
    hooks); ``run`` (``nursery.start``) loads the pending set and checks;
    `end_transaction` is what the END_TRANSACTION processor calls.
    ``producer_channels(group)`` gives the live connections of a producer
    group (from heartbeats): objects with ``closed`` and ``send_oneway(cmd)``.
    """

    def __init__(self, broker: Broker, config: TransactionConfig | None = None, *,
                 producer_channels: Callable[[str], Iterable[Any]] = lambda group: (),
                 wall_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.broker = broker
        self.config = config or TransactionConfig.from_broker(broker.config)
        self.producer_channels = producer_channels
        self.wall_ms = wall_ms
        self._pending: dict[int, PendingTransaction] = {}
        self._ended: set[int] = set()  # origins >= low that are ended
        self._ending: set[int] = set()  # origins being ended right now
        self._ops: deque[tuple[int, int]] = deque()  # (op queue offset, origin), origin >= low at the front
        self._op_next = 0  # op queue offset after the last op recorded
        self._op_lock = trio.Lock()
        self._low = 0  # H
        self._scan = 0  # next half-queue offset to read
        self._loaded = False
        self._wake = trio.Event()
        self._rr = itertools.count()
        self._unreachable_logged: dict[str, float] = {}  # producer group -> trio time of its last log line
        self.halves = 0  # new transactions seen since start
        self.committed = 0
        self.rolled_back = 0
        self.discarded = 0
        self.checks_sent = 0
        self.checks_unreachable = 0

    # ------------------------------------------------------------ put path

    def install(self) -> None:
        self.broker.add_put_hook(self.park_half, when=(PROPERTY_TRAN_MSG,))

    def park_half(self, msg: Message) -> None:
        """Put hook: a transactional message becomes a half in RMQ_SYS_TRANS_HALF_TOPIC queue 0."""
        props = msg.properties
        if props.get(PROPERTY_TRAN_MSG) != "true":  # the common case: this runs on every send
            return None
        if msg.sysflag & TRANSACTION_MASK in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return None
        if msg.topic in (TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC):  # our own copies
            return None
        if msg.topic in (SCHEDULE_TOPIC, TIMER_TOPIC) and PROPERTY_REAL_TOPIC in props:
            # an earlier hook parked it (the sender left out sysFlag 0x4): undo, the delay applies at commit
            msg.topic = props.pop(PROPERTY_REAL_TOPIC)
            msg.queue_id = _int(props.pop(PROPERTY_REAL_QID, None))
            if TIMER_OUT_MS in props:
                props[TIMER_DELIVER_MS] = props.pop(TIMER_OUT_MS)
        for key in _HELD:
            if key in props:
                props[HELD_PREFIX + key] = props.pop(key)
        props[PROPERTY_REAL_TOPIC] = msg.topic
        props[PROPERTY_REAL_QID] = str(msg.queue_id)
        msg.sysflag = (msg.sysflag & ~TRANSACTION_MASK) | TRANSACTION_NOT_TYPE
        msg.topic = TRANS_HALF_TOPIC
        msg.queue_id = 0
        return None

    # ------------------------------------------------------------ observability

    @property
    def pending(self) -> int:
        """Transactions neither committed nor rolled back yet."""
        return len(self._pending)

    def pending_transactions(self) -> list[PendingTransaction]:
        return sorted(self._pending.values(), key=lambda t: t.origin)

    @property
    def half_offset(self) -> int:
        """H: the half-queue offset below which every transaction has ended."""
        return self._low

    def stats(self) -> dict[str, int]:
        return {
            "pending": self.pending, "halves": self.halves, "committed": self.committed,
            "rolledBack": self.rolled_back, "discarded": self.discarded, "checksSent": self.checks_sent,
            "checksUnreachable": self.checks_unreachable, "halfOffset": self._low,
        }

    # ------------------------------------------------------------ END_TRANSACTION

    async def end_transaction(self, half: StoredMessage, commit: bool) -> SendResult | None:
        """Commit or roll back the transaction of ``half`` (a half or a copy, already validated).

        None when it had already ended (nothing is written); otherwise the
        result of the real message's put (commit) or of the op (rollback).
        A commit whose put fails leaves the transaction pending.
        """
        origin = transaction_origin(half)
        if not self._claim(origin):
            await trio.lowlevel.checkpoint()
            return None
        try:
            result = None
            if commit:
                msg, qid = self._final_message(half)
                result = await self.broker.send(msg, qid, internal=True)
                if not result.ok:
                    log.warning("commit of transaction %s to %s failed: %s %s", half.properties.get(PROPERTY_UNIQ_KEY),
                                msg.topic, result.status.name, result.remark)
                    return result
            op = await self._write_op(half.queue_offset, origin)
            self._end(origin)
            if commit:
                self.committed += 1
            else:
                self.rolled_back += 1
            return result or op
        finally:
            self._ending.discard(origin)

    def _claim(self, origin: int) -> bool:
        """Take the right to end ``origin``: False if it has ended or is being ended (rolled back by the checker)."""
        if origin in self._ending or (self._loaded and (origin < self._low or origin in self._ended)):
            return False
        self._ending.add(origin)
        return True

    def _final_message(self, half: StoredMessage) -> tuple[Message, int | None]:
        props = _restore_held(dict(half.properties))
        topic = props.pop(PROPERTY_REAL_TOPIC, "")
        qid = _int(props.pop(PROPERTY_REAL_QID, None), -1)
        props.pop(PROPERTY_TRAN_MSG, None)
        props.pop(PROPERTY_PREPARED_QUEUE_OFFSET, None)
        props[PROPERTY_WAIT] = "false"
        cfg = self.broker.get_topic(topic)
        if cfg is not None and qid >= cfg.queue_nums:
            qid = -1  # the topic shrank while the transaction was open: any queue
        msg = Message(
            topic=topic, body=half.body, flag=half.flag, properties=props,
            sysflag=(half.sysflag & ~TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE,
            born_timestamp=half.born_timestamp, born_host=half.born_host, reconsume_times=half.reconsume_times,
            prepared_transaction_offset=half.physical_offset,
        )
        return msg, (qid if qid >= 0 else None)

    async def _write_op(self, half_queue_offset: int, origin: int) -> SendResult:
        await self.broker.ensure_topic(TRANS_OP_HALF_TOPIC, 1)
        msg = Message(topic=TRANS_OP_HALF_TOPIC, body=str(half_queue_offset).encode(),
                      properties={PROPERTY_TAGS: OP_TAG, PROPERTY_WAIT: "false"},
                      born_timestamp=self.wall_ms(), born_host=self.broker.store_host)
        async with self._op_lock:
            result = await self.broker.send(msg, 0, internal=True)
            if result.ok:
                self._ops.append((result.queue_offset, origin))
                self._op_next = max(self._op_next, result.queue_offset + 1)
        if not result.ok:
            log.error("op message for half %d not stored (%s %s); after a restart the transaction is checked again",
                      half_queue_offset, result.status.name, result.remark)
        return result

    def _end(self, origin: int) -> None:
        self._pending.pop(origin, None)
        self._ended.add(origin)
        self._advance()

    def _advance(self) -> None:
        """Move H and O forward as far as ended transactions allow; record them as consumer offsets."""
        if not self._loaded:
            return
        low = min(self._pending) if self._pending else self._scan
        if low > self._low:
            self._low = low
            self._ended = {o for o in self._ended if o >= low}
        while self._ops and self._ops[0][1] < self._low:
            self._ops.popleft()
        op_low = self._ops[0][0] if self._ops else self._op_next
        self.broker.commit_offset(SYS_TRANS_GROUP, TRANS_HALF_TOPIC, 0, self._low)
        self.broker.commit_offset(SYS_TRANS_GROUP, TRANS_OP_HALF_TOPIC, 0, op_low)

    # ------------------------------------------------------------ service

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Load the pending set, then check due transactions until cancelled."""
        if self.broker.config.broker_role is BrokerRole.SLAVE:
            task_status.started(self)  # a slave checks nothing (its master does)
            await trio.sleep_forever()
        await self._load()
        task_status.started(self)
        while True:
            changed = self.broker.queue_changed(TRANS_HALF_TOPIC, 0)
            await self._scan_halves()
            await self._check_due()
            self._advance()
            next_due = min((t.due for o, t in self._pending.items() if o not in self._ending), default=math.inf)
            if self._ending:  # an END_TRANSACTION in progress may fail and leave its transaction due
                next_due = min(next_due, trio.current_time() + 1)
            with trio.move_on_at(next_due):
                await changed.wait()

    async def _load(self) -> None:
        b = self.broker
        low = self._stored_offset(TRANS_HALF_TOPIC)
        op_low = self._stored_offset(TRANS_OP_HALF_TOPIC)
        self._low = self._scan = low
        origin_of: dict[int, int] = {}
        await self._scan_halves(origin_of, aged=True)
        self._op_next = b.max_offset(TRANS_OP_HALF_TOPIC, 0)
        offset = op_low
        while offset < self._op_next:
            result = await b.read_queue(TRANS_OP_HALF_TOPIC, 0, offset, _READ_BATCH)
            if not result.entries:
                if result.next_begin_offset <= offset:
                    break
                offset = result.next_begin_offset
                continue
            for raw in result.entries:
                op = decode_message(raw)
                x = _int(op.body.decode("ascii", "replace").strip().rstrip(","), -1)
                origin = origin_of.get(x, x) if x >= low else x
                self._ops.append((op.queue_offset, origin))
                if origin >= low:
                    self._pending.pop(origin, None)
                    self._ended.add(origin)
            offset = result.next_begin_offset
        self._loaded = True
        self._advance()
        if self._pending:
            log.info("%d transaction(s) pending after load (half queue from %d, op queue from %d)",
                     len(self._pending), low, op_low)

    def _stored_offset(self, topic: str) -> int:
        b = self.broker
        lo, hi = b.min_offset(topic, 0), b.max_offset(topic, 0)
        stored = b.query_offset(SYS_TRANS_GROUP, topic, 0)
        return lo if stored is None else min(max(stored, lo), hi)

    async def _scan_halves(self, origin_of: dict[int, int] | None = None, *, aged: bool = False) -> None:
        """Read halves appended since the last scan into the pending set.

        Halves read at load (``aged``) count the time since they were stored;
        halves read live were stored a moment ago (their waits start now)."""
        while True:
            result = await self.broker.read_queue(TRANS_HALF_TOPIC, 0, self._scan, _READ_BATCH)
            if not result.entries:
                if result.next_begin_offset > self._scan:
                    self._scan = result.next_begin_offset  # units whose log was removed
                    continue
                return
            # read now: taken before the await below, whose first call writes the topic table
            # (in a thread), so a slow disk never makes the halves' waits start late
            trio_now, wall_now = trio.current_time(), self.wall_ms()
            await self.broker.ensure_topic(TRANS_HALF_TOPIC, 1)  # like RocketMQ, made when first used
            for raw in result.entries:
                half = decode_message(raw)
                origin = transaction_origin(half)
                if origin_of is not None:
                    origin_of[half.queue_offset] = origin
                self._note_half(half, origin, trio_now, max(0, wall_now - half.store_timestamp) if aged else 0)
            self._scan = result.next_begin_offset

    def _note_half(self, half: StoredMessage, origin: int, trio_now: float, age_ms: int) -> None:
        if origin < self._low or origin in self._ended:
            return
        check_times = _int(half.properties.get(PROPERTY_CHECK_TIMES))
        if check_times == 0:
            immunity = _int(half.properties.get(PROPERTY_CHECK_IMMUNITY)) * 1000
            wait_ms = max(self.config.timeout_ms, immunity)
        else:
            wait_ms = self.config.check_interval_ms
        due = trio_now + max(0, wait_ms - age_ms) / 1000
        tx = self._pending.get(origin)
        if tx is None:
            if origin == half.queue_offset:
                self.halves += 1
            self._pending[origin] = PendingTransaction(
                origin, half.queue_offset, half.physical_offset, half.properties.get(PROPERTY_PGROUP, ""),
                half.properties.get(PROPERTY_UNIQ_KEY, ""), check_times, due,
                half.born_timestamp if half.born_timestamp > 0 else half.store_timestamp)
        elif half.queue_offset > tx.queue_offset:  # a later copy (read at load; live copies are recorded when made)
            tx.queue_offset, tx.physical_offset = half.queue_offset, half.physical_offset
            tx.check_times = max(tx.check_times, check_times)
            tx.due = due

    async def _check_due(self) -> None:
        now = trio.current_time()
        interval = self.config.check_interval_ms / 1000
        channels: dict[str, list[Any]] = {}  # producer group -> its live channels, looked up once a pass
        unreachable: set[str] = set()  # producer groups whose transactions wait in this pass
        for origin in sorted(o for o, t in self._pending.items() if t.due <= now):
            tx = self._pending.get(origin)
            if tx is None or tx.due > now or origin in self._ending:
                continue
            reason = self._discard_reason(tx)
            if reason:
                self._ending.add(origin)  # an END_TRANSACTION meanwhile finds it ended
                try:
                    await self._discard(tx, reason)
                finally:
                    self._ending.discard(origin)
                continue
            group = tx.producer_group
            if group not in channels:
                channels[group] = [c for c in self.producer_channels(group) if not c.closed]
            if not channels[group]:  # not asked, not counted: the producer may come back with its answer
                self.checks_unreachable += 1
                unreachable.add(group)
                tx.due = now + interval
                continue
            try:
                await self._check(tx)  # an END_TRANSACTION may end it meanwhile
            except Exception:  # one bad half must not stop the checks of the others
                log.exception("checking transaction %s failed; trying again in an interval", tx.uniq_key)
                tx.due = trio.current_time() + interval
        self._log_unreachable(unreachable, now, interval)

    def _discard_reason(self, tx: PendingTransaction) -> str:
        if tx.check_times >= self.config.check_max:
            return f"checked {tx.check_times} times without an answer"
        if self.config.max_age_ms and self.wall_ms() - tx.born_ms > self.config.max_age_ms:
            return f"older than fileReservedTime ({self.config.max_age_ms / 3_600_000:g} h)"
        return ""

    def _log_unreachable(self, unreachable: set[str], now: float, interval: float) -> None:
        """One line per producer group per interval, however many transactions wait for it."""
        logged = self._unreachable_logged
        for group in [g for g, at in logged.items() if now - at >= interval]:
            del logged[group]
        for group in unreachable:
            if group not in logged:
                logged[group] = now
                waiting = sum(1 for t in self._pending.values() if t.producer_group == group)
                log.info("no producer of group %s is connected: %d transaction(s) of it wait for their check "
                         "(not counted against transactionCheckMax); trying again every %.0f s",
                         group, waiting, interval)

    async def _read_half(self, tx: PendingTransaction) -> StoredMessage | None:
        raw = await self.broker.read_at(tx.physical_offset)
        if raw is None:
            log.error("half message of transaction %s (offset %d) is gone (retention?); forgetting it",
                      tx.uniq_key, tx.physical_offset)
            self._end(tx.origin)
            return None
        return decode_message(raw)

    async def _check(self, tx: PendingTransaction) -> None:
        half = await self._read_half(tx)
        if half is None or self._pending.get(tx.origin) is not tx:
            return
        props = dict(half.properties)
        props[PROPERTY_CHECK_TIMES] = str(tx.check_times + 1)
        props[PROPERTY_PREPARED_QUEUE_OFFSET] = str(tx.origin)
        props[PROPERTY_WAIT] = "false"
        copy = Message(topic=TRANS_HALF_TOPIC, body=half.body, flag=half.flag, properties=props, sysflag=half.sysflag,
                       born_timestamp=half.born_timestamp, born_host=half.born_host,
                       reconsume_times=half.reconsume_times)
        result = await self.broker.send(copy, 0, internal=True)
        if self._pending.get(tx.origin) is not tx:
            return  # ended while the copy was written: nothing to ask
        interval = self.config.check_interval_ms / 1000
        if not result.ok:
            log.warning("re-appending half %d for its check failed: %s %s; trying again in %.0f s",
                        tx.queue_offset, result.status.name, result.remark, interval)
            tx.due = trio.current_time() + interval
            return
        tx.queue_offset, tx.physical_offset = result.queue_offset, result.physical_offset
        tx.check_times += 1  # the copy says so, durably
        tx.due = trio.current_time() + interval
        live = [c for c in self.producer_channels(tx.producer_group) if not c.closed]
        if live:
            self._send_check(tx, live[next(self._rr) % len(live)], copy, result)
            self.checks_sent += 1
        else:  # the group's last producer left while the copy was written: this one check counts unanswered
            self.checks_unreachable += 1

    def _send_check(self, tx: PendingTransaction, channel: Any, copy: Message, result: SendResult) -> None:
        props = _restore_held(dict(copy.properties))
        shown = Message(topic=props.get(PROPERTY_REAL_TOPIC, copy.topic), body=copy.body,
                        queue_id=_int(props.get(PROPERTY_REAL_QID)), flag=copy.flag, properties=props,
                        sysflag=copy.sysflag, born_timestamp=copy.born_timestamp, born_host=copy.born_host,
                        store_host=copy.store_host, reconsume_times=copy.reconsume_times)
        body = encode_message(shown, result.queue_offset, result.physical_offset, result.store_timestamp)
        header = {
            "tranStateTableOffset": result.queue_offset,
            "commitLogOffset": result.physical_offset,
            "msgId": tx.uniq_key,
            "transactionId": tx.uniq_key,
            "offsetMsgId": offset_msg_id(copy.store_host, result.physical_offset),
        }
        channel.send_oneway(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header, body))

    async def _discard(self, tx: PendingTransaction, reason: str) -> None:
        half = await self._read_half(tx)
        if half is None:
            return
        log.warning("transaction %s of group %s %s; rolling it back", tx.uniq_key, tx.producer_group, reason)
        await self.broker.ensure_topic(TRANS_CHECK_MAX_TIME_TOPIC, 1)
        props = dict(half.properties)
        props[PROPERTY_WAIT] = "false"
        kept = Message(topic=TRANS_CHECK_MAX_TIME_TOPIC, body=half.body, flag=half.flag, properties=props,
                       sysflag=half.sysflag, born_timestamp=half.born_timestamp, born_host=half.born_host,
                       reconsume_times=half.reconsume_times)
        kept_result = await self.broker.send(kept, 0, internal=True)
        if not kept_result.ok:
            log.warning("copy to %s failed: %s", TRANS_CHECK_MAX_TIME_TOPIC, kept_result.status.name)
        await self._write_op(tx.queue_offset, tx.origin)
        self._end(tx.origin)
        self.discarded += 1
