"""Tag subscription expressions (RocketMQ ``FilterAPI.buildSubscriptionData``).

``*`` (or empty) subscribes to everything. ``TagA || TagB`` splits on
``||``, trims each part and keeps the non-empty ones as ``tags``; ``codes``
holds Java ``String.hashCode`` of each, which is what consume-queue units
store, so the broker filters on codes alone (a hash collision lets a
message through; clients filter again by tag string, and so does
`SubscriptionData.matches`). An expression with no tag at all (``||``) is
a `SubscriptionParseError` here, where RocketMQ would silently match
nothing.

Expression type SQL92 compiles the text with `core.broker.sql92` (cached by
text, so once per subscription); such a subscription filters nothing by tag
code and everything by `entry_filter`, which reads each candidate entry's
properties from the commit log. A bad expression is a
`SubscriptionParseError` whose text starts like RocketMQ's remark ("parse
the consumer's subscription failed") and goes on with the position and reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Callable

from core.store import MessageFormatError, entry_properties
from core.store.java_hash import java_string_hash

from .sql92 import Sql92Error, Sql92Filter, compile_sql92

SUB_ALL = "*"
EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"


def property_filter_refusal(expression_type: str) -> str:
    """4.x's remark (with SYSTEM_ERROR) for a non-TAG filter when ``enablePropertyFilter`` is off."""
    return f"The broker does not support consumer to filter message by {expression_type}"


class SubscriptionParseError(ValueError):
    """An expression the broker cannot use (SUBSCRIPTION_PARSE_FAILED)."""


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    tags: frozenset[str] = frozenset()
    codes: frozenset[int] = frozenset()
    expression_type: str = EXPRESSION_TAG
    sql: Sql92Filter | None = None  # the compiled SQL92 expression

    @property
    def is_sql92(self) -> bool:
        return self.sql is not None

    @property
    def matches_all(self) -> bool:
        return self.sql is None and self.sub_string == SUB_ALL

    def matches_code(self, tags_code: int) -> bool:
        return self.matches_all or self.sql is not None or tags_code in self.codes

    def matches(self, tags: str | None) -> bool:
        """Exact (string) check, as a client does after the broker's code filter
        (SQL92: no tag check, the broker filtered on properties)."""
        return self.matches_all or self.sql is not None or (tags is not None and tags in self.tags)

    def code_filter(self) -> frozenset[int] | None:
        """What the store's ``tag_codes`` argument takes: None = no filtering."""
        return None if self.matches_all or self.sql is not None else self.codes

    def entry_filter(self) -> Callable[[bytes], bool] | None:
        """What the store's ``entry_filter`` argument takes: None = no filtering."""
        sql = self.sql
        if sql is None:
            return None

        def matches_entry(raw: bytes) -> bool:
            try:
                props = entry_properties(raw)
            except (MessageFormatError, UnicodeDecodeError):
                return False
            return sql.matches(props)
        return matches_entry


def parse_subscription(topic: str, expression: str | None, expression_type: str | None = EXPRESSION_TAG) -> SubscriptionData:
    if expression_type == EXPRESSION_SQL92:
        if not expression:
            raise SubscriptionParseError("parse the consumer's subscription failed: an SQL92 expression can't be empty")
        try:
            sql = compile_sql92(expression)
        except Sql92Error as e:
            raise SubscriptionParseError(f"parse the consumer's subscription failed: {e}") from None
        return SubscriptionData(topic, expression, expression_type=EXPRESSION_SQL92, sql=sql)
    if expression_type not in (None, "", EXPRESSION_TAG):
        raise SubscriptionParseError(f"expression type {expression_type!r} is not supported (TAG or SQL92)")
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
