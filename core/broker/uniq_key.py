"""UNIQ_KEY for messages that arrive without one (MQTT publishes, ali-ons sends).

Same 16-byte layout as Java's ``MessageClientIDSetter`` so tools that parse
it see sensible fields: ip (4) + low 16 bits of pid (2) + a random int
(4, the classloader hash in Java) written once as a prefix; then int32 ms
since the start of the current month + int16 counter. Uppercase hex, 32
characters.

Invariant: within one process the (time, counter) pair strictly increases,
so ids never repeat; when the counter wraps inside one millisecond the time
part moves forward by one. `next_many` hands out the same sequence `next`
would, for a whole batch at once: one clock read and one time part per
millisecond of counter used, not per id.
"""

from __future__ import annotations

import datetime
import os
import random
import socket
import struct
import time

try:
    import cython
except ImportError:  # a pure-Python install: nothing here is compiled
    from core.store import _cython_shadow as cython


class UniqKeyGenerator:
    __slots__ = ("_prefix", "_month_start_ms", "_next_month_ms", "_last_ms", "_counter", "_stem")

    def __init__(self, ip: str = "127.0.0.1"):
        try:
            ip_b = socket.inet_aton(ip)
        except OSError:
            ip_b = b"\x7f\x00\x00\x01"
        self._prefix = (ip_b + struct.pack(">HI", os.getpid() & 0xFFFF, random.getrandbits(32))).hex().upper()
        self._month_start_ms = 0
        self._next_month_ms = 0
        self._last_ms = -1
        self._counter = 0
        self._stem = ""  # prefix + time part of _last_ms: built once per millisecond, not per id

    def _roll_month(self, now_ms: int) -> None:
        now = datetime.datetime.fromtimestamp(now_ms / 1000)
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (start + datetime.timedelta(days=32)).replace(day=1)
        self._month_start_ms = int(start.timestamp() * 1000)
        self._next_month_ms = int(nxt.timestamp() * 1000)

    def next(self) -> str:
        now_ms = time.time_ns() // 1_000_000
        if now_ms >= self._next_month_ms or now_ms < self._month_start_ms:
            self._roll_month(now_ms)
            self._last_ms = -1
        rel = now_ms - self._month_start_ms
        if rel <= self._last_ms:
            counter = self._counter + 1
            if counter > 0xFFFF:
                counter = 0
                rel = self._last_ms + 1
            else:
                rel = self._last_ms
        else:
            counter = 0
        self._counter = counter
        if rel != self._last_ms:
            self._last_ms = rel
            self._stem = f"{self._prefix}{rel & 0x7FFFFFFF:08X}"
        return self._stem + _HEX2[counter >> 8] + _HEX2[counter & 0xFF]

    def next_many(self, n: int) -> list[str]:
        """``n`` ids, as ``n`` calls of `next` in the same millisecond would give."""
        keys: list[str] = []
        if n <= 0:
            return keys
        first = self.next()  # the clock, the month and the time part, once
        keys.append(first)
        counter = self._counter
        stem = self._stem
        rel = self._last_ms
        left = n - 1
        while left:
            if counter == 0xFFFF:  # wrapped inside this millisecond: the time part moves on (see `next`)
                counter = -1
                rel += 1
                stem = f"{self._prefix}{rel & 0x7FFFFFFF:08X}"
            take = min(left, 0xFFFF - counter)
            _append_keys(keys, stem, counter + 1, take)
            counter += take
            left -= take
        self._counter = counter
        self._last_ms = rel
        self._stem = stem
        return keys


_HEX2 = [f"{i:02X}" for i in range(256)]


def _append_keys(keys: list, stem: str, first: int, n: int) -> None:
    """Append to ``keys`` the ids ``stem`` + 4 uppercase hex digits of the
    counters ``first`` .. ``first + n - 1`` (at most 0xFFFF). Compiled
    (uniq_key.pxd), each id is one new ASCII str written in place, not two
    concatenations."""
    if cython.compiled:
        if PyUnicode_IS_ASCII(stem):
            m = PyUnicode_GET_LENGTH(stem)
            src = cython.cast(cython.p_char, PyUnicode_DATA(stem))
            for c in range(first, first + n):
                key = PyUnicode_New(m + 4, 127)
                dst = cython.cast(cython.p_char, PyUnicode_DATA(key))
                memcpy(dst, src, m)
                for j in range(4):
                    d = (c >> (12 - 4 * j)) & 15
                    dst[m + j] = d + 48 if d < 10 else d + 55  # 0-9, A-F
                keys.append(key)
            return
    hi = -1
    row = ""
    for c in range(first, first + n):
        if c >> 8 != hi:
            hi = c >> 8
            row = stem + _HEX2[hi]
        keys.append(row + _HEX2[c & 0xFF])
