"""`EventService`: the buses, sources and rules of one broker, and their running deliveries.

Rules kept here:
- Every change (create, enable, disable, delete) is stored in the registry
  first (`registry.Registry.write`) and takes effect in memory only after:
  what the caller was told is what a restart finds.
- Definitions are checked before anything is written (`model.parse_*`);
  a bus holding rules or sources cannot be deleted; names are unique.
- A rule or MQTT source created (or enabled) at runtime starts at the end
  of its topic: its group's offsets are committed at the current end of
  every queue before the call returns, so it sees exactly the events put
  after it. A disabled rule's consumer stops; enabling it skips what was
  put meanwhile.
- PutEvents stores a request's events in one ``send_many`` on the bus
  topic, each on the queue of its subject (a stable hash; no subject:
  round-robin), with its id as KEYS and ``CE_*`` properties.
- Each rule and source runs in its own cancel scope under the service's
  nursery; one that fails to start is logged with its reason and shown
  as ``state: failed``, the others keep running.
- Counts are written to the registry every ``counts_interval`` seconds
  when they changed (so up to that much of counting may be lost in a crash;
  deliveries are not).
"""

from __future__ import annotations

import logging
import zlib
from collections import OrderedDict
from typing import Any

import httpx
import trio

from core.broker import Broker
from core.store import Message

from .delivery import RuleCounts, RuleDelivery
from .envelope import decode_event, encode_event
from .model import Bus, Rule, Source, SpecError, bus_topic, parse_bus, parse_rule, parse_source
from .pattern import compile_pattern
from .registry import Registry, StoreRefused
from .sources import MqttSource, source_topic
from .targets import MqttPublish, Targets, ce_properties

log = logging.getLogger("mqgate.events")

__all__ = ["Conflict", "EventService", "NotFound", "StoreRefused"]


_DECODED_KEPT = 8192


class NotFound(LookupError):
    """No such bus, source or rule."""


class Conflict(ValueError):
    """The name is taken, or the thing is still in use."""


def _existing(table: dict, key: str, missing: str, *names: str):
    """``table[key]``, else `NotFound` (``missing`` formatted with ``names``)."""
    found = table.get(key)
    if found is None:
        raise NotFound(missing.format(*names))
    return found


def _unused(table: dict, key: str, taken: str, *names: str) -> None:
    """`Conflict` (``taken`` formatted with ``names``) when ``key`` is in ``table``."""
    if key in table:
        raise Conflict(taken.format(*names))


class _Running:
    """A rule's or source's task: its part, its state for ``show``, whether it has started."""

    def __init__(self, part, task_status) -> None:
        self.part = part
        self.state = "starting"
        self._task_status = task_status
        self.has_started = False

    def started(self, value=None) -> None:
        self.has_started = True
        self._task_status.started(value)


