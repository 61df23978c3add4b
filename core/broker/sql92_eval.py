"""SQL92 filter evaluation: the value semantics of RocketMQ 4.9's
``SelectorParser`` expressions (Java number types, conversions and
comparisons) and the closures an expression compiles to. The grammar, its
errors and the compile cache are in ``sql92.py``; the rules both keep are in
its docstring.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

INT_MIN, INT_MAX = -2**31, 2**31 - 1
LONG_MIN, LONG_MAX = -2**63, 2**63 - 1
DOUBLE_MIN_VALUE = 5e-324  # Java Double.MIN_VALUE


class EvalAbort(Exception):
    """A conversion failed during evaluation: the message does not match."""


class JLong(int):
    """An integer of Java type Long (a plain int stands for Integer)."""

    __slots__ = ()


# ------------------------------------------------------------------ nodes

Eval = Callable[[dict], Any]


@dataclass(frozen=True, slots=True)
class Node:
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


def const(value: Any, kind: str = "const") -> Node:
    if value is None:
        text = "NULL"
    elif isinstance(value, bool):
        text = "TRUE" if value else "FALSE"
    elif isinstance(value, str):
        text = "'" + value.replace("'", "''") + "'"
    else:
        text = repr(float(value)) if isinstance(value, float) else str(int(value))
    return Node(kind, lambda props, v=value: v, value, text)


# ------------------------------------------------------------------ Java conversions and comparison

_JAVA_INT = re.compile(r"[+-]?\d+")  # Character.digit accepts every Unicode decimal digit, so does \d
_JAVA_DOUBLE = re.compile(r"""[+-]?(?:NaN|Infinity
    |(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?
    |0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)""", re.VERBOSE)


def _parse_integral(s: str, lo: int, hi: int) -> int:
    if _JAVA_INT.fullmatch(s) is None:
        raise EvalAbort(s)
    v = int(s)
    if not lo <= v <= hi:
        raise EvalAbort(s)
    return v


def _java_integer(s: str) -> int:
    return _parse_integral(s, INT_MIN, INT_MAX)


def _java_long(s: str) -> JLong:
    return JLong(_parse_integral(s, LONG_MIN, LONG_MAX))


def _java_double(s: str) -> float:
    """``Double.valueOf``: trims characters <= ' ', then Java's float syntax."""
    t = s.strip("".join(map(chr, range(33))))
    if _JAVA_DOUBLE.fullmatch(t) is None:
        raise EvalAbort(s)
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


def compare(lv: Any, rv: Any) -> int:
    """RocketMQ ``ComparisonExpression.__compare`` with string conversion on."""
    lc, rc = type(lv), type(rv)
    if lc is not rc:
        if lc is bool:
            if rc is str:
                raise EvalAbort("Boolean cast to String")  # RocketMQ: ClassCastException
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


# ------------------------------------------------------------------ node builders (closures)


def bool_cast(node: Node) -> Node:
    get = node.fn

    def fn(props):
        v = get(props)
        return None if v is None else (v if type(v) is bool else False)
    return Node("bool", fn, None, node.text, node.depth + 1)


def not_(node: Node) -> Node:
    get = node.fn

    def fn(props):
        v = get(props)
        return None if v is None else not v
    return Node("bool", fn, None, f"NOT {node.text}", node.depth + 1)


def and_(left: Node, right: Node) -> Node:
    lf, rf = left.fn, right.fn

    def fn(props):
        lv = lf(props)
        if lv is False:
            return False
        rv = rf(props)
        if rv is False:
            return False
        return None if lv is None or rv is None else True
    return Node("bool", fn, None, f"({left.text} AND {right.text})", max(left.depth, right.depth) + 1)


def or_(left: Node, right: Node) -> Node:
    lf, rf = left.fn, right.fn

    def fn(props):
        lv = lf(props)
        if lv is True:
            return True
        rv = rf(props)
        if rv is True:
            return True
        return None if lv is None or rv is None else False
    return Node("bool", fn, None, f"({left.text} OR {right.text})", max(left.depth, right.depth) + 1)


def negate(node: Node) -> Node:
    if node.kind in ("const", "negconst") and type(node.value) in _TO_TYPE:
        # not a constant for RocketMQ's operand checks (a UnaryExpression), but a known number
        v = node.value
        v = JLong(-v) if type(v) is JLong else -v
        return Node("negconst", lambda props: v, v, f"-{node.text}")
    get = node.fn

    def fn(props):
        v = get(props)
        if type(v) is JLong:
            return JLong(-v)
        if type(v) in (int, float):
            return -v
        return None
    return Node("value", fn, None, f"-{node.text}", node.depth + 1)


def equal(left: Node, right: Node) -> Node:
    text = f"{left.text} = {right.text}"
    if left.kind == "prop" and right.kind in ("const", "bool_const", "negconst"):
        name, c = left.value, right.value
        if c is None:  # IS NULL
            return Node("bool", lambda props: props.get(name) is None, None, f"{left.text} IS NULL")
        if type(c) is str:
            def eq_str(props):
                v = props.get(name)
                return None if v is None else v == c
            return Node("bool", eq_str, None, text)
        if type(c) in _TO_TYPE:
            conv, c_is_float = _TO_TYPE[type(c)], type(c) is float

            def eq_num(props):
                v = props.get(name)
                if v is None:
                    return None
                return (_cmp_double(conv(v), c) if c_is_float else conv(v) - c) == 0
            return Node("bool", eq_num, None, text)
    lf, rf = left.fn, right.fn

    def fn(props):
        lv, rv = lf(props), rf(props)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None or _same(lv, rv):
            return True
        return compare(lv, rv) == 0
    return Node("bool", fn, None, text, max(left.depth, right.depth) + 1)


_ORDER = {">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}


def ordered(op: str, left: Node, right: Node) -> Node:
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
        return Node("bool", cmp_num, None, text)
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
        return test(compare(lv, rv))
    return Node("bool", fn, None, text, max(left.depth, right.depth) + 1)


def in_(left: Node, values: frozenset[str], negated: bool) -> Node:
    name = left.value

    def fn(props):
        v = props.get(name)
        return None if v is None else (v in values) != negated
    return Node("bool", fn, None, f"{left.text} {'NOT IN' if negated else 'IN'} (...)")
