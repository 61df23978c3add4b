"""Reversible mapping of an MQTT first-level topic onto a broker topic name.

An MQTT topic ``a/b/c`` is stored in broker topic ``a`` (ARCHITECTURE
decision 3). MQTT allows almost any UTF-8 in a level; broker names allow
only ``[%|a-zA-Z0-9_-]``. The mapping:

- ``a-z A-Z 0-9 _ -`` stand for themselves, so ``sensors`` -> ``sensors``
  and every plain native topic is its own MQTT level;
- every other character becomes the ``%XX`` escapes (uppercase hex) of its
  UTF-8 bytes: ``sensors.v2`` -> ``sensors%2Ev2``, ``$SYS`` -> ``%24SYS``,
  ``%`` -> ``%25``, ``|`` -> ``%7C``;
- the empty level (MQTT topic ``/x``) maps to ``%`` alone;
- a level whose escaped name would be longer than 127 characters, or would
  be a broker-internal topic (``TBW102``, ``SCHEDULE_TOPIC_XXXX``,
  ``rmq_sys_*``, ...), maps to ``%%`` followed by the first 40 hex digits of
  the SHA-256 of its UTF-8 bytes. Such a name is never an escape image (a
  ``%`` is followed by two hex digits in those), so it takes no other
  level's topic; it is not reversible, which is fine: the gateway stores the
  full MQTT topic in every message (property ``mqttTopic``).

Invariants: `mqtt_level_to_topic` is injective (up to SHA-256 collisions)
and every result passes `validate_topic` and is no broker-internal topic;
`topic_to_mqtt_level` inverts it exactly for the escaped names and returns
None for any other name (``%RETRY%G``, ``a|b``, lowercase ``%2e``, hashed
names, internal topics), so no two MQTT levels share a broker topic and no
broker-internal topic is taken for an MQTT one. Escapes never produce
``%RETRY%``/``%DLQ%`` prefixes (two hex digits always follow a ``%``).
"""

from __future__ import annotations

import hashlib
import re

from .topics import DEFAULT_TOPIC, TOPIC_MAX_LENGTH, is_system_topic

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_PLAIN_RE = re.compile(r"^[a-zA-Z0-9_-]+$")
_IMAGE_RE = re.compile(r"^(?:[a-zA-Z0-9_-]|%[0-9A-F]{2})+$")
_EMPTY_LEVEL = "%"
_HASHED_PREFIX = "%%"


def _reserved(name: str) -> bool:
    return name == DEFAULT_TOPIC or is_system_topic(name)


def _hashed(level: str) -> str:
    return _HASHED_PREFIX + hashlib.sha256(level.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def mqtt_level_to_topic(level: str) -> str:
    """Broker topic for an MQTT first level (never longer than 127 characters)."""
    if _PLAIN_RE.match(level):
        name = level
    elif level == "":
        return _EMPTY_LEVEL
    else:
        if "/" in level:
            raise ValueError(f"an MQTT level has no '/': {level!r}")
        name = "".join(c if c in _PLAIN else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
                       for c in level)
    if len(name) > TOPIC_MAX_LENGTH or _reserved(name):
        return _hashed(level)
    return name


def mqtt_topic_to_topic(mqtt_topic: str) -> str:
    """Broker topic for a full MQTT topic name: its first level, mapped."""
    return mqtt_level_to_topic(mqtt_topic.split("/", 1)[0])


def topic_to_mqtt_level(name: str) -> str | None:
    """The MQTT first level a broker topic stands for, or None if it is no image."""
    if _PLAIN_RE.match(name):
        return None if _reserved(name) else name
    if name == _EMPTY_LEVEL:
        return ""
    if not _IMAGE_RE.match(name):
        return None
    raw = bytearray()
    i = 0
    while i < len(name):
        if name[i] == "%":
            raw.append(int(name[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(ord(name[i]))
            i += 1
    try:
        level = raw.decode()
    except UnicodeDecodeError:
        return None
    # Exact inverse only: an escape of a plain character, or of '/', is not an image.
    if "/" in level:
        return None
    try:
        return level if mqtt_level_to_topic(level) == name else None
    except ValueError:
        return None
