"""Buses, sources, rules and targets: parsed from JSON (or TOML) objects, checked before anything is stored.

Shapes (docs/EVENTS.md has the user's guide)::

    bus:    {"name": "iot", "description": "..."}
    source: {"name": "telemetry", "bus": "iot", "kind": "mqtt", "mqttTopic": "devices/+/telemetry",
             "type": "mqgate.mqtt.publish"}                       # kind "mqtt" only: HTTP and native
                                                                  # sources need no declaration
    rule:   {"name": "hot-a", "bus": "iot", "enabled": true, "pattern": {...}, "transform": {...},
             "targets": [{"type": "http", "url": "http://...", "mode": "binary", "headers": {}, "timeout": 5},
                         {"type": "mqtt", "topic": "alerts/hot", "qos": 1, "retain": false},
                         {"type": "topic", "topic": "Alerts", "tag": "hot", "keys": "$.subject"}],
             "maxRetries": 16, "deadLetterTopic": "", "ordered": false, "concurrency": 8}

Rules kept here:
- Names are 1..64 of ``[A-Za-z0-9_-]`` so every derived broker topic or
  group name is valid: the bus topic is ``MQGATE_EVENTBUS_<bus>``, a rule's
  consumer group ``MQGATE_EVENTRULE_<bus>_<rule>``, its default dead-letter
  topic ``MQGATE_EVENTDLQ_<bus>_<rule>``, an MQTT source's group
  ``MQGATE_EVENTSOURCE_<source>``.
- Every error is a `SpecError` whose message starts with the path of the
  bad key (``targets[0].url: ...``, ``pattern.data.temp: ...``).
- A parsed object keeps the JSON it came from (``spec``): that is what the
  registry stores and what ``show`` prints; compiling it again gives the same object.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from core.broker import validate_topic

from .pattern import Pattern, PatternError, compile_pattern
from .transform import Transform, TransformError, compile_transform

__all__ = ["Bus", "Rule", "Source", "SpecError", "Target", "parse_bus", "parse_rule", "parse_source"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
BUS_TOPIC_PREFIX = "MQGATE_EVENTBUS_"
TARGET_TYPES = ("http", "mqtt", "topic")
DEFAULT_MAX_RETRIES = 16  # RocketMQ's maxReconsumeTimes
DEFAULT_CONCURRENCY = 8


class SpecError(ValueError):
    """A bus, source or rule that cannot be accepted; the message starts with the bad path."""


def _obj(spec: Any, what: str) -> dict:
    if not isinstance(spec, dict):
        raise SpecError(f"(top): a {what} is a JSON object, not {type(spec).__name__}")
    return spec


def _name(spec: dict, key: str) -> str:
    value = spec.get(key)
    if not isinstance(value, str) or not _NAME.match(value):
        raise SpecError(f"{key}: 1 to 64 of A-Z a-z 0-9 _ - is needed, not {value!r}")
    return value


def _known(spec: dict, keys: set[str], path: str = "") -> None:
    extra = set(spec) - keys
    if extra:
        raise SpecError(f"{path}{sorted(extra)[0]}: unknown key; known: {', '.join(sorted(keys))}")


def _typed(spec: dict, key: str, kind, default, path: str = ""):
    value = spec.get(key, default)
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else "a number"
        raise SpecError(f"{path}{key}: {name} is needed, not {value!r}")
    return value


@dataclass(frozen=True)
class Bus:
    name: str
    description: str = ""
    spec: dict = field(default_factory=dict, compare=False)

    @property
    def topic(self) -> str:
        return BUS_TOPIC_PREFIX + self.name


def bus_topic(name: str) -> str:
    return BUS_TOPIC_PREFIX + name


def parse_bus(spec: Any) -> Bus:
    spec = _obj(spec, "bus")
    _known(spec, {"name", "description"})
    return Bus(_name(spec, "name"), _typed(spec, "description", str, ""), spec)


@dataclass(frozen=True, kw_only=True)
class _OnBus:
    """What a source and a rule share: a name, the bus they feed or read, the JSON they came from."""
    name: str
    bus: str
    spec: dict = field(default_factory=dict, compare=False)


def _parse_on_bus(spec: Any, what: str, keys: set[str]) -> dict:
    """``name``, ``bus`` and ``spec`` (the keyword arguments of `_OnBus`) of a
    source's or rule's ``spec``, which has no key outside ``keys``."""
    spec = _obj(spec, what)
    _known(spec, keys)
    return {"name": _name(spec, "name"), "bus": _name(spec, "bus"), "spec": spec}


@dataclass(frozen=True)
class Source(_OnBus):
    kind: str
    mqtt_topic: str
    type: str

    @property
    def group(self) -> str:
        return f"MQGATE_EVENTSOURCE_{self.name}"

    @property
    def first_level(self) -> str:
        return self.mqtt_topic.split("/", 1)[0]


def parse_source(spec: Any) -> Source:
    on_bus = _parse_on_bus(spec, "source", {"name", "bus", "kind", "mqttTopic", "type", "description"})
    spec = on_bus["spec"]
    kind = spec.get("kind", "mqtt")
    if kind != "mqtt":
        raise SpecError(f"kind: only \"mqtt\" sources are declared (PutEvents and native sends to the bus topic "
                        f"need none), not {kind!r}")
    flt = _typed(spec, "mqttTopic", str, "")
    levels = flt.split("/")
    if not flt or any(("+" in lv and lv != "+") or ("#" in lv and lv != "#") for lv in levels) \
            or "#" in levels[:-1]:
        raise SpecError(f"mqttTopic: a valid MQTT topic filter is needed, not {flt!r}")
    if levels[0] in ("+", "#") or levels[0].startswith("$"):
        raise SpecError(f"mqttTopic: the first level must be a plain name (the source reads the broker topic "
                        f"of that level), not {levels[0]!r}")
    return Source(kind, flt, _typed(spec, "type", str, "mqgate.mqtt.publish") or "mqgate.mqtt.publish", **on_bus)


@dataclass(frozen=True)
class Target:
    type: str
    options: dict

    @property
    def label(self) -> str:
        o = self.options
        return {"http": o.get("url", ""), "mqtt": f"mqtt:{o.get('topic')}", "topic": f"topic:{o.get('topic')}"}[self.type]


def _parse_target(spec: Any, i: int) -> Target:
    path = f"targets[{i}]."
    if not isinstance(spec, dict):
        raise SpecError(f"targets[{i}]: a target is an object with \"type\" ({', '.join(TARGET_TYPES)})")
    kind = spec.get("type")
    if kind == "http":
        _known(spec, {"type", "url", "mode", "headers", "timeout", "concurrency"}, path)
        url = _typed(spec, "url", str, "", path)
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise SpecError(f"{path}url: an http:// or https:// URL is needed, not {url!r}")
        mode = spec.get("mode", "binary")
        if mode not in ("binary", "structured"):
            raise SpecError(f"{path}mode: \"binary\" or \"structured\", not {mode!r}")
        headers = _typed(spec, "headers", dict, {}, path)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise SpecError(f"{path}headers: an object of text -> text is needed")
        timeout = _typed(spec, "timeout", (int, float), 5, path)
        if not 0 < timeout <= 300:
            raise SpecError(f"{path}timeout: seconds in (0, 300], not {timeout!r}")
        opts = {"url": url, "mode": mode, "headers": headers, "timeout": float(timeout)}
    elif kind == "mqtt":
        _known(spec, {"type", "topic", "qos", "retain", "concurrency"}, path)
        topic = _typed(spec, "topic", str, "", path)
        if not topic or "+" in topic or "#" in topic or topic.startswith("$"):
            raise SpecError(f"{path}topic: an MQTT topic name (no wildcards, not $...) is needed, not {topic!r}")
        qos = spec.get("qos", 1)
        if qos not in (0, 1, 2) or isinstance(qos, bool):
            raise SpecError(f"{path}qos: 0, 1 or 2, not {qos!r}")
        opts = {"topic": topic, "qos": qos, "retain": _typed(spec, "retain", bool, False, path)}
    elif kind == "topic":
        _known(spec, {"type", "topic", "tag", "keys", "concurrency"}, path)
        topic = _typed(spec, "topic", str, "", path)
        problem = validate_topic(topic)
        if problem:
            raise SpecError(f"{path}topic: {problem}")
        keys = _typed(spec, "keys", str, "", path)
        if keys and not keys.startswith("$"):
            raise SpecError(f"{path}keys: a JSONPath (e.g. \"$.subject\") whose value becomes the KEYS, not {keys!r}")
        opts = {"topic": topic, "tag": _typed(spec, "tag", str, "", path), "keys": keys}
    else:
        raise SpecError(f"{path}type: one of {', '.join(TARGET_TYPES)} is needed, not {kind!r}")
    concurrency = _typed(spec, "concurrency", int, 4, path)
    if not 1 <= concurrency <= 256:
        raise SpecError(f"{path}concurrency: 1..256 deliveries at a time, not {concurrency!r}")
    opts["concurrency"] = concurrency
    return Target(kind, opts)


@dataclass(frozen=True)
class Rule(_OnBus):
    enabled: bool
    pattern: Pattern
    transform: Transform
    targets: tuple[Target, ...]
    max_retries: int
    dead_letter_topic: str
    ordered: bool
    concurrency: int

    @property
    def group(self) -> str:
        return f"MQGATE_EVENTRULE_{self.bus}_{self.name}"

    @property
    def key(self) -> str:
        return f"{self.bus}/{self.name}"


RULE_KEYS = {"name", "bus", "enabled", "pattern", "transform", "targets", "maxRetries", "deadLetterTopic",
             "ordered", "concurrency", "description"}


def parse_rule(spec: Any) -> Rule:
    on_bus = _parse_on_bus(spec, "rule", RULE_KEYS)
    spec, name, bus = on_bus["spec"], on_bus["name"], on_bus["bus"]
    try:
        pattern = compile_pattern(spec.get("pattern"))
    except PatternError as e:
        raise SpecError(f"pattern.{e}" if not str(e).startswith("(top)") else f"pattern{str(e)[5:]}") from None
    try:
        transform = compile_transform(spec.get("transform"))
    except TransformError as e:
        raise SpecError(str(e)) from None
    targets = spec.get("targets")
    if not isinstance(targets, list) or not targets:
        raise SpecError("targets: a list of at least one target is needed")
    parsed = tuple(_parse_target(t, i) for i, t in enumerate(targets))
    retries = _typed(spec, "maxRetries", int, DEFAULT_MAX_RETRIES)
    if not 0 <= retries <= 16:
        raise SpecError(f"maxRetries: 0..16 (RocketMQ's retry levels), not {retries!r}")
    dlq = _typed(spec, "deadLetterTopic", str, "") or f"MQGATE_EVENTDLQ_{bus}_{name}"
    problem = validate_topic(dlq)
    if problem:
        raise SpecError(f"deadLetterTopic: {problem}")
    concurrency = _typed(spec, "concurrency", int, DEFAULT_CONCURRENCY)
    if not 1 <= concurrency <= 256:
        raise SpecError(f"concurrency: 1..256 events at a time, not {concurrency!r}")
    _typed(spec, "description", str, "")
    return Rule(_typed(spec, "enabled", bool, True), pattern, transform, parsed, retries, dlq,
                _typed(spec, "ordered", bool, False), concurrency, **on_bus)
