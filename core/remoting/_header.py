"""The two header encodings of a remoting frame: JSON (type 0), ROCKETMQ (type 1).

Rules kept here (reference sections 1.2, 1.3 and 1.6):

- JSON output is compact and keyed in Java's (alphabetical) order: ``code``,
  ``extFields`` (omitted when empty; entries in insertion order), ``flag``,
  ``language`` (by name), ``opaque``, ``remark`` (omitted when ``None``),
  ``serializeTypeCurrentRPC`` (``"JSON"``), ``version``. Strings are written
  with raw UTF-8, like fastjson; every extFields value is a JSON string.
- JSON input accepts any key order and whitespace. extFields values are
  coerced the way fastjson reads them into ``Map<String,String>``: strings
  as is, ``true``/``false`` as ``"true"``/``"false"``, numbers as their
  decimal text, nested objects/arrays as compact JSON text, ``null`` dropped.
  Missing ``code``/``opaque``/``flag``/``version`` read as 0, a missing or
  unknown ``language`` as JAVA / OTHER; ``serializeTypeCurrentRPC`` is
  ignored (the header-length word decides).
- ROCKETMQ binary: int16 code, byte language, int16 version, int32 opaque,
  int32 flag, int32 remark length + UTF-8 remark (0 = ``None``), int32 map
  length + entries (int16 key length, key, int32 value length, value). As in
  Java, a 0-length string reads as null, so such an entry is dropped; bytes
  after the map area are ignored; invalid UTF-8 is replaced (``new String``).
- Anything else (bad JSON, not an object, a field of the wrong type or out of
  the Java int range, lengths that run past the header) raises
  :class:`RemotingProtocolError`.
"""

from __future__ import annotations

import json
import struct
from json.encoder import encode_basestring as _quote  # type: ignore[attr-defined]
from typing import Any

from ._codes import LanguageCode, SerializeType
from ._command import RemotingCommand, RemotingProtocolError

__all__ = [
    "decode_json_header",
    "decode_rocketmq_header",
    "encode_json_header",
    "encode_rocketmq_header",
]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LANG_BY_NAME = {lang.name: lang for lang in LanguageCode}
_LANG_BY_CODE = {int(lang): lang for lang in LanguageCode}
_FIXED = struct.Struct(">hBhiii")  # code, language, version, opaque, flag, remark len
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
# parse_float=str keeps the literal text of non-integers for extFields; one
# decoder object, since json.loads would build a new one per call.
_JSON_DECODER = json.JSONDecoder(parse_float=str)


# -- JSON ----------------------------------------------------------------


def encode_json_header(cmd: RemotingCommand) -> bytes:
    parts = ['{"code":', str(int(cmd.code))]
    if cmd.ext_fields:
        parts.append(',"extFields":{')
        parts.append(
            ",".join(f"{_quote(k)}:{_quote(v)}" for k, v in cmd.ext_fields.items())
        )
        parts.append("}")
    parts += [
        ',"flag":', str(int(cmd.flag)),
        ',"language":"', LanguageCode(cmd.language).name,
        '","opaque":', str(int(cmd.opaque)),
    ]
    if cmd.remark is not None:
        parts += [',"remark":', _quote(cmd.remark)]
    parts += [',"serializeTypeCurrentRPC":"JSON","version":', str(int(cmd.version)), "}"]
    return "".join(parts).encode("utf-8")


