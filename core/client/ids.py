"""UNIQ_KEY generation: the client-side message id (reference 4.5).

Layout (16 bytes, 32 uppercase hex characters, like Java's
``MessageClientIDSetter`` for an IPv4 host): client IPv4 (4) + low 16 bits
of the pid (2) + a random int32 standing for Java's class-loader hash (4),
then int32 ms since the start of the current month + int16 counter.
Unique per process as long as fewer than 65536 ids are made in one ms.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import struct
import time
from datetime import datetime

__all__ = ["UniqKeyFactory"]


def _month_bounds_ms(now_s: float) -> tuple[int, int]:
    start = datetime.fromtimestamp(now_s).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


class UniqKeyFactory:
    def __init__(self, ip: str = "127.0.0.1") -> None:
        try:
            ip_b = socket.inet_aton(ip)
        except OSError:
            ip_b = b"\x7f\x00\x00\x01"
        prefix = ip_b + struct.pack(">H", os.getpid() & 0xFFFF) + struct.pack(">i", random.randint(-2**31, 2**31 - 1))
        self._prefix = prefix.hex().upper()
        self._counter = itertools.count(random.randrange(65536))
        self._month_start = 0
        self._next_month = 0

    def new(self) -> str:
        now_ms = int(time.time() * 1000)
        if now_ms >= self._next_month:
            self._month_start, self._next_month = _month_bounds_ms(now_ms / 1000)
        suffix = struct.pack(">iH", (now_ms - self._month_start) & 0x7FFFFFFF, next(self._counter) & 0xFFFF)
        return self._prefix + suffix.hex().upper()
