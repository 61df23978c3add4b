"""SQL92 message filters: the grammar and semantics of RocketMQ 4.9's ``SelectorParser``.

An expression is parsed once (`compile_sql92`, cached by text) into a tree
of closures; `Sql92Filter.matches` runs them on a message's properties
(a ``dict[str, str]``: property values are strings on the wire).

Grammar (keywords case-insensitive; lowest precedence first)::

    or_expr    := and_expr (OR and_expr)*
    and_expr   := equality (AND equality)*
    equality   := comparison ('=' comparison | '<>' comparison | IS NULL | IS NOT NULL)*
    comparison := unary ('>' unary | '>=' unary | '<' unary | '<=' unary
                         | [NOT] BETWEEN unary AND unary | [NOT] IN '(' string (',' string)* ')')*
    unary      := '+' unary | '-' unary | NOT unary | primary
    primary    := string | integer | float | TRUE | FALSE | NULL | identifier | '(' or_expr ')'

``NOT`` binds like a sign, as in RocketMQ: ``NOT a = 'x'`` is ``(NOT a) = 'x'``;
write ``NOT (a = 'x')``. Identifiers are ``[A-Za-z_$][A-Za-z0-9_$]*``.
Comments ``-- ...`` and ``/* ... */`` are skipped.

Rules kept here (each as RocketMQ's evaluator has it):
- Three-valued logic: a comparison with a missing property is NULL
  (unknown); ``AND``/``OR`` follow SQL, and a message matches only when the
  whole expression is TRUE.
- A property is compared with a number constant as a number of the
  constant's Java type (``Integer``/``Long`` for integers by range, ``Double``
  for decimals); with a string constant as a string (``=``/``<>``).
  ``>``/``<`` between two strings compare them as doubles.
- A value that cannot be converted (``a > 5`` with ``a = 'abc'``) aborts
  the evaluation: the message does not match, whatever the rest says
  (RocketMQ catches the exception around the whole expression).
- Parse-time checks RocketMQ makes are errors here too: ``>``-family operands
  must not be string, boolean or NULL constants; ``= NULL`` is refused (use
  ``IS NULL``); ``BETWEEN`` bounds must be ordered; ``IN`` needs a property on
  its left; a float constant must be > 0 before its sign (RocketMQ's
  ``Double.MIN_VALUE`` check); the whole expression must be boolean.
- Unlike RocketMQ (which stops at the first complete expression), text
  after the expression is an error.
- Every error is one `Sql92Error` with the 1-based column (and offset) of
  the token at fault; nothing else escapes `compile_sql92`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from .sql92_eval import (
    DOUBLE_MIN_VALUE, INT_MAX, LONG_MAX, Eval, EvalAbort, JLong, Node, and_, bool_cast, compare, const, equal, in_,
    negate, not_, or_, ordered,
)

__all__ = ["Sql92Error", "Sql92Filter", "compile_sql92"]

MAX_DEPTH = 100  # evaluation recurses once per level, under the store's read lock


class Sql92Error(ValueError):
    """An SQL92 expression that cannot be compiled; ``offset`` is 0-based, ``column`` 1-based."""

    def __init__(self, reason: str, text: str, offset: int) -> None:
        self.reason, self.text, self.offset = reason, text, offset
        line = text.count("\n", 0, offset) + 1
        self.line = line
        self.column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        where = f"line {line}, column {self.column}" if "\n" in text else f"column {self.column}"
        super().__init__(f"SQL92 syntax error at {where}: {reason}")


# ------------------------------------------------------------------ tokens

_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r|\Z)|/\*(?:[^*]|\*+[^*/])*\*+/)
  | (?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
  | (?P<int>(?:0|[1-9][0-9]*)[lL]?)
  | (?P<str>'(?:''|[^'])*')
  | (?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|>=|<=|[=<>(),+-])
""", re.VERBOSE)


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # "int", "float", "str", "id", "kw", "op", "end"
    text: str
    pos: int


def _tokens(text: str) -> list[_Tok]:
    out = []
    pos, end = 0, len(text)
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None:
            if text.startswith("/*", pos):
                raise Sql92Error("unterminated /* comment", text, pos)
            if text[pos] == "'":
                raise Sql92Error("unterminated string constant", text, pos)
            raise Sql92Error(f"unexpected character {text[pos]!r}", text, pos)
        kind = m.lastgroup
        if kind != "ws":
            word = m.group()
            if kind == "id" and word.upper() in _KEYWORDS:
                kind, word = "kw", word.upper()
            out.append(_Tok(kind, word, pos))
        pos = m.end()
    out.append(_Tok("end", "", end))
    return out


