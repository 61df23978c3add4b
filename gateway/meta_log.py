"""Replay of the gateway's meta records, bounded by compaction (issue 17).

The meta topic (``gateway.meta``) is a log of changes; the live state is the
last record per (kind, key). Left alone, a restart reads the whole history.
``MetaLog`` keeps the *image* of the live records (the last body per key,
updated by a stored hook, so in store order) and, when the records a replay
would read outgrow the live ones (``metaCompactionRatio``, at least
``metaCompactionMinRecords``), writes the image again as records (the
snapshot), then the marker ``["snap", "", S]``, S being the queue offset of
the snapshot's first record, then sets the checkpoint: the offset of
consumer group ``CHECKPOINT_GROUP`` on the meta queue = S. Replay starts at
the checkpoint. Like Kafka's compacted topics, history stays on disk until
retention removes it; it is just never read again.

Rules kept here:

* Replay from any offset at or before a complete snapshot's S gives the
  state a replay from the queue's start gives: a snapshot record carries the
  image's value at the moment it is appended (the image follows store order,
  and no await separates reading the image and appending a batch), so every
  later change of that key has a later queue offset.
* The checkpoint can only be too old, never too new: it is set once the
  snapshot and its marker are stored (and durable / on the slave, as every
  send under the broker's flush and replication modes). A checkpoint outside
  the queue, or one past which no marker naming it is found (a slave whose
  log is behind its synced consumer offsets, a partial copy), is ignored and
  the whole queue replays (one line says so).
* A kill mid-compaction leaves the older checkpoint and some snapshot
  records that only repeat live values: the state replays the same.
* Consumer offsets are persisted every flushConsumerOffsetInterval (and at
  shutdown) and synced to the slave by its metadata sync: a checkpoint lost
  that way costs replay time, not state.
* A record that does not decode is counted, logged and skipped (never fatal,
  see ``gateway.meta``); it is not in the image, so compaction drops it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import msgpack
import trio

from core.broker import PERM_READ, PERM_WRITE, Broker, queue_entries
from core.store import Message, decode_message
from gateway.meta import KINDS, META_TOPIC, SNAP, decode_record, record_of_body

log = logging.getLogger("mqgate.gateway")

CHECKPOINT_GROUP = "rmq_sys_mqtt_meta_checkpoint"
RETRY_S = 30.0  # after a failed compaction (broker not writable, disk full): try again later


@dataclass(frozen=True, kw_only=True)
class CompactionSettings:
    min_records: int = 10_000  # never compact below this many records to replay
    ratio: float = 2.0  # compact when records to replay > ratio x live records
    batch: int = 1000  # records per write of a snapshot


@dataclass
class ReplayStats:
    start: int = 0  # queue offset the replay started at
    read: int = 0  # records read
    live: int = 0  # (kind, key) pairs restored
    bad: int = 0  # records that did not decode
    stale: int = 0  # snapshot records older than a later change of their key, skipped (gateway.node_meta_log)
    full: bool = True  # read from the queue's first offset
    seconds: float = 0.0


class MetaLog:
    """The live image of the meta records, their replay and their compaction."""

    def __init__(self, broker: Broker, settings: CompactionSettings = CompactionSettings()) -> None:
        self.broker = broker
        self.settings = settings
        self.image: dict[tuple[str, str], bytes] = {}  # (kind, key) -> last record body
        self.start = 0  # queue offset replay starts at (the checkpoint in force)
        self.compactions = 0
        self.last_replay = ReplayStats()
        self._due = trio.Event()
        self._not_before = 0  # records to replay at which a failed compaction is tried again

    # ---- the image --------------------------------------------------------------

    def stored_hook(self, msg: Message, result) -> None:
        """Broker stored hook: every meta record appended updates the image."""
        if msg.topic != META_TOPIC or not result.ok:
            return
        try:
            kind, key, value = decode_record(msg.body)
        except Exception:  # noqa: BLE001 - not a record: replay skips it too
            return
        if kind == SNAP:
            return
        if value is None:
            self.image.pop((kind, key), None)
        else:
            self.image[(kind, key)] = msg.body
        if self.due():
            self._due.set()

    def to_replay(self) -> int:
        """Records a restart would read now."""
        return self.broker.max_offset(META_TOPIC, 0) - self.start

    def due(self) -> bool:
        s = self.settings
        n = self.to_replay()
        return n > s.min_records and n > s.ratio * len(self.image) and n >= self._not_before

    # ---- replay -----------------------------------------------------------------

    async def replay(self, *, full: bool = False) -> dict[tuple[str, str], object]:
        """Every live (kind, key) -> value as of the end of the meta topic; the
        image is rebuilt from the same records. ``full``: ignore the checkpoint."""
        broker = self.broker
        await broker.ensure_topic(META_TOPIC, 1, PERM_READ | PERM_WRITE)
        low, end = broker.min_offset(META_TOPIC, 0), broker.max_offset(META_TOPIC, 0)
        checkpoint = None if full else broker.query_offset(CHECKPOINT_GROUP, META_TOPIC, 0)
        state, self.last_replay = await replay_from_checkpoint(self._read, low, end, checkpoint)
        self.start = self.last_replay.start
        self.last_replay.live = len(self.image)
        return state

    async def _read(self, offset: int, end: int, stats: ReplayStats) -> dict[tuple[str, str], object] | None:
        """Replay ``offset..end`` into a new image; the live values, if a
        marker naming ``offset`` was read (always for a full replay), else
        None (and the image is left as it was)."""
        image: dict[tuple[str, str], bytes] = {}
        state: dict[tuple[str, str], object] = {}  # the decoded values of ``image``
        marked = stats.full
        async for raw in queue_entries(self.broker, META_TOPIC, offset, end):
            stats.read += 1
            try:
                body = decode_message(raw).body
                kind, key, value = decode_record(body)
            except Exception:  # noqa: BLE001 - a bad record is logged, the rest still counts
                stats.bad += 1
                continue
            if kind == SNAP:
                marked = marked or value == offset
            elif value is None:
                image.pop((kind, key), None)
                state.pop((kind, key), None)
            else:
                image[(kind, key)] = body
                state[(kind, key)] = value
        if not marked:
            return None
        self.image = image
        return state

    # ---- compaction -------------------------------------------------------------

    async def run(self) -> None:
        """Compact whenever due (checked at every record stored), forever."""
        while True:
            if not self.due():
                self._due = trio.Event()
                await self._due.wait()
            if not await self.compact():
                self._not_before = self.to_replay() + self.settings.min_records
                await trio.sleep(RETRY_S)

    async def compact(self) -> bool:
        """Write the image as a snapshot between two markers, then the
        checkpoint. False (logged) when a write was refused; the checkpoint is
        then unchanged."""
        broker = self.broker
        before = self.to_replay()
        keys = list(self.image)
        log.info("compacting gateway meta records: %d live, %d to replay", len(keys), before)
        t0 = time.perf_counter()
        # The opening marker's queue offset (from its send's result) is S, the
        # snapshot's start; the closing marker names S once everything is in.
        first = None
        step = self.settings.batch
        for i in range(0, max(len(keys), 1), step):
            image = self.image  # read now: no await between reading and appending
            items = [record_of_body(kind, key, image[(kind, key)])
                     for kind, key in keys[i:i + step] if (kind, key) in image]
            if first is None:
                items.insert(0, snap_marker(-1))
            at = await self._send(items)
            if at is None:
                return False
            if first is None:
                first = at
        if await self._send([snap_marker(first)]) is None:
            return False
        broker.commit_offset(CHECKPOINT_GROUP, META_TOPIC, 0, first)
        self.start = first
        self.compactions += 1
        log.info("compacted gateway meta records: %d live from offset %d (was %d to replay) in %.3f s",
                 len(self.image), first, before, time.perf_counter() - t0)
        return True

    async def _send(self, items: list) -> int | None:
        """Store ``items``: the queue offset of the first, or None (logged) if
        any was refused."""
        results = await self.broker.send_many(items)
        bad = [r for r in results if not r.ok]
        if bad:
            log.error("gateway meta compaction stopped: %s %s; the checkpoint stays at offset %d",
                      bad[0].status.name, bad[0].remark, self.start)
            return None
        return results[0].queue_offset


async def replay_from_checkpoint(read, low: int, end: int, checkpoint: int | None) -> tuple[dict, ReplayStats]:
    """(live values, stats) of a replay of the meta queue ``low..end`` from
    ``checkpoint`` when it is in the queue and ``read`` finds a marker naming
    it, else (one line says so) from ``low``. ``read(offset, end, stats)``:
    the values read from ``offset``, or None when no marker names it."""
    t0 = time.perf_counter()
    stats = ReplayStats()
    state = None
    if checkpoint is not None and low < checkpoint <= end:
        stats.start, stats.full = checkpoint, False
        state = await read(checkpoint, end, stats)
        if state is None:
            log.warning("gateway meta records: no complete snapshot at the checkpoint (offset %d of %s, "
                        "queue %d..%d); replaying the whole queue", checkpoint, META_TOPIC, low, end)
            stats = ReplayStats()
    if stats.full:
        stats.start = low
        state = await read(low, end, stats)
    if stats.bad:
        log.error("%d gateway meta record(s) in %s did not decode and were skipped", stats.bad, META_TOPIC)
    stats.seconds = time.perf_counter() - t0
    return state, stats


def snap_marker(first: int) -> tuple[Message, int]:
    return record_of_body(SNAP, "", msgpack.packb([SNAP, "", first], use_bin_type=True))


assert SNAP not in KINDS
