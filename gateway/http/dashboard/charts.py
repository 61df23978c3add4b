"""The overview's rate charts: a ring buffer of counter samples and inline SVG.

Rules kept here:
- One trio task (``RateSampler.run``, owned by the HTTP server's nursery)
  reads the gateway's plain counters every ``interval`` seconds; nothing is
  added to the MQTT or broker hot paths. ``keep`` samples are held (15
  minutes at the defaults); older ones fall off.
- A rate is the difference of two consecutive samples over their time
  apart; a counter that went down (a restart of the counters) gives 0.
- The SVG holds only numbers and the caller's label and unit, escaped here.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

import trio
from markupsafe import Markup, escape

SAMPLE_INTERVAL_S = 5.0
SAMPLES_KEPT = 180  # 15 minutes at 5 s


class RateSampler:
    """Samples of ``read()`` (a dict of counters and gauges) over time."""

    def __init__(self, read: Callable[[], dict[str, float]], *, interval: float = SAMPLE_INTERVAL_S,
                 keep: int = SAMPLES_KEPT, clock: Callable[[], float] = time.time) -> None:
        self.read = read
        self.interval = interval
        self.clock = clock
        self.samples: deque[tuple[float, dict[str, float]]] = deque(maxlen=keep)

    def sample(self) -> None:
        self.samples.append((self.clock(), self.read()))

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            self.sample()
            await trio.sleep(self.interval)

    def _with_now(self) -> list[tuple[float, dict[str, float]]]:
        """The kept samples plus one taken now (not kept), so a page opened
        right after start already has a line."""
        points = list(self.samples)
        now = self.clock()
        if not points or now - points[-1][0] >= 0.5:
            points.append((now, self.read()))
        return points

    def rate(self, name: str) -> list[tuple[float, float]]:
        """[(time, per-second rate of counter ``name``)] between consecutive samples."""
        points = self._with_now()
        out = []
        for (t0, a), (t1, b) in zip(points, points[1:]):
            dt = t1 - t0
            if dt > 0:
                out.append((t1, max(0.0, (b[name] - a[name]) / dt)))
        return out

    def gauge(self, name: str) -> list[tuple[float, float]]:
        return [(t, s[name]) for t, s in self._with_now()]


def _fmt(v: float) -> str:
    if v >= 1_000_000:
        return f"{v / 1_000_000:.1f}M"
    if v >= 1000:
        return f"{v / 1000:.1f}k"
    return f"{v:.0f}" if v == int(v) or v >= 10 else f"{v:.2f}"


def svg_chart(points: list[tuple[float, float]], label: str, unit: str = "", *, width: int = 360,
              height: int = 120) -> Markup:
    """A line chart of ``points`` (time, value) with the last value and the peak."""
    pad_l, pad_r, pad_t, pad_b = 6, 6, 22, 16
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    last = points[-1][1] if points else 0.0
    peak = max((v for _t, v in points), default=0.0)
    top = peak if peak > 0 else 1.0
    head = (f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'aria-label="{escape(label)}"><text x="{pad_l}" y="14" class="chart-label">{escape(label)}: '
            f'{_fmt(last)}{escape(unit)}</text><text x="{width - pad_r}" y="14" text-anchor="end" '
            f'class="chart-peak">peak {_fmt(peak)}</text>'
            f'<line x1="{pad_l}" y1="{pad_t + h}" x2="{pad_l + w}" y2="{pad_t + h}" class="chart-axis"/>')
    if len(points) < 2:
        return Markup(head + f'<text x="{width / 2}" y="{pad_t + h / 2}" text-anchor="middle" '
                      f'class="chart-empty">collecting samples...</text></svg>')
    t0, t1 = points[0][0], points[-1][0]
    span = (t1 - t0) or 1.0
    coords = " ".join(f"{pad_l + (t - t0) / span * w:.1f},{pad_t + h - v / top * h:.1f}" for t, v in points)
    ago = f"{span / 60:.0f} min ago" if span >= 60 else f"{span:.0f} s ago"
    return Markup(head + f'<polyline fill="none" class="chart-line" points="{coords}"/>'
                  f'<text x="{pad_l}" y="{height - 3}" class="chart-axis-label">{ago}</text>'
                  f'<text x="{width - pad_r}" y="{height - 3}" text-anchor="end" class="chart-axis-label">now</text>'
                  '</svg>')
