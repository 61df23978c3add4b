"""A one-line progress bar on stderr (no dependency).

Rules it keeps: it writes only to its stream, at most ten times a second,
only when the stream is a terminal (or when forced), and ``close`` always
leaves the cursor on a fresh line.
"""

from __future__ import annotations

import sys
import time


class ProgressBar:
    def __init__(self, label: str, total: int, *, stream=None, enabled: bool | None = None,
                 width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label, self.total, self.width = label, max(1, total), width
        self.t0 = time.monotonic()
        self._last = 0.0
        self._drawn = False

    def update(self, done: int, note: str = "", *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        frac = min(1.0, done / self.total)
        filled = int(frac * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        line = (f"\r{self.label} [{bar}] {frac * 100:5.1f}% {done}/{self.total} "
                f"{now - self.t0:6.1f}s {note}")
        self.stream.write(line[:160].ljust(100))
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
