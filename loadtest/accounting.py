"""Message stamps and the accounting of what was sent against what arrived.

Rules it keeps:

- Every payload starts with a 20-byte stamp: magic ``mqlt``, publisher id
  (u32), sequence number (u32, from 0, per publisher) and the send time in
  ``time.monotonic_ns()`` (u64; one clock for every process on the machine).
  Bytes after the stamp are padding. A payload without the magic is counted
  as ``foreign``, never as a delivery.
- Accounting is pure: it takes what publishers say they sent and what each
  subscriber saw, in arrival order, and derives every count. It is the only
  place where lost, duplicated and out-of-order are defined:
    * a *delivery group* is the set of subscribers that together should get
      each message of a publisher once (one plain subscriber, or the members
      of one shared subscription);
    * ``lost`` = sent - distinct sequence numbers the group got;
    * ``duplicated`` = arrivals - distinct sequence numbers;
    * ``out_of_order`` = arrivals, per subscriber and publisher, whose
      sequence number is lower than one that subscriber already got from that
      publisher (duplicates are not also counted out of order).
- Percentiles use the nearest-rank method on sorted data (p100 is the max).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

STAMP = struct.Struct("!4sIIQ")
STAMP_SIZE = STAMP.size
MAGIC = b"mqlt"


def stamp(publisher: int, seq: int, t_ns: int, size: int) -> bytes:
    """A payload of ``size`` bytes (at least STAMP_SIZE) carrying the stamp."""
    head = STAMP.pack(MAGIC, publisher, seq, t_ns)
    return head + bytes(size - STAMP_SIZE) if size > STAMP_SIZE else head


def read_stamp(payload) -> tuple[int, int, int] | None:
    """(publisher, seq, t_ns) or None for a payload we did not stamp."""
    if len(payload) < STAMP_SIZE:
        return None
    magic, publisher, seq, t_ns = STAMP.unpack_from(payload, 0)
    return (publisher, seq, t_ns) if magic == MAGIC else None


def percentile(sorted_values, p: float):
    """Nearest-rank percentile of already sorted values; None when empty."""
    n = len(sorted_values)
    if not n:
        return None
    rank = max(1, math.ceil(p / 100.0 * n))
    return sorted_values[min(rank, n) - 1]


def latency_summary(latencies_ns) -> dict:
    """p50/p90/p99/max/mean in milliseconds, plus a 101-point CDF."""
    values = sorted(latencies_ns)
    if not values:
        return {"count": 0, "p50": None, "p90": None, "p99": None,
                "max": None, "mean": None, "cdf": []}
    ms = 1e-6
    return {
        "count": len(values),
        "p50": percentile(values, 50) * ms,
        "p90": percentile(values, 90) * ms,
        "p99": percentile(values, 99) * ms,
        "max": values[-1] * ms,
        "mean": sum(values) / len(values) * ms,
        # cdf[i] is the i-th percentile (i = 0..100), enough to draw the curve
        "cdf": [round(percentile(values, max(i, 0.0001)) * ms, 6)
                for i in range(101)],
    }


@dataclass
class SubscriberLog:
    """What one subscriber saw: per publisher, sequence numbers in arrival order."""

    group: str
    arrivals: dict[int, list[int]] = field(default_factory=dict)
    latencies_ns: list[int] = field(default_factory=list)
    foreign: int = 0

    def record(self, payload, now_ns: int) -> int | None:
        """Account one arrival; returns the publisher id or None if foreign."""
        got = read_stamp(payload)
        if got is None:
            self.foreign += 1
            return None
        publisher, seq, t_ns = got
        self.arrivals.setdefault(publisher, []).append(seq)
        self.latencies_ns.append(now_ns - t_ns)
        return publisher


@dataclass
class PublisherTally:
    publisher: int
    sent: int = 0
    delivered: int = 0
    distinct: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0


def out_of_order(seqs) -> int:
    """Arrivals lower than the highest seen so far, duplicates excluded."""
    seen: set[int] = set()
    highest = -1
    count = 0
    for seq in seqs:
        if seq in seen:
            continue
        seen.add(seq)
        if seq < highest:
            count += 1
        else:
            highest = seq
    return count


def tally(sent: dict[int, int], logs: list[SubscriberLog],
          expected_groups: dict[int, list[str]] | None = None) -> list[PublisherTally]:
    """Per-publisher counts.

    ``sent`` maps publisher id to messages it sent (sequence numbers 0..n-1).
    ``expected_groups`` maps publisher id to the delivery groups that should
    get its messages; by default every group that appears in ``logs``.
    """
    groups = sorted({log.group for log in logs})
    out = []
    for publisher in sorted(sent):
        row = PublisherTally(publisher, sent=sent[publisher])
        targets = (expected_groups or {}).get(publisher, groups)
        for group in targets:
            members = [log for log in logs if log.group == group]
            distinct: set[int] = set()
            arrivals = 0
            for log in members:
                seqs = log.arrivals.get(publisher, [])
                arrivals += len(seqs)
                distinct.update(seqs)
                row.out_of_order += out_of_order(seqs)
            # a sequence number the publisher never sent is not a delivery
            valid = sum(1 for s in distinct if 0 <= s < sent[publisher])
            row.delivered += arrivals
            row.distinct += valid
            row.duplicated += arrivals - len(distinct)
            row.lost += sent[publisher] - valid
        out.append(row)
    return out


def series(times_ns, t0_ns: int, bucket_s: float) -> list[int]:
    """Counts per time bucket since t0 (for throughput-over-time charts)."""
    width = int(bucket_s * 1e9)
    counts: list[int] = []
    for t in times_ns:
        i = max(0, (t - t0_ns) // width)
        if i >= len(counts):
            counts.extend([0] * (i + 1 - len(counts)))
        counts[i] += 1
    return counts


def add_series(a: list[int], b: list[int]) -> list[int]:
    if len(a) < len(b):
        a, b = b, a
    return [x + (b[i] if i < len(b) else 0) for i, x in enumerate(a)]


class Buckets:
    """Counts per time bucket since ``t0_ns``, filled as events happen."""

    def __init__(self, t0_ns: int, width_s: float) -> None:
        self.t0_ns = t0_ns
        self.width = max(1, int(width_s * 1e9))
        self.counts: list[int] = []

    def add(self, t_ns: int, n: int = 1) -> None:
        i = max(0, (t_ns - self.t0_ns) // self.width)
        counts = self.counts
        if i >= len(counts):
            counts.extend([0] * (i + 1 - len(counts)))
        counts[i] += n
