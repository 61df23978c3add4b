"""Instructions per fanned-in message, counted by callgrind: a CPU figure that
does not depend on the machine or on what else it is doing.

    python -m loadtest.bench_instructions [--targets ours,mosquitto] [--count 2000]
                                          [--qos 0] [--publishers 4] [--settle]
                                          [--flush-sync] [--keep DIR]
    python -m loadtest.bench_instructions --connections 1000 [--settle] ...
    python -m loadtest.bench_instructions --rate 100 --count 500 [--settle] ...

Each target is run twice under ``valgrind --tool=callgrind``, from start to
a SIGTERM: once with a fan-in of ``--count`` messages (``--publishers``
clients, one wildcard subscriber), once with twice as many. The difference
of the two totals divided by ``--count`` is the cost of one more message:
start-up, imports, connection set-up and shutdown are in both runs and
cancel out, if the load starts after start-up is over (``--settle`` waits
until the broker is idle; without it, lazy start-up work overlaps the load
by a different amount in each run). (Timers that tick while the longer run lasts are not removed;
they weigh little against the messages. callgrind_control cannot be used
instead: an idle broker sits in epoll and never reads its commands.)

``--rate R`` paces the load instead: one raw publisher sends the messages
one at a time, R a second, to one raw subscriber (`bench_stalls.drive`,
L0's shape): each message is a read of its own, so the figure is the cost
of a message that arrives alone, per-read work included (a fan-in's reads
carry tens of messages each). The periodic work of the longer run's extra
``count / R`` seconds is in its difference: measure a target idle to see
how much (ours: about 1.2M instructions a second).

``--connections N`` counts a connection instead of a message: the load is
S5's storm (raw 3.1.1 clean-session clients, keepalive 0) of N, then 2N
connections, each held until all are up, then closed. The figure is the
cost of one connection's CONNECT, CONNACK and end (the storm's connects/s
is wall-clock time on a shared machine; this is not).

``--flush-sync`` starts ours with ``--flush sync`` (S2's setting; the
others have no such mode). ``--keep DIR`` keeps the callgrind outputs there
(``<target>.<messages>``) for ``callgrind_annotate --inclusive=yes``.

Prints one JSON object: per target, the instructions of each run and per
message, and each target's ratio to the first. Slow: the broker runs ~50x
slower under valgrind (a few minutes in all with the defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import brokers
from .bench_stalls import drive


def _fan_in(port: int, total: int, publishers: int, qos: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", "fan-in", "--host", "127.0.0.1", "--port", str(port),
         "--publishers", str(publishers), "--count", str(total // publishers), "--qos", str(qos),
         "--timeout", "900", "--drain", "30", "--no-progress"],
        capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"load generator failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.splitlines()[-1])


def _paced(port: int, total: int, qos: int, rate: float) -> dict:
    _sent, arrived = drive(port, qos, total, 0, rate)
    delivered = sum(1 for t in arrived if t)
    return {"delivered": delivered, "lost": total - delivered}


def _storm(port: int, connections: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", "storm", "--host", "127.0.0.1", "--port", str(port),
         "--connections", str(connections), "--timeout", "900", "--no-progress"],
        capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"load generator failed: {out.stderr.strip()[-500:]}")
    rec = json.loads(out.stdout.splitlines()[-1])
    if rec.get("connections") != connections:
        raise RuntimeError(f"storm: {rec.get('connections')} of {connections} connected ({rec.get('error')})")
    return rec


def _total(dump: Path) -> int:
    text = dump.read_text(errors="replace")
    m = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
    if not m:
        raise RuntimeError(f"no totals in {dump}")
    return int(m.group(1))


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def wait_idle(pid: int, timeout: float = 600.0, window: float = 2.0) -> bool:
    """Wait until the broker's CPU time grows by less than a tenth of a
    ``window`` in one window (its start-up is over: lazy imports, first
    flushes, collections), at most ``timeout`` s; whether it got there.
    Load that starts earlier overlaps the start-up by a different amount in
    the two runs, which does not cancel out (``--settle``)."""
    tick = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + timeout
    before = _cpu_ticks(pid)
    while time.monotonic() < deadline:
        time.sleep(window)  # a sampling period: the condition is the CPU time read after it
        now = _cpu_ticks(pid)
        if (now - before) / tick < window / 10:
            return True
        before = now
    return False


def measure(target: str, count: int, publishers: int, qos: int, settle: bool = False,
            flush_sync: bool = False, keep: Path | None = None, connections: int = 0, rate: float = 0.0) -> dict:
    """``count`` messages (a fan-in, or at ``rate`` one at a time), or
    (``connections``) that many connections, then twice as many."""
    dumps = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    runs = []
    try:
        for n in ((connections, 2 * connections) if connections else (count, 2 * count)):
            out = dumps / f"cg.{n}"
            b = brokers.Broker(target, flush_sync=flush_sync and target == "ours", startup_timeout=600, stop_timeout=600,
                               wrap=["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"])
            with b:
                if settle and not wait_idle(b.pid):
                    raise RuntimeError(f"{target}: still busy 600 s after its start (--no-settle to measure anyway)")
                if connections:
                    rec = _storm(b.port, n)
                elif rate:
                    rec = _paced(b.port, n, qos, rate)
                else:
                    rec = _fan_in(b.port, n, publishers, qos)
            if not out.exists():
                raise RuntimeError(f"{target}: callgrind wrote no counts (did the broker exit on SIGTERM?)")
            if connections:
                runs.append({"connections": n, "instructions": _total(out)})
            else:
                runs.append({"messages": n, "delivered": rec["delivered"], "lost": rec["lost"],
                             "instructions": _total(out)})
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(out, keep / f"{target}.{n}")
    finally:
        shutil.rmtree(dumps, ignore_errors=True)
    per = (runs[1]["instructions"] - runs[0]["instructions"]) / (connections or count)
    return {"runs": runs, ("instructions_per_connection" if connections else "instructions_per_message"): round(per)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_instructions",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="ours,mosquitto")
    ap.add_argument("--count", type=int, default=2000, help="messages in the first run (the second has twice)")
    ap.add_argument("--publishers", type=int, default=4)
    ap.add_argument("--qos", type=int, choices=(0, 1, 2), default=0)
    ap.add_argument("--settle", action="store_true",
                    help="start each run's load once the broker is idle (steadier: start-up does not overlap the load)")
    ap.add_argument("--flush-sync", action="store_true", help="ours with --flush sync (SYNC_FLUSH), as in S2")
    ap.add_argument("--keep", type=Path, default=None, help="keep the callgrind outputs in this folder")
    ap.add_argument("--connections", type=int, default=0,
                    help="count a connection instead of a message: storms of N, then 2N connections (as S5)")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="send the messages one at a time, this many a second, from one publisher (as L0)")
    a = ap.parse_args(argv)
    if a.rate and a.qos == 2:
        ap.error("--rate sends QoS 0 or 1 (the paced load of loadtest.bench_stalls)")
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    targets = [t for t in a.targets.split(",") if t]
    if a.connections:
        result = {"connections": a.connections, "targets": {}}
        key = "instructions_per_connection"
    else:
        result = {"qos": a.qos, "publishers": 1 if a.rate else a.publishers, "count": a.count,
                  "flush_sync": a.flush_sync, "rate": a.rate or None, "targets": {}}
        key = "instructions_per_message"
    for t in targets:
        result["targets"][t] = measure(t, a.count, a.publishers, a.qos, a.settle, a.flush_sync, a.keep,
                                       a.connections, a.rate)
        print(json.dumps({t: result["targets"][t]}), file=sys.stderr)
    first = result["targets"][targets[0]][key]
    for t in targets[1:]:
        other = result["targets"][t][key]
        result[f"{targets[0]}_over_{t}"] = round(first / other, 2) if other else None
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
