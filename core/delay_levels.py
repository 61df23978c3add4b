"""RocketMQ 4.x delay levels: park messages in SCHEDULE_TOPIC_XXXX, deliver them later.

Reference 6.2 (``CommitLog.asyncPutMessage``, ``ScheduleMessageService``).
Rules kept here:

- ``messageDelayLevel`` is a space-separated list of durations (``1s 5s
  10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`` by default: 18
  levels); units ms, s, m, h, d. Tests pass short levels (e.g. ``"100ms
  200ms 300ms"`` ...) so retries do not take hours.
- Parking (`park`, installed as a broker put hook): a message with
  ``DELAY`` > 0 that is not a transaction half/rollback goes to
  SCHEDULE_TOPIC_XXXX, queue ``level - 1``, with ``REAL_TOPIC`` and
  ``REAL_QID`` holding where it was headed; levels above the maximum are
  clamped to the maximum. The broker's ``queueId`` check has already run
  on the real topic, so a parked message always has a valid real queue.
- Delivery: one task per level reads its queue in order. The deliver time
  of an entry is its store timestamp + the level's delay (what RocketMQ
  writes as the CQ tagsCode); within one level deliver times therefore
  never decrease, so the head of the queue is the next one due, and the
  task sleeps exactly until then (or until a new entry is parked in an
  empty queue). A due message is rebuilt for ``REAL_TOPIC``/``REAL_QID``
  (``DELAY``, ``REAL_TOPIC``, ``REAL_QID`` removed; body, flag, born data,
  reconsume times and UNIQ_KEY kept) and sent through the broker's normal
  send path, so it is stored once more like any message.
- Progress per level (the next schedule-queue offset to deliver) is kept in
  ``<store>/config/delayOffset.json`` as ``{"offsetTable":{1:n,...}}``
  (fastjson form: bare numeric keys), written atomically (temp file, fsync,
  rename) at most once a second and at shutdown. Delivery is at least
  once: a crash between a delivery and the next write re-delivers.
- On a slave the service does not run; `replace_offsets` takes the master's
  table (4.x ``SlaveSynchronize.syncDelayOffset``) and writes the file, so a
  promoted slave resumes each level where its master was.
- A message whose real topic can no longer be written (deleted topic, no
  permission, illegal) is logged and skipped, so one bad message never
  stalls its level; a transient refusal (broker stopping or busy, system
  error) is retried every second without moving on, so nothing is lost.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import trio

from core.broker import SCHEDULE_TOPIC, Broker, SendStatus
from core.remoting import decode_json, encode_json
from core.store.message import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    Message,
    decode_message,
)

__all__ = ["DEFAULT_DELAY_LEVELS", "ScheduleService", "parse_delay_levels"]

log = logging.getLogger("mqgate.schedule")

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DELAY_OFFSET_FILE = "delayOffset.json"
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL = re.compile(r"^(\d+)(ms|s|m|h|d)$")
# send outcomes worth retrying (the broker is stopping, busy, or the disk is full for now)
_TRANSIENT = frozenset({SendStatus.SERVICE_NOT_AVAILABLE, SendStatus.SYSTEM_BUSY, SendStatus.SYSTEM_ERROR})


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 2m"`` -> ``[1000, 5000, 120000]`` (ms); ValueError if malformed."""
    out = []
    for item in text.split():
        m = _LEVEL.match(item.strip().lower())
        if not m:
            raise ValueError(f"bad delay level {item!r} in messageDelayLevel (use e.g. 500ms, 1s, 2m, 1h)")
        out.append(int(m.group(1)) * _UNITS[m.group(2)])
    if not out:
        raise ValueError("messageDelayLevel is empty")
    return out


