"""Compaction of the meta records on gateway nodes (``mqgate gateway``, issue 20).

``gateway.meta_log`` compacts for one process, whose image follows store
order exactly. On a cluster every node appends, and a node's view lags the
others' appends, so a snapshot written at queue offset X may hold, for a
key K, a value older than another node's record of K at an offset < X.
Here a snapshot is therefore *as of a position*, not as of its own offset:

* Every node keeps an image ``(kind, key) -> body`` of the records it reads
  on the meta tail (``ClusterSync._apply_read``), its own included, in queue
  order; tombstones remove the key; ``"rel"`` and ``"snap"`` records are not
  state. With ``P`` = ``ClusterSync.meta_offset`` (the tail's applied
  position), the image is exactly the state of the records ``[0, P)``.
* The leader (``Membership.leader``), when ``[mqtt] metaCompaction*`` say
  so, copies the image and ``P`` with no await in between, writes the copy
  as *snapshot records* (the record body unchanged, property
  ``mqgateSnapOf`` = P) in batches, then the marker ``["snap", "", P]``,
  then sets the checkpoint (the offset of ``CHECKPOINT_GROUP`` on the meta
  queue) to ``P``.
* Live tails skip snapshot records: every node holds those values already,
  and a "sess"/"live" snapshot record must not be taken for a takeover.
* Replay (a node's start) reads from the checkpoint ``C`` when it is in
  the queue and a marker naming ``C`` follows it, else the whole queue (one
  line says so). Each key has the position its value is *as of*: a normal
  record at offset ``o`` is as of ``o + 1``, a snapshot record of ``A`` as
  of ``A``. Normal records always apply (queue order: last wins); a
  snapshot record applies only when it is not older than the key's value
  (no normal record of the key at an offset >= A, no snapshot of a larger
  A, was applied); from a checkpoint, a snapshot of ``A < C`` is ignored
  (the state as of C is newer, and a key deleted before C must stay so).

So a replay from a checkpoint gives the state a replay from the queue's
start gives, whatever was written meanwhile: a snapshot record is only ever
a base value as of its ``A``, and every change after ``A`` has an offset
>= A and is read by the replay. A half-written snapshot (leader killed
mid-way: no marker, checkpoint unchanged) and two leaders snapshotting at
once (a membership change) are harmless for the same reason. An old node
that does not know ``mqgateSnapOf`` applies snapshot records as normal
ones (values it already holds, except when another node changed the key
meanwhile); do not mix versions while the leader compacts.
Cost: each node holds the live records' bodies once more (the image), and
the leader copies the image once per compaction.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from core.broker import PERM_READ, PERM_WRITE, queue_entries
from core.store import decode_message
from gateway.meta import META_TOPIC, SNAP, decode_record, record_of_body
from gateway.meta_log import (CHECKPOINT_GROUP, RETRY_S, CompactionSettings, ReplayStats, replay_from_checkpoint,
                              snap_marker)

if TYPE_CHECKING:
    from gateway.cluster import ClusterSync
    from gateway.remote_backend import RemoteBackend

log = logging.getLogger("mqgate.gateway")

P_SNAP_OF = "mqgateSnapOf"  # property of a snapshot record: the tail position its value is as of
NOT_STATE = (SNAP, "rel")


class NodeMetaLog:
    """A gateway node's image of the meta records, their replay and (as leader) their compaction."""

    def __init__(self, backend: RemoteBackend, settings: CompactionSettings = CompactionSettings()) -> None:
        self.backend = backend
        self.settings = settings
        self.image: dict[tuple[str, str], bytes] = {}  # (kind, key) -> last record body, as of the tail
        self.start = 0  # queue offset a replay starts at (the checkpoint in force)
        self.compactions = 0
        self.last_replay = ReplayStats()
        self._due = trio.Event()
        self._not_before = 0  # records to replay at which a failed compaction is tried again

    # ---- the image, from the tail -------------------------------------------------------

    def observe(self, kind: str, key: str, value, body: bytes) -> None:
        """A normal record read on the tail (any node's, in queue order)."""
        if kind in NOT_STATE:
            return
        if value is None:
            self.image.pop((kind, key), None)
        else:
            self.image[(kind, key)] = bytes(body)

    def tail_moved(self, position: int, leader: bool) -> None:
        if leader and self.due(position):
            self._due.set()

    def due(self, position: int) -> bool:
        s = self.settings
        n = position - self.start
        return n > s.min_records and n > s.ratio * len(self.image) and n >= self._not_before

    # ---- replay -------------------------------------------------------------------------

    async def replay(self) -> tuple[dict[tuple[str, str], object], int]:
        """Every live (kind, key) -> value as of the end of the meta queue, and
        that end (where the tail goes on); the image is rebuilt from the same records."""
        backend = self.backend
        await backend.ensure_topic(META_TOPIC, 1, PERM_READ | PERM_WRITE)
        await backend.prepare_queue(META_TOPIC)
        low, end = backend.min_offset(META_TOPIC, 0), backend.max_offset(META_TOPIC, 0)
        checkpoint = await backend.fetch_committed(CHECKPOINT_GROUP, META_TOPIC, 0)
        state, self.last_replay = await replay_from_checkpoint(self._read, low, end, checkpoint)
        self.start = self.last_replay.start
        self.last_replay.live = len(self.image)
        return state, end

    async def _read(self, offset: int, end: int, stats: ReplayStats) -> dict[tuple[str, str], object] | None:
        """Replay ``offset..end`` (the rules in the module docstring); the live
        values, if a marker naming ``offset`` was read (always for a full
        replay), else None (and the image is left as it was)."""
        image: dict[tuple[str, str], bytes] = {}
        state: dict[tuple[str, str], object] = {}
        as_of: dict[tuple[str, str], int] = {}  # (kind, key) -> the position its value is as of
        marked = stats.full
        async for raw in queue_entries(self.backend, META_TOPIC, offset, end):
            stats.read += 1
            try:
                msg = decode_message(raw)
                kind, key, value = decode_record(msg.body)
                snap_of = msg.properties.get(P_SNAP_OF)
                position = msg.queue_offset + 1 if snap_of is None else int(snap_of)
            except Exception:  # noqa: BLE001 - a bad record is logged, the rest still counts
                stats.bad += 1
                continue
            if kind == SNAP:
                marked = marked or value == offset
                continue
            k = (kind, key)
            if snap_of is not None and ((position < offset and not stats.full) or as_of.get(k, -1) > position):
                stats.stale += 1  # a base value older than the one this replay holds
                continue
            as_of[k] = position
            if value is None:
                image.pop(k, None)
                state.pop(k, None)
            else:
                state[k] = value
                if kind not in NOT_STATE:
                    image[k] = bytes(msg.body)
        if not marked:
            return None
        self.image = image
        return state

    # ---- compaction (the leader) -----------------------------------------------------------

    async def run(self, cluster: ClusterSync) -> None:
        """Compact whenever due on the leader (checked as the tail moves), forever."""
        while True:
            if not (cluster.members.leader and self.due(cluster.meta_offset)):
                self._due = trio.Event()
                await self._due.wait()
                continue
            if not await self.compact(cluster):
                self._not_before = cluster.meta_offset - self.start + self.settings.min_records
                await trio.sleep(RETRY_S)

    async def compact(self, cluster: ClusterSync) -> bool:
        """Write the image as of the tail's position P as snapshot records, the
        marker naming P, then the checkpoint P. False (logged) when a write
        was refused; the checkpoint is then unchanged."""
        position, image = cluster.meta_offset, dict(self.image)  # together: no await in between
        before = position - self.start
        log.info("compacting gateway meta records as of offset %d: %d live, %d to replay", position, len(image),
                 before)
        t0 = time.perf_counter()
        items = list(image.items())
        step = self.settings.batch
        for i in range(0, len(items), step):
            batch = []
            for (kind, key), body in items[i:i + step]:
                msg, qid = record_of_body(kind, key, body)
                msg.properties[P_SNAP_OF] = str(position)
                batch.append((msg, qid))
            if not await self._send(batch):
                return False
        if not await self._send([snap_marker(position)]):
            return False
        self.backend.commit_offset(CHECKPOINT_GROUP, META_TOPIC, 0, position)
        self.start = position
        self.compactions += 1
        log.info("compacted gateway meta records: %d live as of offset %d (was %d to replay) in %.3f s",
                 len(image), position, before, time.perf_counter() - t0)
        return True

    async def _send(self, items: list) -> bool:
        try:
            results = await self.backend.send_many(items)
        except Exception as e:  # noqa: BLE001 - the broker unreachable: try again later
            log.error("gateway meta compaction stopped: %s; the checkpoint stays at offset %d", e, self.start)
            return False
        bad = [r for r in results if not r.ok]
        if bad:
            log.error("gateway meta compaction stopped: %s %s; the checkpoint stays at offset %d",
                      bad[0].status.name, bad[0].remark, self.start)
            return False
        return True
