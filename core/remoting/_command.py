"""RemotingCommand: one request or response, and typed reading of its header.

Rules kept here:

- ``ext_fields`` maps ``str`` to ``str``, always. Decoders coerce what peers
  send (numbers, booleans) to text; :meth:`RemotingCommand.put_ext` and
  :meth:`RemotingCommand.make_response` turn Python values into the strings
  Java writes (``True`` -> ``"true"``, ``5`` -> ``"5"``) and drop ``None``.
- ``code`` is a plain ``int``: an unknown request code must reach the
  dispatcher, which answers REQUEST_CODE_NOT_SUPPORTED.
- ``serialize_type`` is the type the command arrived in (or will be written
  in). A response made by :meth:`make_response` copies it from the request,
  with the opaque, because C++ and ali-ons clients read JSON only and every
  client matches responses by opaque.
- Typed getters read header fields the way the Java broker's
  ``decodeCommandCustomHeader`` does: a missing required field raises
  :class:`HeaderFieldError` "the custom field <x> is null"; an int that is not
  a 32-bit decimal (a long: 64-bit) raises :class:`HeaderFieldError`; a
  boolean is ``Boolean.parseBoolean`` (only case-insensitive ``"true"`` is
  true, anything else is false). Because C++ 1.2.x writes booleans as
  ``"1"``/``"0"``, ``get_bool(..., cpp_compatible=True)`` also reads ``"1"``
  as true; a Java broker does not, so each caller decides per field.
- :class:`HeaderFieldError` is not a :class:`RemotingProtocolError`: a bad
  header field is answered (SYSTEM_ERROR with the message as remark, like
  Java), it does not close the connection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ._codes import CURRENT_VERSION, LanguageCode, RemotingFlag, SerializeType

__all__ = [
    "HeaderFieldError",
    "RemotingCommand",
    "RemotingProtocolError",
    "ext_value",
]

_RESPONSE = int(RemotingFlag.RESPONSE)
_ONEWAY = int(RemotingFlag.ONEWAY)
_DECIMAL = re.compile(r"[+-]?[0-9]+\Z")
_MISSING: Any = object()

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class RemotingProtocolError(Exception):
    """The peer broke the framing or header rules: close that connection only."""


class HeaderFieldError(ValueError):
    """A request's header field is missing or malformed: answer, keep serving."""


def ext_value(value: Any) -> str:
    """The string Java writes for a header field value."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))  # int() so an IntEnum gives its number
    if isinstance(value, float):
        return repr(value)
    raise TypeError(f"extFields value of type {type(value).__name__}: {value!r}")


@dataclass(slots=True, eq=True)
class RemotingCommand:
    """A remoting frame, decoded. See the package docstring for the wire form."""

    code: int
    language: LanguageCode = LanguageCode.JAVA
    version: int = CURRENT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    # -- building -------------------------------------------------------

    @classmethod
    def request(
        cls,
        code: int,
        ext: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        opaque: int = 0,
        oneway: bool = False,
        remark: str | None = None,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> "RemotingCommand":
        cmd = cls(
            code=int(code),
            opaque=opaque,
            flag=_ONEWAY if oneway else 0,
            remark=remark,
            body=body,
            serialize_type=serialize_type,
        )
        if ext:
            cmd.put_ext(**ext)
        return cmd

    def make_response(
        self,
        code: int,
        remark: str | None = None,
        ext: dict[str, Any] | None = None,
        body: bytes = b"",
    ) -> "RemotingCommand":
        """A response to this request: same opaque and serialize type."""
        resp = RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=_RESPONSE,
            remark=remark,
            body=body,
            serialize_type=self.serialize_type,
        )
        if ext:
            resp.put_ext(**ext)
        return resp

    def put_ext(self, **fields: Any) -> None:
        """Set header fields from Python values (``None`` values are skipped)."""
        ext = self.ext_fields
        for key, value in fields.items():
            if value is not None:
                ext[key] = ext_value(value)

    # -- flags ----------------------------------------------------------

    @property
    def is_response(self) -> bool:
        return bool(self.flag & _RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & _ONEWAY)

    # -- typed header reading -------------------------------------------

    def _raw(self, name: str, default: Any) -> Any:
        value = self.ext_fields.get(name)
        if value is None:
            if default is _MISSING:
                raise HeaderFieldError(f"the custom field <{name}> is null")
            return default
        return value

    def get_str(self, name: str, default: Any = _MISSING) -> str:
        return self._raw(name, default)

    def _get_integer(self, name: str, default: Any, lo: int, hi: int, kind: str) -> int:
        value = self._raw(name, default)
        if not isinstance(value, str):
            return value  # the default
        if not _DECIMAL.match(value) or not lo <= int(value) <= hi:
            raise HeaderFieldError(
                f"the custom field <{name}> is not a valid {kind}: {value!r}"
            )
        return int(value)

    def get_int(self, name: str, default: Any = _MISSING) -> int:
        """A Java ``int`` field (32-bit, ``Integer.parseInt`` syntax)."""
        return self._get_integer(name, default, _INT_MIN, _INT_MAX, "int")

    def get_long(self, name: str, default: Any = _MISSING) -> int:
        """A Java ``long`` field (64-bit, ``Long.parseLong`` syntax)."""
        return self._get_integer(name, default, _LONG_MIN, _LONG_MAX, "long")

    def get_bool(
        self, name: str, default: Any = _MISSING, *, cpp_compatible: bool = False
    ) -> bool:
        """A Java ``boolean`` field: case-insensitive ``"true"`` is true.

        With ``cpp_compatible=True`` the C++ 1.2.x spelling ``"1"`` is true as
        well (e.g. its ``batch`` flag); the Java broker reads it as false.
        """
        value = self._raw(name, default)
        if not isinstance(value, str):
            return value  # the default
        if cpp_compatible and value == "1":
            return True
        return value.lower() == "true"

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        return (
            f"<RemotingCommand {kind} code={self.code} opaque={self.opaque} "
            f"flag={self.flag} {self.serialize_type.name} remark={self.remark!r} "
            f"ext={self.ext_fields!r} body={len(self.body)}B>"
        )
