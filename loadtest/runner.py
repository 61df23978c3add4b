"""Runs one scenario against one broker and returns its result record.

Rules it keeps:

- Traffic goes to loopback only: ``require_loopback`` refuses any host that
  resolves to anything else, before a socket is opened.
- Bounded: the run ends at ``scenario.timeout`` seconds after it starts,
  whatever the clients do; every worker process is killed on the way out,
  including on Ctrl-C and on errors.
- The record (one JSON line) is the contract; its keys are listed in
  ``RECORD_KEYS`` and are always all present (None when not measured).
  ``ok`` is False when setup failed or the run timed out; ``error`` says why.
"""

from __future__ import annotations

import ipaddress
import multiprocessing as mp
import os
import queue as queue_mod
import socket
import time
import uuid
from datetime import datetime, timezone

from . import accounting, scenarios, worker
from .procstat import ProcSampler, open_files_limit, rss_bytes, steady_rss
from .progress import ProgressBar

SCHEMA = "mqgate-loadtest/1"
FD_MARGIN = 100  # files a broker needs besides its connections (store, listeners, logs)
SOURCE_LIMIT = 10_000  # storm connections one source address carries (TIME_WAITs of earlier runs share its ports); beyond, they are spread (worker.RunConfig)
RECORD_KEYS = (
    "schema", "scenario", "label", "broker", "host", "port", "params", "ok", "error",
    "timed_out", "started_at", "wall_s", "run_s", "sent", "expected", "delivered",
    "distinct", "lost", "duplicated", "out_of_order", "foreign", "publish_rate",
    "delivered_rate", "latency_ms", "per_publisher", "connections", "connects_per_s",
    "rss_per_1000_mib", "broker_pid", "broker_cpu_s", "broker_cpu_pct",
    "broker_rss_start_mib", "broker_rss_peak_mib", "generator_cpu_s", "workers",
    "series",
)


class NotLoopback(ValueError):
    pass


def require_loopback(host: str) -> None:
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror as exc:
        raise NotLoopback(f"cannot resolve {host!r}: {exc}") from None
    for info in infos:
        addr = ipaddress.ip_address(info[4][0].split("%")[0])
        if not addr.is_loopback:
            raise NotLoopback(f"refusing {host!r} ({addr}): load tests only target loopback "
                              "(127.0.0.0/8 or ::1)")


class _Control:
    def __init__(self, ctx, workers: int) -> None:
        self.queue = ctx.Queue()
        self.start = ctx.Event()
        self.pubs_done = ctx.Event()
        self.t0 = ctx.Value("q", 0, lock=False)
        self.counters = ctx.RawArray("q", 2 * workers)