def _coerce(value: Any) -> str | None:
    """fastjson's reading of one JSON value into a Java String."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return None
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _int_field(obj: dict, name: str) -> int:
    value = obj.get(name)
    if type(value) is int and _INT_MIN <= value <= _INT_MAX:
        return value
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise RemotingProtocolError(f"JSON header field {name!r} is not an int: {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise RemotingProtocolError(
            f"JSON header field {name!r} is not an int: {value!r}"
        ) from None
    if not _INT_MIN <= number <= _INT_MAX:
        raise RemotingProtocolError(f"JSON header field {name!r} out of range: {number}")
    return number


def decode_json_header(raw: bytes, body: bytes) -> RemotingCommand:
    try:
        obj = _JSON_DECODER.decode(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RemotingProtocolError(f"bad JSON header: {exc}") from None
    if not isinstance(obj, dict):
        raise RemotingProtocolError("JSON header is not an object")
    lang = obj.get("language")
    if lang is None:
        language = LanguageCode.JAVA
    elif isinstance(lang, str):
        language = _LANG_BY_NAME.get(lang, LanguageCode.OTHER)
    elif isinstance(lang, int) and not isinstance(lang, bool):
        language = _LANG_BY_CODE.get(lang, LanguageCode.OTHER)
    else:
        raise RemotingProtocolError(f"JSON header field 'language' is {lang!r}")
    raw_ext = obj.get("extFields")
    ext: dict[str, str] = {}
    if raw_ext is not None:
        if not isinstance(raw_ext, dict):
            raise RemotingProtocolError("JSON header field 'extFields' is not an object")
        for key, value in raw_ext.items():
            if type(value) is str:
                ext[key] = value
            else:
                text = _coerce(value)
                if text is not None:
                    ext[key] = text
    return RemotingCommand(
        code=_int_field(obj, "code"),
        language=language,
        version=_int_field(obj, "version"),
        opaque=_int_field(obj, "opaque"),
        flag=_int_field(obj, "flag"),
        remark=_coerce(obj.get("remark")),
        ext_fields=ext,
        body=body,
        serialize_type=SerializeType.JSON,
    )


# -- ROCKETMQ binary -----------------------------------------------------


def encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode("utf-8") if cmd.remark else b""
    entries = []
    for key, value in cmd.ext_fields.items():
        k = key.encode("utf-8")
        v = value.encode("utf-8")
        entries.append(_I16.pack(len(k)) + k + _I32.pack(len(v)) + v)
    ext = b"".join(entries)
    try:
        fixed = _FIXED.pack(
            int(cmd.code), int(cmd.language), int(cmd.version),
            int(cmd.opaque), int(cmd.flag), len(remark),
        )
    except struct.error as exc:
        raise ValueError(f"command does not fit the ROCKETMQ header: {exc}") from None
    return b"".join((fixed, remark, _I32.pack(len(ext)), ext))


def _text(data: bytes) -> str | None:
    return data.decode("utf-8", "replace") if data else None


def decode_rocketmq_header(raw: bytes, body: bytes) -> RemotingCommand:
    size = len(raw)
    if size < _FIXED.size + 4:
        raise RemotingProtocolError(f"ROCKETMQ header of {size} bytes is too short")
    code, lang, version, opaque, flag, remark_len = _FIXED.unpack_from(raw, 0)
    pos = _FIXED.size
    if remark_len < 0 or pos + remark_len + 4 > size:
        raise RemotingProtocolError(f"ROCKETMQ header: bad remark length {remark_len}")
    remark = _text(raw[pos:pos + remark_len])
    pos += remark_len
    (ext_len,) = _I32.unpack_from(raw, pos)
    pos += 4
    end = pos + ext_len
    if ext_len < 0 or end > size:
        raise RemotingProtocolError(f"ROCKETMQ header: bad extFields length {ext_len}")
    ext: dict[str, str] = {}
    while pos < end:
        if pos + 2 > end:
            raise RemotingProtocolError("ROCKETMQ header: truncated extFields key")
        (klen,) = _I16.unpack_from(raw, pos)
        pos += 2
        if klen < 0 or pos + klen + 4 > end:
            raise RemotingProtocolError(f"ROCKETMQ header: bad key length {klen}")
        key = _text(raw[pos:pos + klen])
        pos += klen
        (vlen,) = _I32.unpack_from(raw, pos)
        pos += 4
        if vlen < 0 or pos + vlen > end:
            raise RemotingProtocolError(f"ROCKETMQ header: bad value length {vlen}")
        value = _text(raw[pos:pos + vlen])
        pos += vlen
        if key is not None and value is not None:
            ext[key] = value
    return RemotingCommand(
        code=code,
        language=_LANG_BY_CODE.get(lang, LanguageCode.OTHER),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )
