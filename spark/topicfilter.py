"""MQTT topic filters (`+`, `#`) for the commit-log source, scalar and vectorised.

Rules kept here (MQTT 3.1.1 section 4.7, MQTT 5.0 section 4.7):
- `+` matches exactly one level (possibly empty); `#` is last, alone in its
  level, and matches the parent level and any number of child levels, so
  `a/#` matches `a`, `a/` and `a/b/c`.
- A filter starting with a wildcard does not match topics starting with `$`.
- `to_regex(f)` matches exactly the topics `matches(f, topic)` accepts; the
  tests hold the two against each other.
This room may not import `gateway.wildcard`, hence this small copy.
"""

from __future__ import annotations

class FilterError(ValueError):
    pass


def validate(topic_filter: str) -> list[str]:
    if not topic_filter:
        raise FilterError("empty topic filter")
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise FilterError(f"'#' must be a whole last level: {topic_filter!r}")
        if "+" in level and level != "+":
            raise FilterError(f"'+' must be a whole level: {topic_filter!r}")
    return levels


def matches(topic_filter: str, topic: str) -> bool:
    levels = validate(topic_filter)
    if topic.startswith("$") and levels[0] in ("+", "#"):
        return False
    parts = topic.split("/")
    for i, level in enumerate(levels):
        if level == "#":
            return True
        if i >= len(parts):
            return False
        if level != "+" and level != parts[i]:
            return False
    return len(parts) == len(levels)


def to_regex(topic_filter: str) -> str:
    """A full-match RE2/Python regular expression equivalent to `matches`."""
    levels = validate(topic_filter)
    parts = []
    for i, level in enumerate(levels):
        if level == "#":
            # `a/#` also matches `a`; a leading `#` must not match `$` topics
            parts.append("(?:/.*)?" if i else "(?:[^$].*)?")
            break
        if level == "+":
            # a leading `+` must not match `$` topics (it may match an empty level)
            parts.append(("/" if i else "") + ("[^/]*" if i else "(?:[^$/][^/]*)?"))
        else:
            parts.append(("/" if i else "") + _escape(level))
    return "(?s)^" + "".join(parts) + "$"


_SPECIAL = set("\\.^$|?*+()[]{}")


def _escape(text: str) -> str:
    # RE2 (pyarrow) and Python agree on backslash-escaped metacharacters only
    return "".join("\\" + c if c in _SPECIAL else c for c in text)
