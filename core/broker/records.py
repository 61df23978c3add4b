"""Key-value records kept as msgpack messages in one queue of a system topic of the store.

What the gateway's metadata (``gateway.meta``) and the event-rule
definitions (``core.events.registry``) share (ARCHITECTURE decision 8): each
change is one message ``msgpack([kind, key, value])`` in queue 0 of their
topic; ``value`` None deletes the key. The records are replicated, flushed
and recovered like any message.

Rules kept here:
- `queue_entries` yields the raw entries of queue 0 of a topic in queue
  order, from a start offset to an end offset read before; a range the
  store no longer has (retention) is stepped over, as the store's answer
  says. Both readers of records (`replay_records`, the gateway's
  compacting ``MetaLog``) read through it.
- `replay_records` reads the queue from its first offset to its end; the
  last record per (kind, key) wins.
- A record that does not decode, or is no ``[kind, key, value]`` with a
  kind of ``kinds`` and a text key (`parse_record`), is counted in the
  answer and skipped (never fatal: the rest still holds); the caller says
  so in its log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgpack

from core.store import Message, decode_message

from .config import PERM_READ, PERM_WRITE
from .results import PullStatus

__all__ = ["parse_record", "queue_entries", "record_message", "replay_records"]
BATCH = 256  # entries per read


def record_message(topic: str, kind: str, key: str, value) -> Message:
    """The message of one record (its KEYS ``kind:key`` for ``mqgate admin``), for queue 0."""
    body = msgpack.packb([kind, key, value], use_bin_type=True)
    return Message(topic=topic, body=body, properties={"KEYS": f"{kind}:{key}"[:200].replace(" ", "_")})


def parse_record(body: bytes, kinds) -> tuple[str, str, object]:
    """``(kind, key, value)`` of a record's message body; ValueError (or
    msgpack's own errors) when it is not one with a kind of ``kinds``."""
    kind, key, value = msgpack.unpackb(body, raw=False, strict_map_key=False)
    if kind not in kinds or not isinstance(key, str):
        raise ValueError(f"not a record: kind {kind!r}, key {key!r}")
    return kind, key, value


async def queue_entries(broker, topic: str, start: int, end: int) -> AsyncIterator[bytes]:
    """The raw stored entries of queue 0 of ``topic`` at offsets ``start``..``end`` - 1."""
    offset = start
    while offset < end:
        result = await broker.read_queue(topic, 0, offset, BATCH)
        if result.status is not PullStatus.FOUND:
            if result.next_begin_offset <= offset:
                return
            offset = result.next_begin_offset
            continue
        for raw in result.entries:
            yield raw
        offset = result.next_begin_offset


async def replay_records(broker, topic: str, kinds) -> tuple[dict[tuple[str, str], object], int]:
    """(every live (kind, key) -> value, how many records were skipped) as of the end of ``topic``."""
    await broker.ensure_topic(topic, 1, PERM_READ | PERM_WRITE)
    state: dict[tuple[str, str], object] = {}
    bad = 0
    async for raw in queue_entries(broker, topic, broker.min_offset(topic, 0), broker.max_offset(topic, 0)):
        try:
            kind, key, value = parse_record(decode_message(raw).body, kinds)
        except Exception:  # noqa: BLE001 - a bad record is counted, the rest still counts
            bad += 1
            continue
        if value is None:
            state.pop((kind, key), None)
        else:
            state[(kind, key)] = value
    return state, bad
