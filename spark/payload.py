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
- Every failure is a `PayloadError` whose ``reason`` is one short line; the
  caller turns it into a reject row. Nothing here raises anything else for
  any input bytes.
"""

from __future__ import annotations

import json
import math

import msgpack

MAX_DEPTH = 8


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
