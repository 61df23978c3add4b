"""JSON bodies the way fastjson writes and reads them (reference 1.6 and 3).

Rules kept here:

- :func:`encode_json` output is compact (no whitespace) with object keys in
  alphabetical order (integer keys in numeric order), like fastjson's bean
  output. ``None`` values inside objects are omitted (fastjson skips null
  fields and null map values); in arrays they are ``null``. Enums are
  written by name (``IntEnum`` included, as Java enums are); dataclass
  instances as objects of their fields.
- ``standard=False`` is fastjson's default form: integer map keys are written
  without quotes (``{0:"127.0.0.1:10911"}``, what pre-4.9.4 clients get in
  ``brokerAddrs``), non-ASCII is raw UTF-8. ``standard=True`` is the
  namesrv's "accept standard JSON" form: every key quoted and non-ASCII
  ``\\u``-escaped, so any JSON parser reads it.
- Object keys: a key that is a tuple of ``(name, value)`` pairs stands for a
  JSON object used as a map key (fastjson writes a ``MessageQueue`` key as
  ``{"brokerName":"b","queueId":0,"topic":"t"}``). :func:`decode_json` turns
  such keys into that same shape: a tuple of pairs sorted by name, nested
  objects frozen the same way and arrays as tuples, so it is hashable; a
  flat object key (scalar values, the only kind fastjson bodies use)
  round-trips through encode and decode. With ``standard=True`` the object key is written as a string
  holding its compact JSON text.
- :func:`decode_json` reads standard JSON with the C parser and falls back to
  a tolerant parser for fastjson's forms: unquoted numeric keys (read as
  ``int``, or ``float`` if they have a fraction/exponent) and object keys.
  Quoted keys stay strings: ``{"0":..}`` gives ``"0"``. Invalid input raises
  ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from enum import Enum
from json.decoder import scanstring as _scanstring  # type: ignore[attr-defined]
from json.encoder import encode_basestring as _quote  # type: ignore[attr-defined]
from json.encoder import encode_basestring_ascii as _quote_ascii  # type: ignore[attr-defined]
from typing import Any

__all__ = ["decode_json", "encode_json"]


# -- encoding ------------------------------------------------------------


def encode_json(obj: Any, *, standard: bool) -> str:
    """Compact, alphabetically keyed JSON; see the module docstring."""
    out: list[str] = []
    _encode(obj, out, standard, _quote_ascii if standard else _quote)
    return "".join(out)


def _key_order(key: Any) -> tuple:
    if isinstance(key, int) and not isinstance(key, bool):
        return (0, key, "")
    if isinstance(key, str):
        return (1, 0, key)
    return (2, 0, repr(key))


def _encode_key(key: Any, out: list[str], standard: bool, quote) -> None:
    if isinstance(key, str):
        out.append(quote(key))
    elif isinstance(key, Enum):
        out.append(quote(key.name))
    elif isinstance(key, int) and not isinstance(key, bool):
        out.append(f'"{int(key)}"' if standard else str(int(key)))
    elif isinstance(key, tuple):
        text = encode_json(dict(key), standard=standard)
        out.append(quote(text) if standard else text)
    else:
        raise TypeError(f"cannot write a JSON key of type {type(key).__name__}")


def _encode(obj: Any, out: list[str], standard: bool, quote) -> None:
    if obj is None:
        out.append("null")
    elif isinstance(obj, str):
        out.append(quote(obj))
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, Enum):
        out.append(quote(obj.name))
    elif isinstance(obj, int):
        out.append(str(obj))
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"cannot write {obj!r} as JSON")
        out.append(repr(obj))
    elif isinstance(obj, dict):
        _encode_object(obj.items(), out, standard, quote)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        items = ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj))
        _encode_object(items, out, standard, quote)
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for i, item in enumerate(obj):
            if i:
                out.append(",")
            _encode(item, out, standard, quote)
        out.append("]")
    elif isinstance(obj, (set, frozenset)):
        _encode(sorted(obj, key=_key_order), out, standard, quote)
    else:
        raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def _encode_object(items, out: list[str], standard: bool, quote) -> None:
    out.append("{")
    first = True
    for key, value in sorted(
        ((k, v) for k, v in items if v is not None), key=lambda kv: _key_order(kv[0])
    ):
        if not first:
            out.append(",")
        first = False
        _encode_key(key, out, standard, quote)
        out.append(":")
        _encode(value, out, standard, quote)
    out.append("}")


# -- decoding ------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}


def decode_json(text: str | bytes) -> Any:
    """Parse standard JSON or fastjson's non-standard output."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        pass
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    try:
        value, pos = _Tolerant(text).value(_WS.match(text, 0).end())
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    pos = _WS.match(text, pos).end()
    if pos != len(text):
        raise ValueError(f"extra data at char {pos}")
    return value


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted(((k, _freeze(v)) for k, v in value.items()),
                            key=lambda kv: _key_order(kv[0])))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


class _Tolerant:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def _error(self, what: str, pos: int) -> ValueError:
        return ValueError(f"{what} at char {pos}")

    def value(self, pos: int) -> tuple[Any, int]:
        text = self.text
        if pos >= len(text):
            raise self._error("unexpected end", pos)
        ch = text[pos]
        if ch == "{":
            return self.obj(pos + 1)
        if ch == "[":
            return self.array(pos + 1)
        if ch == '"':
            return _scanstring(text, pos + 1, True)
        m = _NUMBER.match(text, pos)
        if m:
            number = m.group()
            if m.group(1) or m.group(2):
                return float(number), m.end()
            return int(number), m.end()
        for word, lit in _LITERALS.items():
            if text.startswith(word, pos):
                return lit, pos + len(word)
        raise self._error("unexpected character", pos)

    def key(self, pos: int) -> tuple[Any, int]:
        ch = self.text[pos:pos + 1]
        if ch in ('"', "{", "[") or _NUMBER.match(self.text, pos):
            key, pos = self.value(pos)
            return _freeze(key), pos
        raise self._error("expected an object key", pos)

    def obj(self, pos: int) -> tuple[dict, int]:
        text = self.text
        result: dict = {}
        pos = _WS.match(text, pos).end()
        if text[pos:pos + 1] == "}":
            return result, pos + 1
        while True:
            key, pos = self.key(pos)
            pos = _WS.match(text, pos).end()
            if text[pos:pos + 1] != ":":
                raise self._error("expected ':'", pos)
            value, pos = self.value(_WS.match(text, pos + 1).end())
            result[key] = value
            pos = _WS.match(text, pos).end()
            ch = text[pos:pos + 1]
            if ch == "}":
                return result, pos + 1
            if ch != ",":
                raise self._error("expected ',' or '}'", pos)
            pos = _WS.match(text, pos + 1).end()

    def array(self, pos: int) -> tuple[list, int]:
        text = self.text
        result: list = []
        pos = _WS.match(text, pos).end()
        if text[pos:pos + 1] == "]":
            return result, pos + 1
        while True:
            value, pos = self.value(pos)
            result.append(value)
            pos = _WS.match(text, pos).end()
            ch = text[pos:pos + 1]
            if ch == "]":
                return result, pos + 1
            if ch != ",":
                raise self._error("expected ',' or ']'", pos)
            pos = _WS.match(text, pos + 1).end()
