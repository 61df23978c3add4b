"""Where a consumer keeps its progress (Java ``RemoteBrokerOffsetStore`` / ``LocalFileOffsetStore``).

Rules kept here:

- The in-memory table holds, per queue, the next offset to consume.
  `update` only moves it forward unless ``increase_only=False`` (a seek or
  an OFFSET_ILLEGAL correction).
- Clustering: offsets live on the broker that hosts the queue; `persist_all`
  sends UPDATE_CONSUMER_OFFSET for every queue that changed since its last
  commit (every 5 s and at shutdown); `read_stored` asks
  QUERY_CONSUMER_OFFSET and answers None when the broker has none.
- Broadcasting: every consumer has its own progress, kept in a JSON file
  (``<dir>/<client id>/<group>/offsets.json``) written atomically (temp
  file, fsync, rename); `read_stored` reads that file.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from core.client.model import MessageQueue

if TYPE_CHECKING:
    from core.client.instance import ClientInstance

__all__ = ["LocalFileOffsetStore", "OffsetStore", "RemoteOffsetStore", "default_offset_dir"]

log = logging.getLogger("mqgate.client.offsets")


def default_offset_dir() -> Path:
    return Path(os.environ.get("MQGATE_CLIENT_OFFSET_DIR", Path.home() / ".mqgate_offsets"))


class OffsetStore:
    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}
        self._committed: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = True) -> None:
        old = self.table.get(mq)
        if old is None or not increase_only or offset > old:
            self.table[mq] = offset

    def read(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq)

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)
        self._committed.pop(mq, None)

    async def read_stored(self, mq: MessageQueue) -> int | None:
        raise NotImplementedError

    async def persist_all(self) -> None:
        raise NotImplementedError

    async def persist(self, mq: MessageQueue) -> None:
        await self.persist_all()


class RemoteOffsetStore(OffsetStore):
    def __init__(self, instance: "ClientInstance", group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    async def read_stored(self, mq: MessageQueue) -> int | None:
        addr = await self.instance.find_broker_addr_in_subscribe(mq.broker_name, mq.topic)
        return await self.instance.api.query_consumer_offset(addr, self.group, mq)

    async def persist(self, mq: MessageQueue) -> None:
        offset = self.table.get(mq)
        if offset is None or self._committed.get(mq) == offset:
            return
        addr = await self.instance.find_broker_addr_in_subscribe(mq.broker_name, mq.topic)
        await self.instance.api.update_consumer_offset(addr, self.group, mq, offset)
        self._committed[mq] = offset

    async def persist_all(self) -> None:
        for mq in list(self.table):
            try:
                await self.persist(mq)
            except Exception as exc:
                log.info("committing the offset of %s failed: %s", mq, exc)


_SAFE = re.compile(r"[^A-Za-z0-9_.@#%-]")


class LocalFileOffsetStore(OffsetStore):
    def __init__(self, directory: Path | str, client_id: str, group: str) -> None:
        super().__init__()
        self.path = Path(directory) / _SAFE.sub("_", client_id) / _SAFE.sub("_", group) / "offsets.json"
        self._stored: dict[MessageQueue, int] | None = None

    def _load(self) -> dict[MessageQueue, int]:
        if self._stored is None:
            self._stored = {}
            try:
                doc = json.loads(self.path.read_text())
                for e in doc.get("offsetTable", []):
                    self._stored[MessageQueue(e["topic"], e["brokerName"], int(e["queueId"]))] = int(e["offset"])
            except FileNotFoundError:
                pass
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable offset file %s: %s", self.path, exc)
        return self._stored

    async def read_stored(self, mq: MessageQueue) -> int | None:
        return self._load().get(mq)

    def _write(self, entries: list[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"offsetTable": entries}, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    async def persist_all(self) -> None:
        stored = self._load()
        stored.update(self.table)
        if self._committed == stored:
            return
        entries = [{**mq.to_json(), "offset": off} for mq, off in sorted(stored.items())]
        await trio.to_thread.run_sync(self._write, entries)
        self._committed = dict(stored)
