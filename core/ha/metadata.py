"""`SlaveMetadataSync`: a slave copies its master's tables (4.x ``SlaveSynchronize``).

Every ``interval_s`` (10 s, as 4.x) a slave asks its master, over remoting,
for GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG, and takes what it gets.

Rules kept here:

- Topics: when the master's ``dataVersion`` differs from the slave's, the
  slave's table becomes the master's exactly (topics the slave made for
  itself before are dropped; their consume-queue files stay, as in 4.x),
  with the master's data version; the first round takes the table whatever
  the versions say (two tables can share a version: milliseconds and a
  counter). Subscription groups: the same rules.
  Consumer offsets: every ``topic@group`` the master has replaces the
  slave's; others stay (4.x ``putAll``: what a consumer committed to the
  slave while its master was away is not thrown out). Delay offsets: the
  master's table replaces the `ScheduleService`'s and its file (written at
  the first round whatever it holds, as 4.x writes it every round).
- What changed is persisted before `sync_once` returns (``Broker.persist``,
  and the delay-offset file).
- Every request is bounded by ``timeout_s``. A master that cannot be
  reached ends the round (False) and is logged once per outage, not every
  round; the first answer after it is logged once too. A refused request or
  a body that does not parse is logged, leaves that table alone, and the
  other tables are still taken. Nothing here ends `run` but cancellation.
- No master known yet (``master_addr()`` returns None or ""): the round is
  skipped silently. With ``wake`` (e.g. ``BrokerRegistrar.master_changed``)
  a round starts as soon as the master becomes known or changes.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import trio

from core.broker import Broker, DataVersion, TopicConfig
from core.remoting import RemotingCommand, RequestCode, ResponseCode, decode_json
from core.remoting.client import RemotingClient, RemotingConnectionError, RemotingTimeoutError

__all__ = ["SlaveMetadataSync"]

log = logging.getLogger("mqgate.ha.metadata")


class _Unreachable(Exception):
    """The master did not answer (connection or timeout)."""


class SlaveMetadataSync:
    """Keeps one slave broker's tables equal to its master's; see the module docstring."""

    def __init__(self, broker: Broker, client: RemotingClient, master_addr: Callable[[], str | None], *,
                 schedule: Any = None, interval_s: float = 10.0, timeout_s: float = 3.0,
                 wake: Callable[[], trio.Event] | None = None) -> None:
        self.broker = broker
        self.client = client
        self.master_addr = master_addr
        self.schedule = schedule  # a core.delay_levels.ScheduleService, or None: delay offsets are not copied
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.wake = wake
        self.rounds = 0  # rounds that reached the master and took every table
        self.failed_rounds = 0
        self.last_synced_ms = 0  # wall-clock ms of the last complete round; 0 = never
        self._down: str | None = None  # the master we last failed to reach, while it stays down
        self._delays_taken = False
        # The first round takes topics and groups whatever their versions say: a
        # version is (ms, counter), and a table changed on the slave before that
        # round can carry the very version of a different master table.
        self._topics_taken = False
        self._groups_taken = False

    def status(self) -> dict[str, Any]:
        return {"masterAddr": self.master_addr() or "", "rounds": self.rounds, "failedRounds": self.failed_rounds,
                "lastSyncedMs": self.last_synced_ms, "masterReachable": self._down is None}

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """A round at once, then one every ``interval_s`` (sooner when ``wake`` fires), until cancelled."""
        task_status.started()
        while True:
            event = self.wake() if self.wake is not None else None
            await self.sync_once()
            with trio.move_on_after(self.interval_s):
                if event is not None:
                    await event.wait()
                else:
                    await trio.sleep_forever()

    async def sync_once(self) -> bool:
        """One round; True when every table was fetched and taken (changed or not)."""
        addr = self.master_addr()
        if not addr:
            await trio.lowlevel.checkpoint()
            return False
        try:
            ok = await self._round(addr)
        except _Unreachable as e:
            if self._down != addr:
                log.warning("slave metadata sync: master %s does not answer (%s); retrying every %.0f s",
                            addr, e, self.interval_s)
                self._down = addr
            self.failed_rounds += 1
            return False
        if self._down is not None:
            log.info("slave metadata sync: master %s answers again", addr)
            self._down = None
        if ok:
            self.rounds += 1
            self.last_synced_ms = int(time.time() * 1000)
        else:
            self.failed_rounds += 1
        return ok

    async def _round(self, addr: str) -> bool:
        topics = await self._fetch(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        offsets = await self._fetch(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        delays = await self._fetch(addr, RequestCode.GET_ALL_DELAY_OFFSET) if self.schedule is not None else {}
        groups = await self._fetch(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        ok = all(body is not None for body in (topics, offsets, delays, groups))
        changed = False
        for name, body, take in (("topic config", topics, self._take_topics),
                                 ("consumer offsets", offsets, self._take_offsets),
                                 ("subscription groups", groups, self._take_groups)):
            if body is None:
                continue
            try:
                changed = take(body) or changed
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                log.error("slave metadata sync: %s from master %s is unusable (%s); kept ours", name, addr, e)
                ok = False
        try:
            if changed:
                await self.broker.persist()
            if delays is not None and self.schedule is not None:
                ok = await self._take_delays(addr, delays) and ok
        except OSError as e:
            log.error("slave metadata sync: writing the tables failed (%s); next round tries again", e)
            return False
        return ok

    async def _fetch(self, addr: str, code: RequestCode) -> Any:
        """The decoded JSON body of ``code``'s answer; None if refused or not JSON."""
        try:
            resp = await self.client.invoke(addr, RemotingCommand.request(code), timeout=self.timeout_s)
        except (RemotingConnectionError, RemotingTimeoutError, OSError) as e:
            raise _Unreachable(str(e) or type(e).__name__) from None
        if resp.code != ResponseCode.SUCCESS:
            log.error("slave metadata sync: master %s refused %s: %s %s", addr, code.name, resp.code, resp.remark)
            return None
        try:
            return decode_json(resp.body or b"")
        except ValueError as e:
            log.error("slave metadata sync: %s from master %s is not JSON (%s)", code.name, addr, e)
            return None

    def _take_topics(self, body: dict[str, Any]) -> bool:
        table = body.get("topicConfigTable")
        if not isinstance(table, dict):
            raise ValueError("no topicConfigTable object")
        version = DataVersion.from_json(body.get("dataVersion"))
        topics = self.broker.topics
        if self._topics_taken and version == topics.data_version:
            return False
        configs = {cfg.topic_name: cfg for cfg in (TopicConfig.from_json(item) for item in table.values())}
        for name in [n for n in topics.all() if n not in configs]:
            topics.delete(name)
        for cfg in configs.values():
            try:
                topics.put(cfg)
            except ValueError as e:  # a name our rules refuse: the others still come over
                log.error("slave metadata sync: master's topic %r not taken: %s", cfg.topic_name, e)
        topics.data_version = version  # after the puts: each of them bumped it
        self._topics_taken = True
        log.info("slave metadata sync: took %d topics (data version %s)", len(configs), version)
        return True

    def _take_offsets(self, body: dict[str, Any]) -> bool:
        offsets = self.broker.offsets
        offsets.put_all(body)
        return offsets.dirty

    def _take_groups(self, body: dict[str, Any]) -> bool:
        taken = self.broker.groups.replace_all(body, force=not self._groups_taken)
        self._groups_taken = True
        return taken

    async def _take_delays(self, addr: str, body: Any) -> bool:
        table = body.get("offsetTable") if isinstance(body, dict) else None
        try:
            if not isinstance(table, dict):
                raise ValueError("no offsetTable object")
            parsed = {int(level): int(offset) for level, offset in table.items()}
        except (ValueError, TypeError) as e:
            log.error("slave metadata sync: delay offsets from master %s are unusable (%s); kept ours", addr, e)
            return False
        if not self._delays_taken or parsed != self.schedule.offsets:
            await self.schedule.replace_offsets(parsed)  # the first time too: the file may be a stale one of ours
            self._delays_taken = True
        return True
