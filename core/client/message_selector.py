"""How a consumer chooses messages (Java ``MessageSelector``): by tag or by SQL92.

- `MessageSelector.by_tag` (``*``, ``TagA || TagB``) is the same as passing the
  expression as a string to ``subscribe``; the broker filters by tag hash
  code and the client again by tag string.
- `MessageSelector.by_sql` sends expression type ``SQL92``: the broker
  evaluates it on each message's properties (and ``TAGS``) and the client
  does not filter again. The broker must run with ``enablePropertyFilter =
  true``; a consumer with an SQL92 subscription asks each broker of the
  topic with CHECK_CLIENT_CONFIG when it starts (as the Java client does),
  so a refusal or a syntax error fails ``start`` with `MQBrokerError`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EXPRESSION_SQL92", "EXPRESSION_TAG", "MessageSelector"]

EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"


@dataclass(frozen=True, slots=True)
class MessageSelector:
    expression_type: str
    expression: str

    @classmethod
    def by_sql(cls, sql: str) -> "MessageSelector":
        """``MessageSelector.by_sql("temp > 30 AND site = 'lab'")``."""
        if not sql or not sql.strip():
            raise ValueError("an SQL92 selector needs an expression")
        return cls(EXPRESSION_SQL92, sql)

    @classmethod
    def by_tag(cls, tag: str | None = "*") -> "MessageSelector":
        return cls(EXPRESSION_TAG, (tag or "").strip() or "*")
