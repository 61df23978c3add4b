"""Durations counted per bucket, for /metrics (flush and replication waits).

Rules kept here: buckets are cumulative like Prometheus's (``counts[i]`` is
how many took at most ``BOUNDS[i]`` seconds); ``observe`` is called once per
flush or per wait, never per message; no clock is read here (callers time).
"""

from __future__ import annotations


class LatencyHistogram:
    """Counts of durations (seconds) per bucket, cumulative like Prometheus's:
    ``counts[i]`` is how many took at most ``BOUNDS[i]``; read by /metrics."""

    BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

    def __init__(self) -> None:
        self.counts = [0] * len(self.BOUNDS)
        self.count = 0
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.count += 1
        self.sum += seconds
        for i, bound in enumerate(self.BOUNDS):
            if seconds <= bound:
                self.counts[i] += 1
