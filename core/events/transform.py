"""Transforms: what a rule sends to its targets, made from the matched event.

EventBridge's four forms, given as ``{"form": ..., ...}``::

    {"form": "ORIGINAL"}                                      # the complete event (the default)
    {"form": "JSONPATH", "value": "$.data.temp"}              # a part of it
    {"form": "CONSTANT", "value": "any JSON value or text"}
    {"form": "TEMPLATE", "value": {"t": "$.data.temp", "dev": "$.subject"},
     "template": "{\\"device\\": \\"${dev}\\", \\"temperature\\": ${t}}"}

Rules kept here:
- JSONPath (jsonpath-ng) runs over the event as one JSON object: the
  CloudEvents attributes (``id``, ``source``, ``type``, ``subject``,
  ``time``...) and ``data``. Paths are parsed when the rule is created;
  a bad one is a `TransformError` naming it.
- JSONPATH gives the single value found, a list when the path finds
  several, ``null`` when it finds none.
- TEMPLATE replaces each ``${name}`` with its variable: a string as is, any
  other value as its JSON text, a path that finds nothing as ``null``. An
  unknown ``${name}`` in the template is a `TransformError` at creation.
- `Transform.apply` returns a `Payload`: ``event`` (the original form: the
  target sends the event as it is), or ``body`` (bytes) and ``content_type``
  (``application/json`` when the result is JSON, else ``text/plain``). It
  never raises on a valid event.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from jsonpath_ng import parse as jsonpath_parse
from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError

__all__ = ["Payload", "Transform", "TransformError", "compile_transform", "find_path", "parse_path"]

FORMS = ("ORIGINAL", "JSONPATH", "CONSTANT", "TEMPLATE")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.-]*)\}")


class TransformError(ValueError):
    """A transform that cannot be compiled; the message names the bad part."""


@dataclass(frozen=True)
class Payload:
    """What a target sends: the whole event (``body`` None) or a transformed body."""
    body: bytes | None
    content_type: str = "application/json"

    @property
    def original(self) -> bool:
        return self.body is None


ORIGINAL = Payload(None)


def parse_path(text: Any, where: str):
    if not isinstance(text, str) or not text.startswith("$"):
        raise TransformError(f"transform.{where}: a JSONPath starting with $ is needed, not {text!r}")
    try:
        return jsonpath_parse(text)
    except (JsonPathLexerError, JsonPathParserError, Exception) as e:  # noqa: BLE001 - its parser raises plain Exception too
        raise TransformError(f"transform.{where}: bad JSONPath {text!r}: {e}") from None


def find_path(expr, doc: dict) -> Any:
    try:
        found = [m.value for m in expr.find(doc)]
    except Exception:  # noqa: BLE001 - a path over an odd value finds nothing
        return None
    if not found:
        return None
    return found[0] if len(found) == 1 else found


def _json_body(value: Any) -> Payload:
    if isinstance(value, str):
        return Payload(value.encode(), "text/plain")
    return Payload(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


class Transform:
    """A compiled transform; ``spec`` is the JSON it came from."""

    def __init__(self, spec: dict, form: str, *, path=None, constant: Any = None,
                 variables: dict | None = None, template: str = "") -> None:
        self.spec = spec
        self.form = form
        self._expr = path
        self._constant = _json_body(constant) if form == "CONSTANT" else None
        self._variables = variables or {}
        self._template = template

    def apply(self, event: dict) -> Payload:
        if self.form == "ORIGINAL":
            return ORIGINAL
        if self.form == "CONSTANT":
            return self._constant
        if self.form == "JSONPATH":
            return _json_body(find_path(self._expr, event))
        values = {name: find_path(expr, event) for name, expr in self._variables.items()}

        def sub(m: re.Match) -> str:
            v = values[m.group(1)]
            return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False)
        text = _VAR.sub(sub, self._template)
        try:
            json.loads(text)
            return Payload(text.encode(), "application/json")
        except ValueError:
            return Payload(text.encode(), "text/plain")


def compile_transform(spec: Any) -> Transform:
    """Validate and compile ``spec`` (None or ``{}``: ORIGINAL)."""
    if spec is None or spec == {}:
        return Transform({"form": "ORIGINAL"}, "ORIGINAL")
    if not isinstance(spec, dict):
        raise TransformError(f"transform: an object with \"form\" ({', '.join(FORMS)}) is needed, not {spec!r}")
    form = spec.get("form", "ORIGINAL")
    if form not in FORMS:
        raise TransformError(f"transform.form: {form!r} is not one of {', '.join(FORMS)}")
    allowed = {"ORIGINAL": {"form"}, "JSONPATH": {"form", "value"}, "CONSTANT": {"form", "value"},
               "TEMPLATE": {"form", "value", "template"}}[form]
    extra = set(spec) - allowed
    if extra:
        raise TransformError(f"transform.{sorted(extra)[0]}: not a key of the {form} form "
                             f"(its keys: {', '.join(sorted(allowed))})")
    if form == "ORIGINAL":
        return Transform(spec, form)
    if "value" not in spec:
        raise TransformError(f"transform.value: the {form} form needs a value")
    if form == "JSONPATH":
        return Transform(spec, form, path=parse_path(spec["value"], "value"))
    if form == "CONSTANT":
        return Transform(spec, form, constant=spec["value"])
    variables = spec["value"]
    if isinstance(variables, str):
        try:
            variables = json.loads(variables)
        except ValueError:
            raise TransformError("transform.value: the TEMPLATE form's value is an object of "
                                 "name -> JSONPath") from None
    if not isinstance(variables, dict):
        raise TransformError("transform.value: the TEMPLATE form's value is an object of name -> JSONPath")
    compiled = {name: parse_path(p, f"value.{name}") for name, p in variables.items()}
    template = spec.get("template")
    if not isinstance(template, str):
        raise TransformError("transform.template: the TEMPLATE form needs a template string")
    for name in _VAR.findall(template):
        if name not in compiled:
            raise TransformError(f"transform.template: ${{{name}}} is not one of the variables "
                                 f"({', '.join(sorted(compiled)) or 'none'})")
    return Transform(spec, form, variables=compiled, template=template)
