"""Remoting frames: encoding, and a streaming sans-I/O decoder.

Frame layout (reference 1.1, big-endian)::

    int32 total  = 4 + header length + body length   (bytes after this word)
    int32 word   = serialize type << 24 | header length
    header       (JSON text or ROCKETMQ binary)
    body         (the rest; its length is written nowhere)

Rules kept here:

- A frame, length word included, is at most ``max_frame_size`` bytes
  (default 16 MiB, Java's ``frameMaxLength``). The decoder rejects an
  oversized frame as soon as its length word arrives, before buffering it.
- ``total < 4``, a header longer than the frame, an unknown serialize type
  and any header decoding failure raise :class:`RemotingProtocolError`. After
  one, the decoder is dead: every later call raises the same error, so the
  server closes that connection only.
- :class:`FrameDecoder` never blocks and never loses bytes: ``receive_data``
  appends, ``frames`` yields every complete frame in order and keeps a
  partial one for later; the split points of the input never change the
  output. No I/O, trio, socket or clock here.
- Commands are written in their own ``serialize_type``; a response from
  ``make_response`` therefore goes out in its request's type.
"""

from __future__ import annotations

import struct
from typing import Iterator

from ._codes import SerializeType
from ._command import RemotingCommand, RemotingProtocolError
from ._header import (
    decode_json_header,
    decode_rocketmq_header,
    encode_json_header,
    encode_rocketmq_header,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameDecoder",
    "decode_frame",
    "encode_frame",
    "encode_frame_parts",
]

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
_HEAD = struct.Struct(">iI")
_I32 = struct.Struct(">i")
_JSON = SerializeType.JSON
_ROCKETMQ = SerializeType.ROCKETMQ


def encode_frame_parts(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    """``(prefix, body)``: the frame is ``prefix + body``.

    Lets a caller send a large body (a slice of the commit log) without
    copying it into one buffer.
    """
    if cmd.serialize_type == _ROCKETMQ:
        header = encode_rocketmq_header(cmd)
        kind = 1
    else:
        header = encode_json_header(cmd)
        kind = 0
    hlen = len(header)
    if hlen > 0xFFFFFF:
        raise ValueError(f"header of {hlen} bytes does not fit in 24 bits")
    body = cmd.body
    return _HEAD.pack(4 + hlen + len(body), kind << 24 | hlen) + header, body


def encode_frame(cmd: RemotingCommand) -> bytes:
    """One whole frame, length word included."""
    prefix, body = encode_frame_parts(cmd)
    return prefix + body if body else prefix


def _decode_payload(data: bytes | bytearray | memoryview, start: int, total: int,
                    word: int) -> RemotingCommand:
    """Decode the ``total`` bytes after a frame's length word at ``start``."""
    kind = word >> 24
    hlen = word & 0xFFFFFF
    if hlen > total - 4:
        raise RemotingProtocolError(
            f"header length {hlen} is longer than the frame ({total - 4} bytes)"
        )
    hstart = start + 4
    bstart = hstart + hlen
    header = bytes(data[hstart:bstart])
    body = bytes(data[bstart:start + total])
    if kind == 0:
        return decode_json_header(header, body)
    if kind == 1:
        return decode_rocketmq_header(header, body)
    raise RemotingProtocolError(f"unknown serialize type {kind}")


def _check_total(total: int, max_frame_size: int) -> None:
    if total < 4:
        raise RemotingProtocolError(f"bad frame length {total}")
    if total + 4 > max_frame_size:
        raise RemotingProtocolError(
            f"frame of {total + 4} bytes is larger than {max_frame_size}"
        )


def decode_frame(
    data: bytes, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
) -> RemotingCommand:
    """Decode exactly one whole frame (length word included)."""
    if len(data) < 8:
        raise RemotingProtocolError(f"frame of {len(data)} bytes is too short")
    total, word = _HEAD.unpack_from(data, 0)
    _check_total(total, max_frame_size)
    if total + 4 != len(data):
        raise RemotingProtocolError(
            f"frame length {total} does not match the {len(data) - 4} bytes given"
        )
    return _decode_payload(data, 4, total, word)


class FrameDecoder:
    """Bytes in, :class:`RemotingCommand` out, for one connection.

    ``receive_data(data)`` appends bytes; ``frames()`` yields each complete
    command. An empty ``receive_data(b"")`` marks end of input; ``at_eof``
    and ``buffered`` then tell whether the peer left a partial frame.
    """

    __slots__ = ("_buf", "_pos", "_error", "_eof", "max_frame_size")

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 8:
            raise ValueError("max_frame_size must be at least 8")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0  # start of the first byte not yet returned in a frame
        self._error: RemotingProtocolError | None = None
        self._eof = False

    def receive_data(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        if not data:
            self._eof = True
            return
        if self._eof:
            raise RuntimeError("receive_data after end of input")
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data

    @property
    def at_eof(self) -> bool:
        return self._eof

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a returned frame."""
        return len(self._buf) - self._pos

    def frames(self) -> Iterator[RemotingCommand]:
        """Yield every complete frame; safe to abandon and call again."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        max_frame_size = self.max_frame_size
        try:
            while True:
                pos = self._pos
                avail = len(buf) - pos
                if avail < 4:
                    break
                total = _I32.unpack_from(buf, pos)[0]
                _check_total(total, max_frame_size)
                if avail - 4 < total:
                    break
                word = _I32.unpack_from(buf, pos + 4)[0] & 0xFFFFFFFF
                cmd = _decode_payload(buf, pos + 4, total, word)
                self._pos = pos + 4 + total
                yield cmd
        except RemotingProtocolError as exc:
            self._error = exc
            raise
        if self._pos == len(buf):
            buf.clear()
            self._pos = 0
