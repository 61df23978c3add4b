"""The RocketMQ 4.x HA wire (reference 8), sans-I/O: bytes in, values out.

Two one-way streams on one plain TCP connection (no remoting framing):

- slave -> master: reports, each an 8-byte big-endian int64, the slave's
  commit-log end.  A master acts on the last complete report in what it
  read (`ReportDecoder`); a partial one waits for its remaining bytes.
- master -> slave: frames of ``[offset int64][size int32][size bytes of the
  commit log from offset]`` (`FrameDecoder`); size 0 is a heartbeat.

Rules kept: nothing here touches a socket or a clock; a frame whose size is
negative or larger than ``max_body`` is a `HAProtocolError` (the peer broke
the rules: the link is closed), never a huge allocation.
"""

from __future__ import annotations

import struct

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
HEADER_SIZE = HEADER.size  # 12


class HAProtocolError(Exception):
    """The peer sent bytes that are not the HA wire."""


def encode_report(offset: int) -> bytes:
    return REPORT.pack(offset)


def encode_frame(offset: int, body: bytes = b"") -> bytes:
    return HEADER.pack(offset, len(body)) + body


class ReportDecoder:
    """The master's side: the slave's latest reported offset."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def receive_data(self, data: bytes) -> int | None:
        """Feed bytes; return the last complete report in them, or None."""
        self._buf += data
        n = len(self._buf) // 8
        if not n:
            return None
        (offset,) = REPORT.unpack_from(self._buf, (n - 1) * 8)
        del self._buf[: n * 8]
        if offset < 0:
            raise HAProtocolError(f"slave reported a negative offset {offset}")
        return offset


class FrameDecoder:
    """The slave's side: (offset, body) frames, heartbeats as empty bodies."""

    def __init__(self, max_body: int = 64 * 1024 * 1024) -> None:
        self._buf = bytearray()
        self._max_body = max_body

    def receive_data(self, data: bytes) -> None:
        self._buf += data

    def next_frame(self) -> tuple[int, bytes] | None:
        """The next complete frame, or None until more bytes arrive."""
        buf = self._buf
        if len(buf) < HEADER_SIZE:
            return None
        offset, size = HEADER.unpack_from(buf, 0)
        if size < 0 or size > self._max_body or offset < 0:
            raise HAProtocolError(f"bad HA frame header: offset {offset}, size {size}")
        end = HEADER_SIZE + size
        if len(buf) < end:
            return None
        body = bytes(buf[HEADER_SIZE:end])
        del buf[:end]
        return offset, body

    @property
    def buffered(self) -> int:
        return len(self._buf)
