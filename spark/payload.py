"""Telemetry payloads: JSON or msgpack objects to numeric fields.

Rules kept here:
- The format comes from the MQTT 5 content type when there is one (a type
  naming ``json`` or ``msgpack``); otherwise it is detected: a payload whose
  first non-blank byte is ``{`` or ``[`` is JSON, one starting with a msgpack map
  header (0x80-0x8F, 0xDE, 0xDF) is msgpack.
- The payload must be an object (map). Numeric fields are ints and floats
  (not booleans), finite; nested objects are flattened with ``.`` (so
  ``{"env": {"t": 1}}`` gives field ``env.t``); lists, strings and nulls are
  not fields. A payload with no numeric field is rejected.
- Which numeric fields are metrics is a `MetricFields` choice (globs to
  include, globs to leave out; by default every field but ``ts``,
  ``timestamp``, ``time`` and ``seq``); a payload with none is rejected and
  the reason names the numeric fields it had.
- Every failure is a `PayloadError` whose ``reason`` is one short line; the
  caller turns it into a reject row. Nothing here raises anything else for
  any input bytes.
"""

from __future__ import annotations

import fnmatch
import json
import math
from dataclasses import dataclass

import msgpack

MAX_DEPTH = 8
DEFAULT_IGNORED = ("ts", "timestamp", "time", "seq")  # times and counters, not measurements


@dataclass(frozen=True, slots=True)
class MetricFields:
    """Which numeric fields (flattened names) are metrics: matching ``include`` and not ``exclude``.

    Patterns are exact names or shell globs (``env.*``), matched case-sensitively.
    """

    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = DEFAULT_IGNORED

    @classmethod
    def parse(cls, include: str | None, exclude: str | None) -> "MetricFields":
        def split(text, default):
            return default if text is None else tuple(p.strip() for p in text.split(",") if p.strip())

        return cls(split(include, ("*",)), split(exclude, DEFAULT_IGNORED))

    def is_metric(self, name: str) -> bool:
        return (any(fnmatch.fnmatchcase(name, p) for p in self.include)
                and not any(fnmatch.fnmatchcase(name, p) for p in self.exclude))


ALL_FIELDS = MetricFields(("*",), ())


class PayloadError(ValueError):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def payload_format(body: bytes, content_type: str | None) -> str:
    """``json`` or ``msgpack``; `PayloadError` when neither applies."""
    if content_type:
        ct = content_type.lower()
        if "msgpack" in ct:
            return "msgpack"
        if "json" in ct:
            return "json"
    head = body.lstrip(b" \t\r\n")[:1]
    if head in (b"{", b"["):
        return "json"
    if head and (0x80 <= head[0] <= 0x8F or head[0] in (0xDE, 0xDF)):
        return "msgpack"
    if not head:
        raise PayloadError("empty payload")
    raise PayloadError(f"unknown payload format (first byte 0x{head[0]:02x}, content type {content_type!r})")


def metrics(body: bytes, content_type: str | None, fields: MetricFields) -> dict[str, float]:
    """The numeric fields of one payload that ``fields`` calls metrics; `PayloadError` if none."""
    found = numeric_fields(body, content_type)
    out = {k: v for k, v in found.items() if fields.is_metric(k)}
    if not out:
        names = ", ".join(sorted(found)[:5]) + (", ..." if len(found) > 5 else "")
        raise PayloadError(f"no metric field (numeric fields: {names})")
    return out


def numeric_fields(body: bytes, content_type: str | None = None) -> dict[str, float]:
    """The numeric fields of one payload, flattened; `PayloadError` if malformed."""
    fmt = payload_format(body, content_type)
    try:
        if fmt == "json":
            obj = json.loads(body)
        else:
            obj = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as e:  # the decoders raise several types for bad input
        raise PayloadError(f"invalid {fmt}: {type(e).__name__}: {str(e)[:120]}") from None
    if not isinstance(obj, dict):
        raise PayloadError(f"{fmt} payload is a {type(obj).__name__}, not an object")
    out: dict[str, float] = {}
    _flatten(obj, "", out, 0)
    if not out:
        raise PayloadError(f"{fmt} object has no numeric field")
    return out


def _flatten(obj: dict, prefix: str, out: dict[str, float], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    for key, value in obj.items():
        if not isinstance(key, str):
            continue
        name = prefix + key
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            try:
                v = float(value)
            except OverflowError:
                continue
            if math.isfinite(v):
                out[name] = v
        elif isinstance(value, dict):
            _flatten(value, name + ".", out, depth + 1)