class EventService:
    """Build, then ``await nursery.start(service.run)``; the admin calls are methods."""

    def __init__(self, broker: Broker, namesrv: list[str], *, mqtt_publish: MqttPublish | None = None,
                 bus_queues: int = 4, counts_interval: float = 5.0, orderly_suspend_ms: int = 1000,
                 consumer_options: dict | None = None) -> None:
        self.broker = broker
        self.namesrv = list(namesrv)
        self.mqtt_publish = mqtt_publish
        self.bus_queues = bus_queues
        self.counts_interval = counts_interval
        self.orderly_suspend_ms = orderly_suspend_ms
        self.consumer_options = consumer_options or {}
        self.registry = Registry(broker)
        self.buses: dict[str, Bus] = {}
        self.sources: dict[str, Source] = {}
        self.rules: dict[str, Rule] = {}  # "bus/rule" -> rule
        self.counts: dict[str, RuleCounts] = {}
        self._written_counts: dict[str, dict] = {}
        self._running: dict[str, _Running] = {}  # "rule:bus/name" or "source:name"
        self._nursery: trio.Nursery | None = None
        self._targets: Targets | None = None
        self._lock = trio.Lock()  # one definition change at a time
        # every rule of a bus reads the same stored events: each is decoded once (never mutated after)
        self._decoded: OrderedDict[tuple[str, int], dict | None] = OrderedDict()

    # ---- lifecycle -------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        state = await self.registry.load()
        for (kind, key), value in sorted(state.items(), key=lambda kv: ("bus", "source", "rule", "counts").index(kv[0][0])):
            try:
                if kind == "bus":
                    self.buses[key] = parse_bus(value)
                elif kind == "source":
                    self.sources[key] = parse_source(value)
                elif kind == "rule":
                    self.rules[key] = parse_rule(value)
                elif kind == "counts" and isinstance(value, dict):
                    self.counts[key] = RuleCounts.from_json(value)
                    self._written_counts[key] = self.counts[key].as_json()
            except (SpecError, ValueError, TypeError) as e:
                log.error("event %s %r in the registry no longer parses and is skipped: %s", kind, key, e)
        async with httpx.AsyncClient(follow_redirects=False) as http, trio.open_nursery() as nursery:
            self._nursery = nursery
            self._targets = Targets(self.broker, http, self.mqtt_publish)
            for bus in self.buses.values():
                await self.broker.ensure_topic(bus.topic, self.bus_queues)
            for source in self.sources.values():
                await self._start_source(source)
            for rule in self.rules.values():
                if rule.enabled:
                    await self._start_rule(rule)
            nursery.start_soon(self._counts_loop)
            if self.rules or self.sources:
                log.info("event rules: %d bus(es), %d source(s), %d rule(s) (%d enabled)", len(self.buses),
                         len(self.sources), len(self.rules), sum(r.enabled for r in self.rules.values()))
            task_status.started(self)
            await trio.sleep_forever()

    async def _counts_loop(self) -> None:
        while True:
            await trio.sleep(self.counts_interval)
            await self.write_counts()

    async def write_counts(self) -> None:
        for key, counts in list(self.counts.items()):
            now = counts.as_json()
            if key in self.rules and self._written_counts.get(key) != now:
                try:
                    await self.registry.write("counts", key, now)
                    self._written_counts[key] = now
                except Exception as e:  # noqa: BLE001 - counts wait for the next round
                    log.debug("counts of %s not written: %s", key, e)

    # ---- running parts -----------------------------------------------------------------------

    async def _run_part(self, name: str, part, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._running[name] = running = _Running(part, task_status)
        try:
            await part.run(task_status=running)
        except Exception as e:  # noqa: BLE001 - one rule's failure never stops the others
            running.state = f"failed: {e}"
            log.error("event %s stopped: %s", name, e)
            if not running.has_started:
                running.started()

    async def _start(self, name: str, part) -> None:
        await self._nursery.start(self._run_part, name, part)
        running = self._running.get(name)
        if running is not None and running.state == "starting":
            running.state = "running"

    def _stop(self, name: str) -> None:
        running = self._running.pop(name, None)
        if running is not None:  # it leaves its group in the background, then its task ends
            running.part.stop_requested.set()

    def _commit_at_end(self, group: str, topic: str) -> None:
        cfg = self.broker.get_topic(topic)
        for qid in range(cfg.read_queue_nums if cfg is not None else 0):
            self.broker.commit_offset(group, topic, qid, self.broker.max_offset(topic, qid))

    def decode(self, m) -> dict | None:
        """The event a consumed message holds (`envelope.decode_event`), decoded once for all rules."""
        key = (m.topic, m.commit_log_offset)
        if key in self._decoded:
            return self._decoded[key]
        event = self._decoded[key] = decode_event(m.body)
        if len(self._decoded) > _DECODED_KEPT:
            self._decoded.popitem(last=False)
        return event

    async def _start_rule(self, rule: Rule) -> None:
        counts = self.counts.setdefault(rule.key, RuleCounts())
        part = RuleDelivery(rule, self._targets, self.broker, self.namesrv, counts, decode=self.decode,
                            orderly_suspend_ms=self.orderly_suspend_ms, consumer_options=self.consumer_options)
        await self._start(f"rule:{rule.key}", part)

    async def _start_source(self, source: Source) -> None:
        await self.broker.ensure_topic(source_topic(source), self.broker.config.default_topic_queue_nums)
        part = MqttSource(source, self.broker, self.namesrv, self.put_events, consumer_options=self.consumer_options)
        await self._start(f"source:{source.name}", part)

    # ---- buses -------------------------------------------------------------------------------

    def bus(self, name: str) -> Bus:
        return _existing(self.buses, name, "no event bus {0!r}", name)

    async def create_bus(self, spec: Any) -> Bus:
        bus = parse_bus(spec)
        async with self._lock:
            _unused(self.buses, bus.name, "event bus {0!r} exists", bus.name)
            await self.broker.ensure_topic(bus.topic, self.bus_queues)
            await self.registry.write("bus", bus.name, bus.spec)
            self.buses[bus.name] = bus
        log.info("event bus %s created (topic %s)", bus.name, bus.topic)
        return bus

    async def delete_bus(self, name: str) -> None:
        async with self._lock:
            self.bus(name)
            users = [k for k in self.rules if k.split("/")[0] == name] + \
                    [s.name for s in self.sources.values() if s.bus == name]
            if users:
                raise Conflict(f"event bus {name!r} still has rules or sources ({', '.join(sorted(users)[:5])}): "
                               f"delete them first")
            await self.registry.write("bus", name, None)
            del self.buses[name]

    # ---- sources -----------------------------------------------------------------------------

    def source(self, name: str) -> Source:
        return _existing(self.sources, name, "no event source {0!r}", name)

    async def create_source(self, spec: Any) -> Source:
        source = parse_source(spec)
        async with self._lock:
            self.bus(source.bus)
            _unused(self.sources, source.name, "event source {0!r} exists", source.name)
            await self.broker.ensure_topic(source_topic(source), self.broker.config.default_topic_queue_nums)
            self._commit_at_end(source.group, source_topic(source))
            await self.registry.write("source", source.name, source.spec)
            self.sources[source.name] = source
            await self._start_source(source)
        return source

    async def delete_source(self, name: str) -> None:
        async with self._lock:
            self.source(name)
            await self.registry.write("source", name, None)
            del self.sources[name]
            self._stop(f"source:{name}")

    def source_state(self, name: str) -> str:
        running = self._running.get(f"source:{name}")
        return running.state if running is not None else "stopped"

    # ---- rules -------------------------------------------------------------------------------

    def rule(self, bus: str, name: str) -> Rule:
        return _existing(self.rules, f"{bus}/{name}", "no rule {0!r} on event bus {1!r}", name, bus)

    def rule_state(self, rule: Rule) -> str:
        running = self._running.get(f"rule:{rule.key}")
        if running is not None:
            return running.state
        return "disabled" if not rule.enabled else "stopped"

    async def create_rule(self, spec: Any) -> Rule:
        rule = parse_rule(spec)
        async with self._lock:
            self.bus(rule.bus)
            _unused(self.rules, rule.key, "rule {0!r} exists on event bus {1!r}", rule.name, rule.bus)
            await self.registry.write("rule", rule.key, rule.spec)
            self.rules[rule.key] = rule
            self.counts[rule.key] = RuleCounts()
            if rule.enabled:
                self._commit_at_end(rule.group, bus_topic(rule.bus))
                await self._start_rule(rule)
        log.info("rule %s created (%s)", rule.key, "enabled" if rule.enabled else "disabled")
        return rule

    async def set_enabled(self, bus: str, name: str, enabled: bool) -> Rule:
        async with self._lock:
            rule = self.rule(bus, name)
            if rule.enabled == enabled:
                return rule
            new = parse_rule({**rule.spec, "enabled": enabled})
            await self.registry.write("rule", rule.key, new.spec)
            self.rules[rule.key] = new
            if enabled:
                self._commit_at_end(new.group, bus_topic(new.bus))
                await self._start_rule(new)
            else:
                self._stop(f"rule:{rule.key}")
            return new

    async def delete_rule(self, bus: str, name: str) -> None:
        async with self._lock:
            rule = self.rule(bus, name)
            await self.registry.write("rule", rule.key, None)
            await self.registry.write("counts", rule.key, None)
            del self.rules[rule.key]
            self.counts.pop(rule.key, None)
            self._written_counts.pop(rule.key, None)
            self._stop(f"rule:{rule.key}")

    def rule_json(self, rule: Rule) -> dict:
        counts = self.counts.get(rule.key) or RuleCounts()
        return {"bus": rule.bus, "name": rule.name, "enabled": rule.enabled, "state": self.rule_state(rule),
                "targets": [t.label for t in rule.targets], "group": rule.group,
                "deadLetterTopic": rule.dead_letter_topic, **counts.as_json(), "spec": rule.spec}

    @staticmethod
    def test_pattern(pattern: Any, event: Any) -> bool:
        """Whether ``pattern`` matches ``event`` (a `PatternError` when the pattern is malformed)."""
        return compile_pattern(pattern).matches(event)

    # ---- PutEvents ---------------------------------------------------------------------------

    async def put_events(self, bus_name: str, events: list[dict]) -> list[str]:
        """Store ``events`` (already checked, `envelope.events_from_http`) on the bus; their ids."""
        bus = self.bus(bus_name)
        cfg = self.broker.get_topic(bus.topic) or await self.broker.ensure_topic(bus.topic, self.bus_queues)
        n = max(1, cfg.write_queue_nums)
        items = []
        for event in events:
            subject = event.get("subject")
            qid = zlib.crc32(subject.encode()) % n if isinstance(subject, str) and subject else None
            props = ce_properties(event)
            props["KEYS"] = str(event.get("id", ""))[:200].replace(" ", "_")
            items.append((Message(topic=bus.topic, body=encode_event(event), properties=props), qid))
        results = await self.broker.send_many(items)
        bad = [r for r in results if not r.ok]
        if bad or len(results) != len(items):
            first = bad[0] if bad else None
            raise StoreRefused(f"the broker did not store the events: "
                               f"{first.status.name if first else 'no answer'} {first.remark if first else ''}".strip())
        return [str(e.get("id")) for e in events]
