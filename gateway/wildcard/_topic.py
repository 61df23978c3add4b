"""MQTT topic names and topic filters: validation, parsing, single-filter matching.

Rules kept here (MQTT 3.1.1 section 4.7, MQTT 5.0 sections 4.7 and 4.8.2):

- A topic name or filter is a ``str`` of at least one character, at most
  65535 bytes once UTF-8 encoded, with no U+0000 and no lone surrogate (it
  must be encodable as UTF-8).
- A topic name contains neither ``+`` nor ``#``.
- In a topic filter, ``#`` is allowed only as the whole last level (``#`` or
  ``.../#``) and ``+`` only as a whole level (``+``, ``a/+``, ``+/b``).
- A filter starting with ``$share/`` is a shared subscription
  ``$share/<group>/<filter>``: the group is non-empty and contains no ``/``,
  ``+`` or ``#``; the filter after it is non-empty and valid by the rules
  above. ``$share`` on its own (no slash) is an ordinary filter.
- Levels are split on ``/`` and may be empty: ``a//b`` has three levels and
  ``/`` has two empty ones.
- Matching: ``+`` matches exactly one level, empty levels included; ``#``
  matches its parent level and every level below (``a/#`` matches ``a``); a
  topic whose first level starts with ``$`` is not matched by a filter whose
  first level is ``+`` or ``#``.

Every violation raises :class:`TopicError` (a ``ValueError``) whose message
says what is wrong; the caller maps it to a reason code or a close.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MAX_TOPIC_BYTES",
    "SHARE_PREFIX",
    "TopicError",
    "TopicFilter",
    "parse_filter",
    "topic_matches",
    "validate_topic_filter",
    "validate_topic_name",
]

#: Topic names and filters are UTF-8 strings with a 16-bit length prefix.
MAX_TOPIC_BYTES = 65535
SHARE_PREFIX = "$share/"


class TopicError(ValueError):
    """A topic name or topic filter breaks the MQTT rules."""


@dataclass(frozen=True, slots=True)
class TopicFilter:
    """A validated subscription filter.

    ``group`` is the share name of a ``$share/<group>/<filter>`` subscription
    and ``None`` otherwise; ``filter`` is the topic filter proper (without the
    ``$share/<group>/`` prefix) and ``levels`` its ``/``-separated levels.
    ``text`` is the filter exactly as the client sent it.
    """

    text: str
    filter: str
    levels: tuple[str, ...]
    group: str | None = None

    @property
    def is_shared(self) -> bool:
        return self.group is not None

    @property
    def has_wildcard(self) -> bool:
        return "+" in self.levels or "#" in self.levels


def _check_common(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise TopicError(f"{what} must be a str, not {type(text).__name__}")
    if not text:
        raise TopicError(f"{what} is empty")
    if "\x00" in text:
        raise TopicError(f"{what} contains U+0000")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise TopicError(f"{what} is not valid UTF-8 (lone surrogate)") from None
    if size > MAX_TOPIC_BYTES:
        raise TopicError(f"{what} is {size} bytes long, more than {MAX_TOPIC_BYTES}")
    return text


def validate_topic_name(name: str) -> None:
    """Raise :class:`TopicError` unless *name* is a valid PUBLISH topic name."""
    _check_common(name, "topic name")
    if "+" in name or "#" in name:
        raise TopicError(f"topic name {name!r} contains a wildcard (+ or #)")


def _check_filter_levels(text: str, levels: list[str], what: str) -> None:
    last = len(levels) - 1
    for i, level in enumerate(levels):
        if "#" in level:
            if level != "#":
                raise TopicError(f"{what} {text!r}: '#' must be a whole level")
            if i != last:
                raise TopicError(f"{what} {text!r}: '#' must be the last level")
        elif "+" in level and level != "+":
            raise TopicError(f"{what} {text!r}: '+' must be a whole level")


def parse_filter(text: str) -> TopicFilter:
    """Validate a SUBSCRIBE / UNSUBSCRIBE topic filter and split it into levels.

    ``$share/<group>/<filter>`` is parsed into its group and filter.
    """
    _check_common(text, "topic filter")
    group = None
    inner = text
    if text.startswith(SHARE_PREFIX):
        rest = text[len(SHARE_PREFIX):]
        group, sep, inner = rest.partition("/")
        if not group:
            raise TopicError(f"shared subscription {text!r}: share name is empty")
        if "+" in group or "#" in group:
            raise TopicError(
                f"shared subscription {text!r}: share name contains a wildcard"
            )
        if not sep or not inner:
            raise TopicError(f"shared subscription {text!r}: topic filter is empty")
    levels = inner.split("/")
    _check_filter_levels(text, levels, "topic filter")
    return TopicFilter(text=text, filter=inner, levels=tuple(levels), group=group)


def validate_topic_filter(text: str) -> None:
    """Raise :class:`TopicError` unless *text* is a valid topic filter."""
    parse_filter(text)


def topic_matches(topic_filter: str | TopicFilter, topic: str) -> bool:
    """True if the (already valid) *topic* is matched by *topic_filter*.

    A ``$share/<group>/`` prefix is ignored: the inner filter decides. Used for
    one-off checks (retained messages on subscribe, ACL patterns); bulk
    matching goes through :class:`SubscriptionTrie`.
    """
    if isinstance(topic_filter, str):
        topic_filter = parse_filter(topic_filter)
    flevels = topic_filter.levels
    tlevels = topic.split("/")
    if tlevels[0].startswith("$") and flevels[0] in ("+", "#"):
        return False
    for i, f in enumerate(flevels):
        if f == "#":
            return True
        if i >= len(tlevels):
            return False
        if f != "+" and f != tlevels[i]:
            return False
    return len(flevels) == len(tlevels)