class ScheduleService:
    """Delay levels for one broker: `park` is its put hook, `run` delivers."""

    def __init__(self, broker: Broker, levels: str | list[int] = DEFAULT_DELAY_LEVELS, *, persist_interval: float = 1.0):
        self.broker = broker
        self.delays_ms = parse_delay_levels(levels) if isinstance(levels, str) else list(levels)
        if len(self.delays_ms) > 18:
            raise ValueError("at most 18 delay levels (SCHEDULE_TOPIC_XXXX has 18 queues)")
        self.persist_interval = persist_interval
        self.retry_interval = 1.0
        self.offsets: dict[int, int] = {}
        self.delivered = 0
        self._dirty = False
        self._path = Path(broker.config_dir) / DELAY_OFFSET_FILE

    @property
    def max_level(self) -> int:
        return len(self.delays_ms)

    def install(self) -> None:
        """Make the broker park delayed messages (call once, before sends)."""
        self.broker.add_put_hook(self.park, when=(PROPERTY_DELAY,))

    # ---- parking (put hook: runs inside the broker's send, must not block) ----

    def park(self, msg: Message) -> None:
        raw = msg.properties.get(PROPERTY_DELAY)
        if not raw or raw == "0":  # the common case, kept cheap: this runs on every send
            return
        level = _int(raw)
        if level <= 0 or msg.topic == SCHEDULE_TOPIC:
            return
        tx = msg.sysflag & TRANSACTION_MASK
        if tx in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return
        level = min(level, self.max_level)
        msg.properties[PROPERTY_DELAY] = str(level)
        msg.properties[PROPERTY_REAL_TOPIC] = msg.topic
        msg.properties[PROPERTY_REAL_QID] = str(msg.queue_id)
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1

    # ---- progress file ----

    def load(self) -> None:
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = decode_json(raw)
            table = doc.get("offsetTable") or {}
            self.offsets = {int(k): int(v) for k, v in table.items()}
        except (ValueError, AttributeError, TypeError) as exc:
            log.error("%s is unreadable (%s); delivering every level from its first entry", self._path, exc)
            self.offsets = {}

    def _write(self, snapshot: dict[int, int]) -> None:
        text = encode_json({"offsetTable": snapshot}, standard=False).encode()
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".json.tmp")
        with open(tmp, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)

    async def persist(self) -> None:
        self._dirty = False
        await trio.to_thread.run_sync(self._write, dict(self.offsets))

    async def replace_offsets(self, table: dict[int, int]) -> None:
        """A slave's copy of its master's progress: replace the table and write
        it now. Not for a running service (its level tasks keep their own place)."""
        self.offsets = {int(level): int(offset) for level, offset in table.items()}
        await self.persist()

    # ---- delivery ----

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Deliver due messages of every level until cancelled; persists progress on the way out."""
        await trio.to_thread.run_sync(self.load)
        try:
            async with trio.open_nursery() as nursery:
                for level in range(1, self.max_level + 1):
                    nursery.start_soon(self._level_loop, level)
                nursery.start_soon(self._persist_loop)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await self.persist()

    async def _persist_loop(self) -> None:
        while True:
            await trio.sleep(self.persist_interval)
            if self._dirty:
                try:
                    await self.persist()
                except OSError:
                    log.exception("writing %s failed; will retry", self._path)
                    self._dirty = True

    async def _level_loop(self, level: int) -> None:
        qid = level - 1
        delay = self.delays_ms[level - 1]
        broker = self.broker
        offset = max(self.offsets.get(level, 0), broker.min_offset(SCHEDULE_TOPIC, qid))
        while True:
            changed = broker.queue_changed(SCHEDULE_TOPIC, qid)
            result = await broker.read_queue(SCHEDULE_TOPIC, qid, offset, 32)
            if not result.entries:
                if result.next_begin_offset > offset:  # skip holes / moved offsets
                    offset = result.next_begin_offset
                    continue
                await changed.wait()
                continue
            for raw in result.entries:
                stored = decode_message(raw)
                wait_ms = stored.store_timestamp + delay - int(time.time() * 1000)
                if wait_ms > 0:
                    await trio.sleep(wait_ms / 1000)
                while not await self._deliver(stored):
                    await trio.sleep(self.retry_interval)
                offset = stored.queue_offset + 1
                self.offsets[level] = offset
                self._dirty = True

    async def _deliver(self, stored: Any) -> bool:
        """True when done with this entry (stored, or refused for good); False to try again later."""
        props = dict(stored.properties)
        real_topic = props.pop(PROPERTY_REAL_TOPIC, None)
        real_qid = _int(props.pop(PROPERTY_REAL_QID, None), -1)
        props.pop(PROPERTY_DELAY, None)
        if not real_topic:
            log.error("scheduled message at %d has no REAL_TOPIC; skipped", stored.physical_offset)
            return True
        msg = Message(
            topic=real_topic, body=stored.body, flag=stored.flag, properties=props, sysflag=stored.sysflag,
            born_timestamp=stored.born_timestamp, born_host=stored.born_host, reconsume_times=stored.reconsume_times,
            prepared_transaction_offset=stored.prepared_transaction_offset,
        )
        cfg = self.broker.get_topic(real_topic)
        if cfg is not None and real_qid >= cfg.queue_nums:
            real_qid = -1  # the topic shrank while the message waited: any queue
        result = await self.broker.send(msg, real_qid if real_qid >= 0 else None, internal=True)
        if result.ok:
            self.delivered += 1
            return True
        if result.status in _TRANSIENT:
            log.warning("delivering scheduled message to %s/%d failed: %s %s; will retry",
                        real_topic, real_qid, result.status.name, result.remark)
            return False
        log.error("delivering scheduled message to %s/%d failed: %s %s; skipped",
                  real_topic, real_qid, result.status.name, result.remark)
        return True


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
