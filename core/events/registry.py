"""The event buses, sources and rules, kept as records in the broker's own store.

Like the gateway's session records (ARCHITECTURE decision 8), each change
is one msgpack message ``[kind, key, value]`` in the system topic
``rmq_sys_mqgate_events`` (queue 0) of the same commit log, so definitions
are replicated to slaves, flushed and recovered exactly like messages.

Rules kept here:
- Kinds: ``"bus"`` (bus name -> its JSON), ``"source"`` (source name ->
  its JSON), ``"rule"`` (``bus/rule`` -> its JSON, ``enabled`` included),
  ``"counts"`` (``bus/rule`` -> delivered/failed/deadLettered, written at
  most every few seconds and at shutdown). ``value`` None deletes the key.
- `load` replays the topic from its first offset: the last record per
  (kind, key) wins. A record that does not decode is counted, logged and
  skipped; a definition that no longer parses is logged with its key and
  skipped by the caller, never fatal.
- `write` returns only once the record is stored (a definition the API
  acknowledged survives a restart; SYNC_FLUSH: fsynced). A refused store is
  a `StoreRefused` and the caller changes nothing in memory.
"""

from __future__ import annotations

import logging

from core.broker import Broker, record_message, replay_records

log = logging.getLogger("mqgate.events")

EVENTS_META_TOPIC = "rmq_sys_mqgate_events"
KINDS = ("bus", "source", "rule", "counts")

__all__ = ["EVENTS_META_TOPIC", "Registry", "StoreRefused"]


class StoreRefused(RuntimeError):
    """The broker did not store a definition record (or events): retry later."""


class Registry:
    """Records of one broker: ``await load()`` then ``await write(kind, key, value)``."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def load(self) -> dict[tuple[str, str], object]:
        state, bad = await replay_records(self.broker, EVENTS_META_TOPIC, KINDS)
        if bad:
            log.error("%d event definition record(s) in %s did not decode and were skipped", bad, EVENTS_META_TOPIC)
        return state

    async def write(self, kind: str, key: str, value) -> None:
        assert kind in KINDS
        result = await self.broker.send(record_message(EVENTS_META_TOPIC, kind, key, value), 0)
        if not result.ok:
            raise StoreRefused(f"the store refused the {kind} record of {key!r}: {result.status.name} "
                                f"{result.remark or ''}".strip())
