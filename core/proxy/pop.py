"""Pop consumption state: which messages of a (group, topic, queue) are out,
until when they stay invisible, and which receipt handle is current.

Sans-I/O: times are plain numbers given by the caller (the trio clock in
`core.proxy.service`), reads of the store happen there too.

Rules kept here:
- Every queue offset below ``next_offset`` is either done (acked, or skipped
  by the filter) or in flight; the group's committed consumer offset is the
  smallest offset in flight, else ``next_offset`` (so 4.x tools and the lag
  figures see pop progress, and a 4.x consumer of the same group would start
  after what pop finished).
- A receipt handle names queue, offset and a sequence number; only the
  newest handle of an offset is accepted. A redelivery or an invisible-time
  change issues a new one, so an ack with an old handle is refused
  (INVALID_RECEIPT_HANDLE), as RocketMQ does.
- ``attempt`` counts deliveries from 1; an offset that comes due again is
  handed out with attempt + 1.
- The table is saved as JSON (`to_json` / `load_json`; `core.proxy.consuming`
  writes ``config/popState.json`` every ``flushConsumerOffsetInterval`` and
  at shutdown, and a snapshot record that replicates, `core.proxy.pop_log`):
  invisible times are kept as wall-clock instants, so after a restart or a
  failover a message stays invisible for what was left of its time, keeps
  its attempt count, and receipt handles issued before stay valid. What
  changed after the last save (a crash) is lost on the safe side: the
  group's committed offset and the saved ``next_offset`` are never past an
  offset that was not acked, so such messages are delivered again.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

_HANDLE_PREFIX = "mqg1"


@dataclass(slots=True)
class InFlight:
    offset: int
    visible_at: float
    attempt: int
    seq: int


@dataclass
class PopQueue:
    """One queue of one topic as one group pops it."""

    queue_id: int
    next_offset: int
    inflight: dict[int, InFlight] = field(default_factory=dict)

    def committed(self) -> int:
        return min(self.inflight, default=self.next_offset)

    def due(self, now: float) -> list[InFlight]:
        return sorted((f for f in self.inflight.values() if f.visible_at <= now), key=lambda f: f.offset)

    def next_due(self) -> float | None:
        return min((f.visible_at for f in self.inflight.values()), default=None)


class ReceiptError(ValueError):
    """A receipt handle that is malformed, stale or of a message no longer out."""


class PopTable:
    """Every (group, topic, queue) being popped."""

    def __init__(self) -> None:
        self._queues: dict[tuple[str, str, int], PopQueue] = {}
        self._seq = itertools.count(1)

    def queue(self, group: str, topic: str, queue_id: int, start: int) -> PopQueue:
        """The state of a queue; ``start`` is its first offset when the group never popped it."""
        key = (group, topic, queue_id)
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = PopQueue(queue_id, start)
        return q

    def queues(self, group: str, topic: str) -> list[PopQueue]:
        return [q for (g, t, _), q in self._queues.items() if g == group and t == topic]

    def next_due(self, group: str, topic: str) -> float | None:
        times = [t for q in self.queues(group, topic) if (t := q.next_due()) is not None]
        return min(times, default=None)

    def hand_out(self, q: PopQueue, offset: int, now: float, invisible_s: float) -> tuple[InFlight, str]:
        """Mark ``offset`` of ``q`` out until ``now + invisible_s``: its record and receipt handle."""
        old = q.inflight.get(offset)
        f = InFlight(offset, now + invisible_s, old.attempt + 1 if old else 1, next(self._seq))
        q.inflight[offset] = f
        if offset >= q.next_offset:
            q.next_offset = offset + 1
        return f, self.handle(q.queue_id, f)

    def to_json(self, trio_now: float, wall_now_ms: int) -> dict:
        """The table with invisible times as wall-clock ms (``trio_now`` and
        ``wall_now_ms`` are the same instant on both clocks)."""
        def wall(t: float) -> int:
            return wall_now_ms + int((t - trio_now) * 1000)
        return {"seq": next(self._seq), "savedAt": wall_now_ms, "queues": [
            {"group": g, "topic": t, "queueId": qid, "nextOffset": q.next_offset,
             "inflight": [[f.offset, wall(f.visible_at), f.attempt, f.seq] for f in q.inflight.values()]}
            for (g, t, qid), q in self._queues.items()]}

    def fingerprint(self) -> int:
        """Changes whenever what a snapshot would hold changes (not with the clock)."""
        return hash(tuple(sorted(
            (g, t, qid, q.next_offset, tuple(sorted((f.offset, f.attempt, f.seq) for f in q.inflight.values())))
            for (g, t, qid), q in self._queues.items())))

    def load_json(self, obj: dict, trio_now: float, wall_now_ms: int) -> None:
        """Replace the table with a saved one; a malformed save raises ValueError."""
        try:
            queues: dict[tuple[str, str, int], PopQueue] = {}
            for e in obj["queues"]:
                q = PopQueue(int(e["queueId"]), int(e["nextOffset"]))
                for offset, visible_ms, attempt, seq in e["inflight"]:
                    q.inflight[int(offset)] = InFlight(int(offset), trio_now + (int(visible_ms) - wall_now_ms) / 1000,
                                                       int(attempt), int(seq))
                queues[(str(e["group"]), str(e["topic"]), q.queue_id)] = q
            seq = int(obj["seq"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a pop state: {type(e).__name__}: {e}") from None
        self._queues = queues
        self._seq = itertools.count(seq)

    @staticmethod
    def handle(queue_id: int, f: InFlight) -> str:
        return f"{_HANDLE_PREFIX}_{queue_id}_{f.offset}_{f.seq}"

    def _find(self, group: str, topic: str, handle: str) -> tuple[PopQueue, InFlight]:
        parts = handle.split("_")
        if len(parts) != 4 or parts[0] != _HANDLE_PREFIX or not all(p.isdigit() for p in parts[1:]):
            raise ReceiptError(f"receipt handle {handle[:80]!r} is not one this broker issued")
        queue_id, offset, seq = (int(p) for p in parts[1:])
        q = self._queues.get((group, topic, queue_id))
        f = q.inflight.get(offset) if q is not None else None
        if f is None:
            raise ReceiptError(f"the message of receipt handle {handle} is not out to group {group} "
                               f"(acked already, or the broker restarted)")
        if f.seq != seq:
            raise ReceiptError(f"receipt handle {handle} is stale: the message was handed out again "
                               f"or its invisible time changed since")
        return q, f

    def ack(self, group: str, topic: str, handle: str) -> PopQueue:
        """Done with the message of ``handle``: the queue, whose committed offset may have moved."""
        q, f = self._find(group, topic, handle)
        del q.inflight[f.offset]
        return q

    def change_invisible(self, group: str, topic: str, handle: str, now: float, invisible_s: float) -> str:
        """Keep the message out until ``now + invisible_s``: its new receipt handle."""
        q, f = self._find(group, topic, handle)
        f.visible_at = now + invisible_s
        f.seq = next(self._seq)
        return self.handle(q.queue_id, f)
