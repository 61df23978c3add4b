"""Event filter patterns: the EventBridge pattern language, compiled once, matched many times.

A pattern is a JSON object shaped like the events it matches (CloudEvents
envelope fields at the top, the payload under ``data``)::

    {"source": ["devices"],                               # specified value (OR within the list)
     "subject": [{"prefix": "building-a/"}],               # prefix / suffix / equals-ignore-case
     "type": [{"anything-but": ["debug", "trace"]}],       # exclusion (also {"anything-but": {"prefix": ...}})
     "data": {"temp": [{"numeric": [">", 30]}],             # numeric: one or two comparisons
              "alarm": [{"exists": true}],                  # exists
              "ip": [{"cidr": "10.0.0.0/8"}]},              # IPv4/IPv6 network
     "$or": [{"data": {"level": ["high"]}}, {"type": ["alert"]}]}

Rules kept here:
- Fields of one object are ANDed; the values of one field's list are ORed;
  ``$or`` holds a list of patterns, any of which must match (ANDed with the
  object's other fields).
- Array matching: when the event's value is a list, the field matches when
  any element matches (a nested pattern too: any element object).
- A missing field matches nothing but ``{"exists": false}``; ``anything-but``
  and ``numeric`` never match a missing field. Booleans are not numbers:
  ``true`` matches ``true`` only, never ``1``.
- `compile_pattern` validates the whole pattern first and raises
  `PatternError` whose message starts with the path of the bad part
  (``data.temp: numeric needs an operator and a number``).
- Matching (`Pattern.matches`) never raises, whatever JSON value the event
  holds: a value of the wrong kind simply does not match.
"""

from __future__ import annotations

import ipaddress
import json
import math
from typing import Any, Callable

__all__ = ["Pattern", "PatternError", "compile_pattern"]

_MISSING = object()
_NUMERIC_OPS: dict[str, Callable[[float, float], bool]] = {
    "=": lambda a, b: a == b, "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}
_OPERATORS = ("prefix", "suffix", "anything-but", "numeric", "exists", "cidr", "equals-ignore-case")

Matcher = Callable[[Any], bool]  # value (or _MISSING) -> matches


class PatternError(ValueError):
    """A pattern that cannot be compiled; the message starts with the bad path."""


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))


def _same_scalar(expected: Any, value: Any) -> bool:
    if expected is None or isinstance(expected, bool):
        return value is expected
    if isinstance(expected, str):
        return isinstance(value, str) and value == expected
    return _is_number(value) and value == expected


def _fail(path: str, message: str) -> PatternError:
    return PatternError(f"{path or '(top)'}: {message}")


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, bool)) or _is_number(v)


def _compile_anything_but(spec: Any, path: str) -> Matcher:
    if isinstance(spec, dict):
        if len(spec) != 1 or next(iter(spec)) not in ("prefix", "suffix"):
            raise _fail(path, "anything-but takes a value, a list of values, or {\"prefix\"|\"suffix\": text}")
        (kind, text), = spec.items()
        if not isinstance(text, str) or not text:
            raise _fail(path, f"anything-but {kind} needs a non-empty string")
        if kind == "prefix":
            return lambda v: isinstance(v, str) and not v.startswith(text)
        return lambda v: isinstance(v, str) and not v.endswith(text)
    values = spec if isinstance(spec, list) else [spec]
    if not values or not all(_scalar(x) and x is not None for x in values):
        raise _fail(path, "anything-but needs a string, a number or a non-empty list of them")
    return lambda v: v is not _MISSING and _scalar(v) and not any(_same_scalar(x, v) for x in values)


def _compile_numeric(spec: Any, path: str) -> Matcher:
    if not isinstance(spec, list) or len(spec) not in (2, 4):
        raise _fail(path, "numeric needs an operator and a number (or two of each, e.g. [\">\", 0, \"<=\", 5])")
    tests = []
    for i in range(0, len(spec), 2):
        op, bound = spec[i], spec[i + 1]
        if op not in _NUMERIC_OPS:
            raise _fail(path, f"numeric operator {op!r} is not one of {' '.join(_NUMERIC_OPS)}")
        if not _is_number(bound) or math.isinf(bound):
            raise _fail(path, f"numeric bound {bound!r} is not a finite number")
        tests.append((_NUMERIC_OPS[op], bound))
    return lambda v: _is_number(v) and all(f(v, b) for f, b in tests)


def _compile_cidr(spec: Any, path: str) -> Matcher:
    try:
        net = ipaddress.ip_network(spec, strict=False) if isinstance(spec, str) else None
    except ValueError:
        net = None
    if net is None:
        raise _fail(path, f"cidr needs a network such as \"10.0.0.0/8\", not {spec!r}")

    def match(v: Any) -> bool:
        if not isinstance(v, str):
            return False
        try:
            return ipaddress.ip_address(v) in net
        except ValueError:
            return False
    return match