# ------------------------------------------------------------------ the parser


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    # -- helpers

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def peek(self, n: int = 1) -> _Tok:
        return self.toks[min(self.i + n, len(self.toks) - 1)]

    def at(self, kind: str, text: str | None = None, tok: _Tok | None = None) -> bool:
        t = tok or self.tok
        return t.kind == kind and (text is None or t.text == text)

    def take(self) -> _Tok:
        t = self.tok
        self.i += 1
        return t

    def error(self, reason: str, tok: _Tok | None = None) -> Sql92Error:
        return Sql92Error(reason, self.text, (tok or self.tok).pos)

    def expect(self, kind: str, text: str, what: str) -> _Tok:
        if not self.at(kind, text):
            raise self.error(f"expected {what}, found {self.describe(self.tok)}")
        return self.take()

    @staticmethod
    def describe(t: _Tok) -> str:
        return "the end of the expression" if t.kind == "end" else repr(t.text)

    def as_boolean(self, node: Node, tok: _Tok) -> Node:
        if node.boolean:
            return node
        if node.kind == "prop":
            return bool_cast(node)
        raise self.error(f"expression will not result in a boolean value: {node.text}", tok)

    # -- grammar

    def parse(self) -> Node:
        start = self.tok
        node = self.as_boolean(self.or_expr(), start)
        if not self.at("end"):
            raise self.error(f"unexpected {self.describe(self.tok)} after a complete expression")
        if node.depth > MAX_DEPTH:
            raise self.error(f"expression nested too deeply (more than {MAX_DEPTH} levels)", start)
        return node

    def or_expr(self) -> Node:
        return self.joined("OR", self.and_expr, or_)

    def and_expr(self) -> Node:
        return self.joined("AND", self.equality, and_)

    def joined(self, keyword: str, operand: Callable[[], Node], combine: Callable[[Node, Node], Node]) -> Node:
        """``operand (keyword operand)*``, each side checked to be boolean."""
        start = self.tok
        left = operand()
        while self.at("kw", keyword):
            self.take()
            right_tok = self.tok
            right = operand()
            left = combine(self.as_boolean(left, start), self.as_boolean(right, right_tok))
        return left

    def equality(self) -> Node:
        left = self.comparison()
        while True:
            t = self.tok
            if self.at("op", "=") or self.at("op", "<>"):
                self.take()
                right = self.comparison()
                self.check_equal_operands(left, right, t)
                left = equal(left, right) if t.text == "=" else not_(equal(left, right))
            elif self.at("kw", "IS") and self.at("kw", "NULL", self.peek()):
                self.take(), self.take()
                left = equal(left, const(None, "bool_const"))
            elif self.at("kw", "IS") and self.at("kw", "NOT", self.peek()) and self.at("kw", "NULL", self.peek(2)):
                self.take(), self.take(), self.take()
                left = not_(equal(left, const(None, "bool_const")))
            elif self.at("kw", "IS"):
                raise self.error(f"expected NULL or NOT NULL after IS, found {self.describe(self.peek())}", self.peek())
            else:
                return left

    def comparison(self) -> Node:
        left = self.unary()
        while True:
            t = self.tok
            negated = self.at("kw", "NOT") and (self.at("kw", "BETWEEN", self.peek()) or self.at("kw", "IN", self.peek()))
            if t.kind == "op" and t.text in (">", ">=", "<", "<="):
                self.take()
                right = self.unary()
                left = self.ordered(t.text, left, right, t)
            elif self.at("kw", "BETWEEN") or (negated and self.at("kw", "BETWEEN", self.peek())):
                if negated:
                    self.take()
                self.take()
                low = self.unary()
                self.expect("kw", "AND", "AND in BETWEEN")
                high = self.unary()
                left = self.between(left, low, high, negated, t)
            elif self.at("kw", "IN") or negated:
                if negated:
                    self.take()
                self.take()
                left = self.in_list(left, negated, t)
            else:
                return left

    def unary(self) -> Node:
        if self.at("op", "+"):
            self.take()
            return self.unary()
        if self.at("op", "-"):
            self.take()
            return negate(self.unary())
        if self.at("kw", "NOT"):
            self.take()
            operand_tok = self.tok
            return not_(self.as_boolean(self.unary(), operand_tok))
        return self.primary()

    def primary(self) -> Node:
        t = self.tok
        if t.kind == "str":
            self.take()
            return const(t.text[1:-1].replace("''", "'"))
        if t.kind == "int":
            self.take()
            digits = t.text.rstrip("lL")
            v = int(digits)
            if v > LONG_MAX:
                raise self.error(f"integer constant {t.text} is out of the Long range", t)
            return const(v if v <= INT_MAX else JLong(v))
        if t.kind == "float":
            self.take()
            v = float(t.text)
            if math.isinf(v):
                raise self.error(f"{t.text} is greater than {1.7976931348623157e308!r}", t)
            if v < DOUBLE_MIN_VALUE:
                raise self.error(f"{t.text} is less than 4.9E-324 (RocketMQ refuses a zero float constant)", t)
            return const(v)
        if t.kind == "kw" and t.text in ("TRUE", "FALSE", "NULL"):
            self.take()
            return const({"TRUE": True, "FALSE": False, "NULL": None}[t.text], "bool_const")
        if t.kind == "id":
            self.take()
            name = t.text
            return Node("prop", lambda props: props.get(name), name, name)
        if self.at("op", "("):
            self.take()
            node = self.or_expr()
            self.expect("op", ")", "')'")
            return node
        raise self.error(f"expected a value, a property name or '(', found {self.describe(t)}", t)

    # -- checks RocketMQ makes while building nodes

    def check_ordered_operand(self, node: Node, tok: _Tok) -> None:
        if (node.constant and not isinstance(node.value, (int, float))) or isinstance(node.value, bool) or node.boolean:
            raise self.error(f"value {node.text} cannot be compared with >, >=, < or <= (numbers only)", tok)

    def check_equal_operands(self, left: Node, right: Node, tok: _Tok) -> None:
        for node in (left, right):
            if node.constant and node.value is None:
                raise self.error("NULL cannot be compared with = or <>; use IS NULL or IS NOT NULL", tok)
        if left.constant and right.constant and left.kind == "bool_const" and right.kind != "bool_const":
            raise self.error(f"{left.text} cannot be compared with {right.text}", tok)

    def ordered(self, op: str, left: Node, right: Node, tok: _Tok) -> Node:
        self.check_ordered_operand(left, tok)
        self.check_ordered_operand(right, tok)
        return ordered(op, left, right)

    def between(self, value: Node, low: Node, high: Node, negated: bool, tok: _Tok) -> Node:
        if negated:
            return or_(self.ordered("<", value, low, tok), self.ordered(">", value, high, tok))
        if low.constant and high.constant:
            if low.value is None or high.value is None:
                raise self.error("BETWEEN bounds cannot be NULL", tok)
            try:
                wrong = compare(high.value, low.value) < 0
            except EvalAbort:
                raise self.error(f"BETWEEN bounds {low.text} and {high.text} cannot be compared", tok) from None
            if wrong:
                raise self.error(f"BETWEEN bounds are reversed: {low.text} must be <= {high.text}", tok)
        return and_(self.ordered(">=", value, low, tok), self.ordered("<=", value, high, tok))

    def in_list(self, left: Node, negated: bool, tok: _Tok) -> Node:
        if left.kind != "prop":
            raise self.error(f"IN needs a property on its left, got {left.text}", tok)
        self.expect("op", "(", "'(' after IN")
        values = []
        while True:
            t = self.tok
            if t.kind != "str":
                raise self.error(f"IN takes string constants only, found {self.describe(t)}", t)
            self.take()
            values.append(t.text[1:-1].replace("''", "'"))
            if self.at("op", ","):
                self.take()
                continue
            self.expect("op", ")", "',' or ')' in the IN list")
            return in_(left, frozenset(values), negated)


# ------------------------------------------------------------------ the public face


@dataclass(frozen=True, slots=True, eq=False)
class Sql92Filter:
    """A compiled expression: ``matches(properties)`` is True only when it evaluates to TRUE."""

    text: str
    _fn: Eval

    def evaluate(self, properties: dict[str, str]) -> bool | None:
        """TRUE, FALSE or None (unknown); None too when a conversion fails (the abort rule)."""
        try:
            return self._fn(properties)
        except EvalAbort:
            return None

    def matches(self, properties: dict[str, str]) -> bool:
        try:
            return self._fn(properties) is True
        except EvalAbort:
            return False


_CACHE: dict[str, Sql92Filter | Sql92Error] = {}
_CACHE_MAX = 1024


def compile_sql92(text: str) -> Sql92Filter:
    """The compiled filter of ``text`` (cached by text, errors too); `Sql92Error` if it is not one."""
    hit = _CACHE.get(text)
    if hit is None:
        try:
            hit = Sql92Filter(text, _Parser(text).parse().fn)
        except Sql92Error as e:
            hit = e
        except RecursionError:
            hit = Sql92Error("expression nested too deeply", text, 0)
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[text] = hit
    if isinstance(hit, Sql92Error):
        raise hit
    return hit
