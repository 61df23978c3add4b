"""CPU time and resident memory of a process, read from /proc/<pid>.

Rules it keeps:

- Read-only and best effort: a pid that is gone or unreadable gives None,
  never an exception, so a broker that dies mid-run still leaves a result.
- CPU is user + system time of the process and its waited-for children, in
  seconds; RSS is VmRSS in bytes.
- ``steady_rss`` waits (bounded) until a process's RSS stops changing, so a
  baseline is not taken while a broker that has just opened its port is
  still starting (ours maps its store files then: tens of MiB that are no
  connection's cost).
"""

from __future__ import annotations

import os
import time

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: split after the last ')'
    fields = stat[stat.rindex(")") + 2:].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / _TICKS


def open_files_limit(pid: int) -> int | None:
    """The soft limit on open files of process ``pid`` (None if unknown or unlimited)."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    soft = line.split()[3]
                    return None if soft == "unlimited" else int(soft)
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def steady_rss(pid: int, *, quiet: float = 0.5, limit: float = 5.0, step: float = 0.05) -> int | None:
    """The RSS of ``pid`` once it has not changed for ``quiet`` seconds, or
    whatever it is after ``limit`` seconds."""
    end = time.monotonic() + limit
    last = rss_bytes(pid)
    since = time.monotonic()
    while time.monotonic() < end:
        time.sleep(step)
        now = rss_bytes(pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


class ProcSampler:
    """Samples one process during a run: CPU used since ``begin`` and peak RSS."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.cpu0: float | None = None
        self.t0 = 0.0
        self.rss_peak: int | None = None
        self.rss_start: int | None = None

    def begin(self) -> None:
        if self.pid is None:
            return
        self.cpu0 = cpu_seconds(self.pid)
        self.t0 = time.monotonic()
        self.rss_start = rss_bytes(self.pid)
        self.rss_peak = self.rss_start

    def sample(self) -> None:
        if self.pid is None:
            return
        rss = rss_bytes(self.pid)
        if rss is not None and (self.rss_peak is None or rss > self.rss_peak):
            self.rss_peak = rss

    def end(self) -> dict:
        if self.pid is None or self.cpu0 is None:
            return {"broker_pid": self.pid, "broker_cpu_s": None, "broker_cpu_pct": None,
                    "broker_rss_start_mib": None, "broker_rss_peak_mib": None}
        self.sample()
        cpu = cpu_seconds(self.pid)
        wall = max(1e-9, time.monotonic() - self.t0)
        used = None if cpu is None else cpu - self.cpu0
        mib = 1 / (1024 * 1024)
        return {
            "broker_pid": self.pid,
            "broker_cpu_s": used,
            "broker_cpu_pct": None if used is None else 100.0 * used / wall,
            "broker_rss_start_mib": None if self.rss_start is None else self.rss_start * mib,
            "broker_rss_peak_mib": None if self.rss_peak is None else self.rss_peak * mib,
        }