def _compile_operator(spec: dict, path: str) -> Matcher:
    if len(spec) != 1:
        raise _fail(path, f"an operator object has exactly one key (one of {', '.join(_OPERATORS)}), "
                          f"not {sorted(spec)}")
    (op, arg), = spec.items()
    if op in ("prefix", "suffix", "equals-ignore-case"):
        if not isinstance(arg, str):
            raise _fail(path, f"{op} needs a string, not {json.dumps(arg)[:60]}")
        if op == "prefix":
            return lambda v: isinstance(v, str) and v.startswith(arg)
        if op == "suffix":
            return lambda v: isinstance(v, str) and v.endswith(arg)
        low = arg.casefold()
        return lambda v: isinstance(v, str) and v.casefold() == low
    if op == "anything-but":
        return _compile_anything_but(arg, path)
    if op == "numeric":
        return _compile_numeric(arg, path)
    if op == "exists":
        if not isinstance(arg, bool):
            raise _fail(path, "exists needs true or false")
        return (lambda v: v is not _MISSING) if arg else (lambda v: v is _MISSING)
    if op == "cidr":
        return _compile_cidr(arg, path)
    raise _fail(path, f"unknown operator {op!r}; known: {', '.join(_OPERATORS)}")


def _compile_leaf(values: list, path: str) -> Matcher:
    if not values:
        raise _fail(path, "an empty list matches nothing: give at least one value or operator")
    tests: list[Matcher] = []
    wants_missing = False
    for i, item in enumerate(values):
        if isinstance(item, dict):
            m = _compile_operator(item, path)
            if item == {"exists": False}:
                wants_missing = True
            tests.append(m)
        elif _scalar(item):
            tests.append(lambda v, e=item: _same_scalar(e, v))
        else:
            raise _fail(path, f"item {i} is a list: a field's values are strings, numbers, booleans, null "
                              f"or operator objects")

    def any_of(v: Any) -> bool:
        return any(t(v) for t in tests)

    def match(value: Any) -> bool:
        if isinstance(value, list):  # array matching: any element
            if not value:
                return False
            return any(any_of(x) for x in value if not isinstance(x, (list, dict)))
        if isinstance(value, dict):
            return False
        return any_of(value)
    if wants_missing:
        return lambda v: v is _MISSING or match(v)
    return lambda v: v is not _MISSING and match(v)


def _compile_object(pattern: Any, path: str) -> Callable[[Any], bool]:
    """A matcher for a (possibly nested) event object."""
    if not isinstance(pattern, dict):
        raise _fail(path, f"a pattern is a JSON object, not {type(pattern).__name__}")
    if not pattern:
        raise _fail(path, "an empty object: give at least one field")
    fields: list[tuple[str, Callable[[Any], bool]]] = []
    ors: list[Callable[[Any], bool]] = []
    for key, sub in pattern.items():
        where = f"{path}.{key}" if path else key
        if key == "$or":
            if not isinstance(sub, list) or len(sub) < 1:
                raise _fail(where, "$or needs a list of patterns")
            alts = [_compile_object(p, f"{where}[{i}]") for i, p in enumerate(sub)]
            ors.append(lambda obj, a=alts: any(f(obj) for f in a))
        elif isinstance(sub, dict):
            inner = _compile_object(sub, where)
            fields.append((key, _nested(inner)))
        elif isinstance(sub, list):
            fields.append((key, _compile_leaf(sub, where)))
        else:
            raise _fail(where, f"a field's pattern is a list of values or a nested object, "
                               f"not {json.dumps(sub)[:60]}")

    def match(obj: Any) -> bool:
        get = obj.get if isinstance(obj, dict) else (lambda k, d: d)
        for key, m in fields:
            if not m(get(key, _MISSING)):
                return False
        return all(f(obj) for f in ors)
    return match


def _nested(inner: Callable[[Any], bool]) -> Matcher:
    def match(value: Any) -> bool:
        if isinstance(value, dict):
            return inner(value)
        if isinstance(value, list):
            return any(isinstance(x, dict) and inner(x) for x in value)
        return inner({})  # a missing or scalar parent: only exists-false children can match
    return match


class Pattern:
    """A compiled pattern: ``matches(event_dict) -> bool``; ``source`` is its JSON."""

    __slots__ = ("source", "_match")

    def __init__(self, source: dict, match: Callable[[Any], bool]) -> None:
        self.source = source
        self._match = match

    def matches(self, event: Any) -> bool:
        try:
            return bool(self._match(event))
        except RecursionError:  # a pathologically deep event: no match rather than a crash
            return False

    def __repr__(self) -> str:
        return f"Pattern({json.dumps(self.source, sort_keys=True)[:80]})"


def compile_pattern(pattern: Any) -> Pattern:
    """Validate and compile; ``{}`` (or None) is the match-everything pattern."""
    if pattern is None or pattern == {}:
        return Pattern({}, lambda e: True)
    if isinstance(pattern, str):
        try:
            pattern = json.loads(pattern)
        except json.JSONDecodeError as e:
            raise PatternError(f"(top): the pattern is not JSON: {e.msg} at char {e.pos}") from None
    return Pattern(pattern, _compile_object(pattern, ""))
