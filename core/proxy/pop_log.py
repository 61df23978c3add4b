"""Pop state snapshots as records of the store, so they follow a master to its
slaves (ARCHITECTURE decision 8; RocketMQ 5 keeps pop checkpoints in
``rmq_sys_REVIVE_LOG_*`` for the same reason).

A snapshot is the `PopTable` as `PopTable.to_json` gives it (invisible
times as wall-clock instants), msgpack-encoded, zlib-compressed and cut
into parts of at most `PART_BYTES`, each one message of queue 0 of
``rmq_sys_pop_state``, with properties ``POP_SNAPSHOT`` (the snapshot's id)
and ``POP_PART`` (``i/n``). All parts of one snapshot go in one append.

Rules kept here:
- `latest` reads the queue from its end back and returns the newest
  snapshot whose parts are all there and decode; a broken or partial one is
  skipped (logged once), an older complete one is used instead. It reads at
  most `MAX_BACK` records, so a start never scans a long history.
- The topic is a system topic (``rmq_sys_`` prefix): 5.x clients cannot
  send to it (`core.proxy.service`), a record that is no snapshot part is
  skipped, and the store's retention removes old snapshots like any message.
- Nothing here decides when to write (that is `core.proxy.consuming`: when
  the table changed since the last snapshot, on the save cadence).
"""

from __future__ import annotations

import logging
import uuid
import zlib

import msgpack

from core.broker import PERM_READ, PERM_WRITE, Broker, PullStatus
from core.store import Message

log = logging.getLogger("mqgate.proxy")

POP_TOPIC = "rmq_sys_pop_state"
PART_BYTES = 512 * 1024
MAX_BACK = 4096
_ID, _PART = "POP_SNAPSHOT", "POP_PART"


def snapshot_messages(obj: dict) -> list[tuple[Message, int]]:
    """The (message, queue 0) pairs of one snapshot, for ``broker.send_many``."""
    data = zlib.compress(msgpack.packb(obj, use_bin_type=True))
    chunks = [data[i:i + PART_BYTES] for i in range(0, len(data), PART_BYTES)] or [b""]
    sid = uuid.uuid4().hex
    return [(Message(topic=POP_TOPIC, body=chunk, properties={_ID: sid, _PART: f"{i}/{len(chunks)}", "KEYS": sid}), 0)
            for i, chunk in enumerate(chunks)]


async def write(broker: Broker, obj: dict) -> int:
    """Append one snapshot of ``obj``: the bytes of its bodies, 0 (logged) when the store
    refused a part."""
    await broker.ensure_topic(POP_TOPIC, 1, PERM_READ | PERM_WRITE)
    messages = snapshot_messages(obj)
    results = await broker.send_many(messages, internal=True)
    bad = [r for r in results if not r.ok]
    if bad:
        log.warning("pop state snapshot not stored: %s", bad[0].remark or bad[0].status.name)
        return 0
    return sum(len(m.body) for m, _ in messages)


async def latest(broker: Broker) -> dict | None:
    """The newest complete snapshot in the store, or None."""
    end = broker.max_offset(POP_TOPIC, 0)
    low = max(broker.min_offset(POP_TOPIC, 0), end - MAX_BACK)
    parts: dict[int, bytes] = {}
    sid, count, skipped = None, 0, 0
    offset = end - 1
    while offset >= low:
        res = await broker.read_queue(POP_TOPIC, 0, offset, 1)
        offset -= 1
        msgs = res.messages() if res.status is PullStatus.FOUND else []
        if not msgs:
            continue
        m = msgs[0]
        try:
            i, n = (int(x) for x in m.properties[_PART].split("/"))
            this = m.properties[_ID]
        except (KeyError, ValueError):
            skipped += 1
            continue
        if this != sid:  # a newer snapshot ended incomplete: start over with this one
            if sid is not None:
                skipped += 1
            sid, count, parts = this, n, {}
        parts[i] = bytes(m.body)
        if len(parts) == count:
            try:
                obj = msgpack.unpackb(zlib.decompress(b"".join(parts[k] for k in range(count))), raw=False,
                                      strict_map_key=False)
            except (KeyError, ValueError, zlib.error, msgpack.ExtraData) as e:
                log.warning("pop state snapshot %s in %s does not decode (%s): trying an older one", sid, POP_TOPIC, e)
                sid = None
                continue
            if skipped:
                log.warning("%d incomplete pop state snapshot(s) at the end of %s were skipped", skipped, POP_TOPIC)
            return obj if isinstance(obj, dict) else None
    return None
