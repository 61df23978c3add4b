"""Reversible mapping of an MQTT first-level topic onto a broker topic name.

An MQTT topic ``a/b/c`` is stored in broker topic ``a`` (ARCHITECTURE
decision 3). MQTT allows almost any UTF-8 in a level; broker names allow
only ``[%|a-zA-Z0-9_-]``. The mapping:

- ``a-z A-Z 0-9 _ -`` stand for themselves, so ``sensors`` -> ``sensors``
  and every plain native topic is its own MQTT level;
- every other character becomes the ``%XX`` escapes (uppercase hex) of its
  UTF-8 bytes: ``sensors.v2`` -> ``sensors%2Ev2``, ``$SYS`` -> ``%24SYS``,
  ``%`` -> ``%25``, ``|`` -> ``%7C``;
- the empty level (MQTT topic ``/x``) maps to ``%`` alone.

Invariants: `mqtt_level_to_topic` is injective and its results pass
`validate_topic` or it raises `ValueError` (longer than 127 characters);
`topic_to_mqtt_level` inverts it exactly and returns None for any name that
is not an image (``%RETRY%G``, ``a|b``, lowercase ``%2e``), so no two MQTT
levels share a broker topic and no broker-internal topic is taken for an
MQTT one. Escapes never produce ``%RETRY%``/``%DLQ%`` prefixes (two hex
digits always follow a ``%``).
"""

from __future__ import annotations

import re

from .topics import TOPIC_MAX_LENGTH

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_PLAIN_RE = re.compile(r"^[a-zA-Z0-9_-]+$")
_IMAGE_RE = re.compile(r"^(?:[a-zA-Z0-9_-]|%[0-9A-F]{2})+$")
_EMPTY_LEVEL = "%"


def mqtt_level_to_topic(level: str) -> str:
    """Broker topic for an MQTT first level; `ValueError` if it would exceed 127 chars."""
    if _PLAIN_RE.match(level):
        name = level
    elif level == "":
        return _EMPTY_LEVEL
    else:
        if "/" in level:
            raise ValueError(f"an MQTT level has no '/': {level!r}")
        name = "".join(c if c in _PLAIN else "".join(f"%{b:02X}" for b in c.encode()) for c in level)
    if len(name) > TOPIC_MAX_LENGTH:
        raise ValueError(f"MQTT level {level[:40]!r}... maps to a topic longer than {TOPIC_MAX_LENGTH} characters")
    return name


def mqtt_topic_to_topic(mqtt_topic: str) -> str:
    """Broker topic for a full MQTT topic name: its first level, mapped."""
    return mqtt_level_to_topic(mqtt_topic.split("/", 1)[0])


def topic_to_mqtt_level(name: str) -> str | None:
    """The MQTT first level a broker topic stands for, or None if it is no image."""
    if _PLAIN_RE.match(name):
        return name
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