def empty_record(s: scenarios.Scenario, broker: str, host: str, port: int) -> dict:
    rec = dict.fromkeys(RECORD_KEYS)
    rec.update(schema=SCHEMA, scenario=s.name, label=s.label, broker=broker, host=host,
               port=port, params=s.params(), ok=False, timed_out=False,
               started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    return rec


def run(s: scenarios.Scenario, host: str, port: int, *, broker: str = "target",
        broker_pid: int | None = None, progress: bool | None = None) -> dict:
    """Run ``s`` against host:port; the result record (see RECORD_KEYS)."""
    require_loopback(host)
    rec = empty_record(s, broker, host, port)
    limit = open_files_limit(broker_pid) if broker_pid and s.name == "storm" else None
    if limit is not None and s.connections + FD_MARGIN > limit:
        rec["error"] = (f"{broker} may open {limit} files (its limit; raising the hard limit needs "
                        f"CAP_SYS_RESOURCE), too few for a storm of {s.connections} connections")
        return rec
    run_id = uuid.uuid4().hex[:8]
    plan = scenarios.build(s, run_id)
    shares = scenarios.split(plan.clients, scenarios.default_workers(s, os.cpu_count() or 2))
    ctx = mp.get_context("fork")
    control = _Control(ctx, len(shares))
    t_start = time.monotonic_ns()
    deadline_ns = t_start + int(s.timeout * 1e9)
    cfg = worker.RunConfig(host=host, port=port, qos=s.qos, payload=s.payload,
                           inflight=s.inflight, version=s.protocol, mode=s.mode,
                           deadline_ns=deadline_ns - int(min(2.0, s.timeout / 10) * 1e9),
                           drain=s.drain, bucket=s.bucket,
                           spread_sources=(s.name == "storm" and s.connections > SOURCE_LIMIT
                                           and host == "127.0.0.1"))
    sampler = ProcSampler(broker_pid)
    # the storm's figure is RSS per connection: the baseline waits for a broker still starting up
    rss_before = None if not broker_pid else steady_rss(broker_pid) if s.name == "storm" else rss_bytes(broker_pid)
    cpu0 = time.process_time()
    procs = [ctx.Process(target=worker.main, args=(i, share, cfg, control), daemon=True)
             for i, share in enumerate(shares)]
    total = sum(c.count for c in plan.clients if c.role == "pub") or len(plan.clients)
    bar = ProgressBar(f"{s.label}@{broker}", total, enabled=progress)
    results: dict[int, dict] = {}
    try:
        if s.name == "storm":  # the storm's cost is in the connects
            sampler.begin()
        for p in procs:
            p.start()
        infos = _wait_ready(control, len(procs), deadline_ns, rec)
        if infos is not None:
            if s.name == "storm":
                _storm_figures(rec, infos, rss_before, broker_pid, s.connections)
            if s.name != "storm":
                sampler.begin()
            control.t0.value = time.monotonic_ns()
            control.start.set()
            _collect(control, procs, results, deadline_ns, sampler, bar, s, total)
    finally:
        bar.close()
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(timeout=5)
    rec.update(sampler.end())
    rec["workers"] = len(procs)
    rec["wall_s"] = (time.monotonic_ns() - t_start) / 1e9
    if infos is None:
        return rec
    _account(rec, s, plan, results, control.t0.value)
    rec["generator_cpu_s"] = (time.process_time() - cpu0
                              + sum(r["cpu_s"] for r in results.values()))
    missing = len(procs) - len(results)
    rec["timed_out"] = bool(missing) or any(r["timed_out"] for r in results.values())
    rec["ok"] = not rec["timed_out"]
    if rec["timed_out"]:
        rec["error"] = f"hit the {s.timeout:g}s deadline" + (
            f" ({missing} worker(s) never reported)" if missing else "")
    return rec


def _wait_ready(control, n: int, deadline_ns: int, rec: dict) -> list | None:
    infos = []
    while len(infos) < n:
        left = (deadline_ns - time.monotonic_ns()) / 1e9
        try:
            msg = control.queue.get(timeout=max(0.01, min(left, 0.5)))
        except queue_mod.Empty:
            if left <= 0:
                rec["error"] = "clients did not connect before the deadline"
                rec["timed_out"] = True
                return None
            continue
        if msg[0] == "error":
            rec["error"] = f"client setup failed: {msg[2]}"
            return None
        if msg[0] == "ready":
            infos.append(msg[2])
    return infos


def _storm_figures(rec, infos, rss_before, pid, connections) -> None:
    start = min(i["connect_start_ns"] for i in infos)
    end = max(i["connect_end_ns"] for i in infos)
    rec["connections"] = sum(i["connections"] for i in infos)
    rec["connects_per_s"] = rec["connections"] / max(1e-9, (end - start) / 1e9)
    if pid and rss_before is not None:
        after = rss_bytes(pid)
        if after is not None:
            rec["rss_per_1000_mib"] = ((after - rss_before) / (1024 * 1024)
                                       / max(1, connections) * 1000)


def _collect(control, procs, results, deadline_ns, sampler, bar, s, total) -> None:
    published = set()
    hard_end = deadline_ns + int(2e9)
    while len(results) < len(procs) and time.monotonic_ns() < hard_end:
        try:
            msg = control.queue.get(timeout=0.1)
        except queue_mod.Empty:
            msg = None
        if msg and msg[0] == "published":
            published.add(msg[1])
            if len(published) == len(procs):
                control.pubs_done.set()
        elif msg and msg[0] == "result":
            results[msg[1]] = msg[2]
        sampler.sample()
        counters = control.counters
        sent = sum(counters[i] for i in range(0, len(counters), 2))
        got = sum(counters[i] for i in range(1, len(counters), 2))
        bar.update(sent if s.name != "storm" else total, f"recv {got}")
        if not msg and all(not p.is_alive() for p in procs) and control.queue.empty():
            break


def _account(rec, s, plan, results, t0_ns) -> None:
    sent: dict[int, int] = {}
    logs, pub_series, sub_series, latencies = [], [], [], []
    for r in results.values():
        sent.update(r["sent"])
        for counts in r["pub_buckets"]:
            pub_series = accounting.add_series(pub_series, counts)
        for counts in r["sub_buckets"]:
            sub_series = accounting.add_series(sub_series, counts)
        for group, arrivals, lat, foreign in r["logs"]:
            log = accounting.SubscriberLog(group, {k: list(v) for k, v in arrivals.items()},
                                           list(lat), foreign)
            logs.append(log)
            latencies.extend(lat)
    for c in plan.clients:  # a publisher whose worker never reported sent nothing we know of
        if c.role == "pub":
            sent.setdefault(c.publisher, 0)
    rows = accounting.tally(sent, logs, plan.expected_groups)
    rec["per_publisher"] = [vars(r) for r in rows]
    for key in ("delivered", "distinct", "lost", "duplicated", "out_of_order"):
        rec[key] = sum(getattr(r, key) for r in rows)
    rec["sent"] = sum(sent.values())
    rec["expected"] = sum(sent[p] * len(g) for p, g in plan.expected_groups.items()
                          if p in sent)
    rec["foreign"] = sum(log.foreign for log in logs)
    # rates from the common start to the last send / the last arrival
    pub_last = max((r["pub_last_ns"] for r in results.values()), default=0)
    sub_last = max((r["sub_last_ns"] for r in results.values()), default=0)
    pub_s = (pub_last - t0_ns) / 1e9 if pub_last > t0_ns else 0.0
    sub_s = (sub_last - t0_ns) / 1e9 if sub_last > t0_ns else 0.0
    rec["run_s"] = max(pub_s, sub_s)
    rec["publish_rate"] = rec["sent"] / pub_s if pub_s and rec["sent"] else None
    rec["delivered_rate"] = rec["delivered"] / sub_s if sub_s and rec["delivered"] else None
    rec["latency_ms"] = accounting.latency_summary(latencies)
    rec["series"] = {"bucket_s": s.bucket, "published": pub_series,
                     "delivered": sub_series}
    if s.name != "storm":
        rec["connections"] = len(plan.clients)
