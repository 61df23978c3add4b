"""The body of a client batch send (SEND_BATCH_MESSAGE, reference section
4.7): items of (body, flag, properties), each ``TOTALSIZE, MAGIC(0),
BODYCRC(0), FLAG, BODY length`` then the body, the properties' length and
text. Not commit-log entries: the broker stores each item as one
(`core.store.message`). Nothing here does I/O.
"""

from __future__ import annotations

import struct

from .message import MessageFormatError, decode_properties, encode_properties

_SHORT = struct.Struct(">h")

_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGIC(0), BODYCRC(0), FLAG, BODY length


def encode_batch(items: list[tuple[bytes, int, dict[str, str]]]) -> bytes:
    """Items of (body, flag, properties) in the client batch layout."""
    parts = []
    for body, flag, props in items:
        props_b = encode_properties(props).encode()
        total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props_b)
        parts.append(_BATCH_HEAD.pack(total, 0, 0, flag, len(body)) + body + _SHORT.pack(len(props_b)) + props_b)
    return b"".join(parts)


def decode_batch(data: bytes) -> list[tuple[bytes, int, dict[str, str]]]:
    """Split a batch body into (body, flag, properties); `MessageFormatError` if malformed."""
    out = []
    pos = 0
    view = memoryview(data)
    while pos < len(view):
        if len(view) - pos < _BATCH_HEAD.size:
            raise MessageFormatError("truncated batch item", pos)
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(view, pos)
        p = pos + _BATCH_HEAD.size
        if total < _BATCH_HEAD.size + 2 or pos + total > len(view) or body_len < 0 or p + body_len + 2 > pos + total:
            raise MessageFormatError(f"batch item size {total} is inconsistent", pos)
        body = bytes(view[p : p + body_len])
        p += body_len
        (props_len,) = _SHORT.unpack_from(view, p)
        p += 2
        if props_len < 0 or p + props_len != pos + total:
            raise MessageFormatError(f"batch item properties length {props_len} is inconsistent", pos)
        try:
            props = decode_properties(bytes(view[p : p + props_len]).decode())
        except UnicodeDecodeError:
            raise MessageFormatError("batch item properties are not UTF-8", pos) from None
        out.append((body, flag, props))
        pos += total
    return out
