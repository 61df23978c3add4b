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
from typing import Any, Callable

__all__ = ["Sql92Error", "Sql92Filter", "compile_sql92"]

INT_MIN, INT_MAX = -2**31, 2**31 - 1
LONG_MIN, LONG_MAX = -2**63, 2**63 - 1
DOUBLE_MIN_VALUE = 5e-324  # Java Double.MIN_VALUE
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


class _EvalAbort(Exception):
    """A conversion failed during evaluation: the message does not match."""


class JLong(int):
    """An integer of Java type Long (a plain int stands for Integer)."""

    __slots__ = ()


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


# ------------------------------------------------------------------ nodes

Eval = Callable[[dict], Any]


@dataclass(frozen=True, slots=True)
class _Node:
    kind: str  # "const", "bool_const", "negconst" (a negated number), "prop", "bool", "value"
    fn: Eval
    value: Any = None  # constants: the Java value; prop: the name
    text: str = ""  # as RocketMQ prints it, for error messages
    depth: int = 1  # of the closures' nesting: evaluation recurses this deep

    @property
    def boolean(self) -> bool:
        return self.kind in ("bool", "bool_const")

    @property
    def constant(self) -> bool:
        return self.kind in ("const", "bool_const")


def _const(value: Any, kind: str = "const") -> _Node:
    if value is None:
        text = "NULL"
    elif isinstance(value, bool):
        text = "TRUE" if value else "FALSE"
    elif isinstance(value, str):
        text = "'" + value.replace("'", "''") + "'"
    else:
        text = repr(float(value)) if isinstance(value, float) else str(int(value))
    return _Node(kind, lambda props, v=value: v, value, text)


# ------------------------------------------------------------------ Java conversions and comparison

_JAVA_INT = re.compile(r"[+-]?\d+")  # Character.digit accepts every Unicode decimal digit, so does \d
_JAVA_DOUBLE = re.compile(r"""[+-]?(?:NaN|Infinity
    |(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?
    |0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)""", re.VERBOSE)


def _parse_integral(s: str, lo: int, hi: int) -> int:
    if _JAVA_INT.fullmatch(s) is None:
        raise _EvalAbort(s)
    v = int(s)
    if not lo <= v <= hi:
        raise _EvalAbort(s)
    return v


def _java_integer(s: str) -> int:
    return _parse_integral(s, INT_MIN, INT_MAX)


def _java_long(s: str) -> JLong:
    return JLong(_parse_integral(s, LONG_MIN, LONG_MAX))


def _java_double(s: str) -> float:
    """``Double.valueOf``: trims characters <= ' ', then Java's float syntax."""
    t = s.strip("".join(map(chr, range(33))))
    if _JAVA_DOUBLE.fullmatch(t) is None:
        raise _EvalAbort(s)
    body = t.rstrip("fFdD") if not t.endswith("NaN") and not t.endswith("Infinity") else t
    if "x" in body or "X" in body:
        return float.fromhex(body)
    return float(body.replace("Infinity", "inf").replace("NaN", "nan"))


def _cmp_double(a: float, b: float) -> int:
    """``Double.compareTo``: NaN above everything and equal to itself, -0.0 below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    an, bn = a != a, b != b
    if an or bn:
        return (an > bn) - (an < bn)
    if a == 0.0:
        sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
        return (sa > sb) - (sa < sb)
    return 0



_TO_TYPE = {int: _java_integer, JLong: _java_long, float: _java_double}


def _compare(lv: Any, rv: Any) -> int:
    """RocketMQ ``ComparisonExpression.__compare`` with string conversion on."""
    lc, rc = type(lv), type(rv)
    if lc is not rc:
        if lc is bool:
            if rc is str:
                raise _EvalAbort("Boolean cast to String")  # RocketMQ: ClassCastException
            return -1
        if lc in (int, JLong, float):
            if rc in (int, JLong, float):
                if float in (lc, rc):
                    lv, rv = float(lv), float(rv)
            elif rc is str:
                rv = _TO_TYPE[lc](rv)
            else:
                return -1
        elif lc is str:
            if rc is bool:
                lv = lv.lower() == "true"
            elif rc in _TO_TYPE:
                lv = _TO_TYPE[rc](lv)
            else:
                return -1
        else:
            return -1
    if isinstance(lv, float):
        return _cmp_double(lv, rv)
    return (lv > rv) - (lv < rv)


def _same(lv: Any, rv: Any) -> bool:
    """Java ``equals``: same class and value."""
    return type(lv) is type(rv) and lv == rv and not (type(lv) is float and _cmp_double(lv, rv) != 0)


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

    def as_boolean(self, node: _Node, tok: _Tok) -> _Node:
        if node.boolean:
            return node
        if node.kind == "prop":
            return _bool_cast(node)
        raise self.error(f"expression will not result in a boolean value: {node.text}", tok)

    # -- grammar

    def parse(self) -> _Node:
        start = self.tok
        node = self.as_boolean(self.or_expr(), start)
        if not self.at("end"):
            raise self.error(f"unexpected {self.describe(self.tok)} after a complete expression")
        if node.depth > MAX_DEPTH:
            raise self.error(f"expression nested too deeply (more than {MAX_DEPTH} levels)", start)
        return node

    def or_expr(self) -> _Node:
        start = self.tok
        left = self.and_expr()
        while self.at("kw", "OR"):
            self.take()
            right_tok = self.tok
            right = self.and_expr()
            left = _or(self.as_boolean(left, start), self.as_boolean(right, right_tok))
        return left

    def and_expr(self) -> _Node:
        start = self.tok
        left = self.equality()
        while self.at("kw", "AND"):
            self.take()
            right_tok = self.tok
            right = self.equality()
            left = _and(self.as_boolean(left, start), self.as_boolean(right, right_tok))
        return left

    def equality(self) -> _Node:
        left = self.comparison()
        while True:
            t = self.tok
            if self.at("op", "=") or self.at("op", "<>"):
                self.take()
                right = self.comparison()
                self.check_equal_operands(left, right, t)
                left = _equal(left, right) if t.text == "=" else _not(_equal(left, right))
            elif self.at("kw", "IS") and self.at("kw", "NULL", self.peek()):
                self.take(), self.take()
                left = _equal(left, _const(None, "bool_const"))
            elif self.at("kw", "IS") and self.at("kw", "NOT", self.peek()) and self.at("kw", "NULL", self.peek(2)):
                self.take(), self.take(), self.take()
                left = _not(_equal(left, _const(None, "bool_const")))
            elif self.at("kw", "IS"):
                raise self.error(f"expected NULL or NOT NULL after IS, found {self.describe(self.peek())}", self.peek())
            else:
                return left

    def comparison(self) -> _Node:
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

    def unary(self) -> _Node:
        if self.at("op", "+"):
            self.take()
            return self.unary()
        if self.at("op", "-"):
            self.take()
            return _negate(self.unary())
        if self.at("kw", "NOT"):
            self.take()
            operand_tok = self.tok
            return _not(self.as_boolean(self.unary(), operand_tok))
        return self.primary()

    def primary(self) -> _Node:
        t = self.tok
        if t.kind == "str":
            self.take()
            return _const(t.text[1:-1].replace("''", "'"))
        if t.kind == "int":
            self.take()
            digits = t.text.rstrip("lL")
            v = int(digits)
            if v > LONG_MAX:
                raise self.error(f"integer constant {t.text} is out of the Long range", t)
            return _const(v if v <= INT_MAX else JLong(v))
        if t.kind == "float":
            self.take()
            v = float(t.text)
            if math.isinf(v):
                raise self.error(f"{t.text} is greater than {1.7976931348623157e308!r}", t)
            if v < DOUBLE_MIN_VALUE:
                raise self.error(f"{t.text} is less than 4.9E-324 (RocketMQ refuses a zero float constant)", t)
            return _const(v)
        if t.kind == "kw" and t.text in ("TRUE", "FALSE", "NULL"):
            self.take()
            return _const({"TRUE": True, "FALSE": False, "NULL": None}[t.text], "bool_const")
        if t.kind == "id":
            self.take()
            name = t.text
            return _Node("prop", lambda props: props.get(name), name, name)
        if self.at("op", "("):
            self.take()
            node = self.or_expr()
            self.expect("op", ")", "')'")
            return node
        raise self.error(f"expected a value, a property name or '(', found {self.describe(t)}", t)

    # -- checks RocketMQ makes while building nodes

    def check_ordered_operand(self, node: _Node, tok: _Tok) -> None:
        if (node.constant and not isinstance(node.value, (int, float))) or isinstance(node.value, bool) or node.boolean:
            raise self.error(f"value {node.text} cannot be compared with >, >=, < or <= (numbers only)", tok)

    def check_equal_operands(self, left: _Node, right: _Node, tok: _Tok) -> None:
        for node in (left, right):
            if node.constant and node.value is None:
                raise self.error("NULL cannot be compared with = or <>; use IS NULL or IS NOT NULL", tok)
        if left.constant and right.constant and left.kind == "bool_const" and right.kind != "bool_const":
            raise self.error(f"{left.text} cannot be compared with {right.text}", tok)

    def ordered(self, op: str, left: _Node, right: _Node, tok: _Tok) -> _Node:
        self.check_ordered_operand(left, tok)
        self.check_ordered_operand(right, tok)
        return _ordered(op, left, right)

    def between(self, value: _Node, low: _Node, high: _Node, negated: bool, tok: _Tok) -> _Node:
        if negated:
            return _or(self.ordered("<", value, low, tok), self.ordered(">", value, high, tok))
        if low.constant and high.constant:
            if low.value is None or high.value is None:
                raise self.error("BETWEEN bounds cannot be NULL", tok)
            try:
                wrong = _compare(high.value, low.value) < 0
            except _EvalAbort:
                raise self.error(f"BETWEEN bounds {low.text} and {high.text} cannot be compared", tok) from None
            if wrong:
                raise self.error(f"BETWEEN bounds are reversed: {low.text} must be <= {high.text}", tok)
        return _and(self.ordered(">=", value, low, tok), self.ordered("<=", value, high, tok))

    def in_list(self, left: _Node, negated: bool, tok: _Tok) -> _Node:
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
            return _in(left, frozenset(values), negated)


# ------------------------------------------------------------------ node builders (closures)


def _bool_cast(node: _Node) -> _Node:
    get = node.fn

    def fn(props):
        v = get(props)
        return None if v is None else (v if type(v) is bool else False)
    return _Node("bool", fn, None, node.text, node.depth + 1)


def _not(node: _Node) -> _Node:
    get = node.fn

    def fn(props):
        v = get(props)
        return None if v is None else not v
    return _Node("bool", fn, None, f"NOT {node.text}", node.depth + 1)


def _and(left: _Node, right: _Node) -> _Node:
    lf, rf = left.fn, right.fn

    def fn(props):
        lv = lf(props)
        if lv is False:
            return False
        rv = rf(props)
        if rv is False:
            return False
        return None if lv is None or rv is None else True
    return _Node("bool", fn, None, f"({left.text} AND {right.text})", max(left.depth, right.depth) + 1)


def _or(left: _Node, right: _Node) -> _Node:
    lf, rf = left.fn, right.fn

    def fn(props):
        lv = lf(props)
        if lv is True:
            return True
        rv = rf(props)
        if rv is True:
            return True
        return None if lv is None or rv is None else False
    return _Node("bool", fn, None, f"({left.text} OR {right.text})", max(left.depth, right.depth) + 1)


def _negate(node: _Node) -> _Node:
    if node.kind in ("const", "negconst") and type(node.value) in _TO_TYPE:
        # not a constant for RocketMQ's operand checks (a UnaryExpression), but a known number
        v = node.value
        v = JLong(-v) if type(v) is JLong else -v
        return _Node("negconst", lambda props: v, v, f"-{node.text}")
    get = node.fn

    def fn(props):
        v = get(props)
        if type(v) is JLong:
            return JLong(-v)
        if type(v) in (int, float):
            return -v
        return None
    return _Node("value", fn, None, f"-{node.text}", node.depth + 1)


def _equal(left: _Node, right: _Node) -> _Node:
    text = f"{left.text} = {right.text}"
    if left.kind == "prop" and right.kind in ("const", "bool_const", "negconst"):
        name, c = left.value, right.value
        if c is None:  # IS NULL
            return _Node("bool", lambda props: props.get(name) is None, None, f"{left.text} IS NULL")
        if type(c) is str:
            def eq_str(props):
                v = props.get(name)
                return None if v is None else v == c
            return _Node("bool", eq_str, None, text)
        if type(c) in _TO_TYPE:
            conv, c_is_float = _TO_TYPE[type(c)], type(c) is float

            def eq_num(props):
                v = props.get(name)
                if v is None:
                    return None
                return (_cmp_double(conv(v), c) if c_is_float else conv(v) - c) == 0
            return _Node("bool", eq_num, None, text)
    lf, rf = left.fn, right.fn

    def fn(props):
        lv, rv = lf(props), rf(props)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None or _same(lv, rv):
            return True
        return _compare(lv, rv) == 0
    return _Node("bool", fn, None, text, max(left.depth, right.depth) + 1)


_ORDER = {">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}


def _ordered(op: str, left: _Node, right: _Node) -> _Node:
    test = _ORDER[op]
    text = f"{left.text} {op} {right.text}"
    if left.kind == "prop" and right.kind in ("const", "negconst") and type(right.value) in _TO_TYPE:
        name, c = left.value, right.value
        conv, c_is_float = _TO_TYPE[type(c)], type(c) is float

        def cmp_num(props):
            v = props.get(name)
            if v is None:
                return None
            x = conv(v)
            return test(_cmp_double(x, c) if c_is_float else (x > c) - (x < c))
        return _Node("bool", cmp_num, None, text)
    lf, rf = left.fn, right.fn

    def fn(props):
        lv = lf(props)
        if lv is None:
            return None
        rv = rf(props)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            return test(_cmp_double(_java_double(lv), _java_double(rv)))
        return test(_compare(lv, rv))
    return _Node("bool", fn, None, text, max(left.depth, right.depth) + 1)


def _in(left: _Node, values: frozenset[str], negated: bool) -> _Node:
    name = left.value

    def fn(props):
        v = props.get(name)
        return None if v is None else (v in values) != negated
    return _Node("bool", fn, None, f"{left.text} {'NOT IN' if negated else 'IN'} (...)")


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
        except _EvalAbort:
            return None

    def matches(self, properties: dict[str, str]) -> bool:
        try:
            return self._fn(properties) is True
        except _EvalAbort:
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
