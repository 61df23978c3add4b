"""Tag subscription expressions (RocketMQ ``FilterAPI.buildSubscriptionData``).

``*`` (or empty) subscribes to everything. ``TagA || TagB`` splits on
``||``, trims each part and keeps the non-empty ones as ``tags``; ``codes``
holds Java ``String.hashCode`` of each, which is what consume-queue units
store, so the broker filters on codes alone (a hash collision lets a
message through; clients filter again by tag string, and so does
`SubscriptionData.matches`). An expression with no tag at all (``||``) is
a `SubscriptionParseError` here, where RocketMQ would silently match
nothing. Only the TAG expression type exists; SQL92 is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.store.java_hash import java_string_hash

SUB_ALL = "*"


class SubscriptionParseError(ValueError):
    """An expression the broker cannot use (SUBSCRIPTION_PARSE_FAILED)."""


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    tags: frozenset[str] = frozenset()
    codes: frozenset[int] = frozenset()
    expression_type: str = "TAG"

    @property
    def matches_all(self) -> bool:
        return self.sub_string == SUB_ALL

    def matches_code(self, tags_code: int) -> bool:
        return self.matches_all or tags_code in self.codes

    def matches(self, tags: str | None) -> bool:
        """Exact (string) check, as a client does after the broker's code filter."""
        return self.matches_all or (tags is not None and tags in self.tags)

    def code_filter(self) -> frozenset[int] | None:
        """What the store's ``tag_codes`` argument takes: None = no filtering."""
        return None if self.matches_all else self.codes


def parse_subscription(topic: str, expression: str | None, expression_type: str | None = "TAG") -> SubscriptionData:
    if expression_type not in (None, "", "TAG"):
        raise SubscriptionParseError(f"expression type {expression_type!r} is not supported (only TAG)")
    text = (expression or "").strip()
    if text in ("", SUB_ALL):
        return SubscriptionData(topic)
    tags = [t.strip() for t in text.split("||")]
    tags = [t for t in tags if t]
    if not tags:
        raise SubscriptionParseError(f"no tag in subscription expression {expression!r}")
    if SUB_ALL in tags:
        return SubscriptionData(topic)
    return SubscriptionData(topic, text, frozenset(tags), frozenset(java_string_hash(t) for t in tags))
