"""Command line: ``run`` one scenario, ``bench`` the standard set, ``report``.

Rules it keeps:

- stdout carries only JSON lines (one record per scenario x broker); people
  read stderr (progress bar, summaries, ratios).
- Every record is also appended to ``<out>/results.jsonl``; ratios go to
  ``<out>/ratios.jsonl``; the HTML report and PNGs to ``<out>/``.
- SIGTERM and Ctrl-C end the run through the same ``finally`` blocks, so
  brokers and client processes we started are always killed.
- Exit status: 0 when every record is ok, 1 when some record is not,
  2 for usage errors, a non-loopback host, or our server failing to start.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from datetime import datetime
from pathlib import Path

from . import bench, brokers, report, runner, scenarios


def _scenario_args(p: argparse.ArgumentParser) -> None:
    d = scenarios.Scenario("fan-in")
    g = p.add_argument_group("scenario options")
    g.add_argument("--publishers", type=int, default=d.publishers)
    g.add_argument("--subscribers", type=int, default=None,
                   help="fan-out: subscribers (10); shared: group members (2)")
    g.add_argument("--count", type=int, default=d.count, help="messages per publisher")
    g.add_argument("--qos", type=int, default=None, choices=(0, 1, 2),
                   help="0, or 2 for the qos scenario, 1 for persistent")
    g.add_argument("--payload", type=int, default=d.payload, help="bytes (>= 20)")
    g.add_argument("--sizes", default="64,1024,16384,131072",
                   help="payload scenario: comma-separated payload sizes")
    g.add_argument("--rate", type=float, default=None,
                   help="msgs/s per publisher (latency: 1000); 0 = flat out")
    g.add_argument("--connections", type=int, default=1000, help="storm: connections")
    g.add_argument("--protocol", type=int, default=d.protocol, choices=(4, 5))
    g.add_argument("--mode", default=d.mode, choices=("raw", "paho"))
    g.add_argument("--inflight", type=int, default=d.inflight)
    g.add_argument("--workers", type=int, default=0, help="client processes (0: auto)")
    g.add_argument("--timeout", type=float, default=d.timeout, help="hard bound, seconds")
    g.add_argument("--drain", type=float, default=d.drain)


def _build(args) -> list[scenarios.Scenario]:
    name = args.scenario
    kw = dict(publishers=args.publishers, count=args.count, payload=args.payload,
              protocol=args.protocol, mode=args.mode, inflight=args.inflight,
              workers=args.workers, timeout=args.timeout, drain=args.drain)
    kw["qos"] = args.qos if args.qos is not None else {"qos": 2, "persistent": 1}.get(name, 0)
    kw["subscribers"] = args.subscribers or {"fan-out": 10, "shared": 2}.get(name, 1)
    kw["rate"] = args.rate if args.rate is not None else (1000.0 if name == "latency" else 0.0)
    if name in ("qos", "payload", "latency", "persistent"):
        kw["publishers"] = 1 if args.publishers == 4 else args.publishers
    if name == "storm":
        kw.update(connections=args.connections, count=0)
    if name == "payload":
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
        return [scenarios.Scenario(name, label=f"payload-{n}", **{**kw, "payload": n})
                for n in sizes]
    return [scenarios.Scenario(name, **kw)]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loadtest",
                                description="MQTT load generator (loopback only)")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run one scenario")
    r.add_argument("scenario", choices=scenarios.NAMES)
    r.add_argument("--host", default="127.0.0.1")
    r.add_argument("--port", type=int, default=None,
                   help="broker under test (omit to run only --compare brokers)")
    r.add_argument("--name", default="ours", help="name of the broker at --host/--port")
    r.add_argument("--broker-pid", type=int, default=None,
                   help="pid of that broker, for its CPU and RSS")
    r.add_argument("--compare", default="",
                   help="comma-separated brokers to start and run too: mosquitto,rabbitmq,amqtt")
    r.add_argument("--out", type=Path, default=None)
    r.add_argument("--no-progress", action="store_true")
    _scenario_args(r)
    b = sub.add_parser("bench", help="standard set S1..S5, L0, L1")
    b.add_argument("--targets", default="ours,mosquitto,rabbitmq,amqtt",
                   help="comma-separated, first is the reference of the ratios")
    b.add_argument("--only", default="", help="comma-separated ids, e.g. S1,S2")
    b.add_argument("--scale", type=float, default=1.0, help="multiply message counts")
    b.add_argument("--out", type=Path, default=None)
    b.add_argument("--no-progress", action="store_true")
    rep = sub.add_parser("report", help="rebuild report.html and table.md from DIR/results.jsonl")
    rep.add_argument("dir", type=Path)
    rep.add_argument("--reference", default=None)
    return p


def _out_dir(arg: Path | None) -> Path:
    if arg is not None:
        return arg
    return Path("loadtest-results") / datetime.now().strftime("%Y%m%d-%H%M%S")


def _on_sigterm(_signum, _frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    # a shell starting us in the background ignores SIGINT; Ctrl-C must still stop us
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "bench":
            return _bench(args)
        records = report.read_jsonl(args.dir / "results.jsonl")
        if records:
            reference = args.reference or records[0]["broker"]
            (args.dir / "table.md").write_text(report.markdown_table(records, reference))
        print(report.write_html(records, args.dir, reference=args.reference))
        return 0
    except runner.NotLoopback as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (bench.BenchError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: clients and brokers stopped", file=sys.stderr)
        return 130


def _emit(rec: dict, out: Path) -> None:
    report.write_jsonl([rec], out / "results.jsonl")
    print(json.dumps(rec, sort_keys=True), flush=True)
    print(report.format_record(rec), file=sys.stderr)


def _run(args) -> int:
    compare = [c for c in args.compare.split(",") if c]
    for c in compare:
        if c not in brokers.KNOWN:
            raise ValueError(f"--compare knows {', '.join(brokers.KNOWN)}; not {c!r}")
    if args.port is None and not compare:
        raise ValueError("give --port (the broker under test) and/or --compare")
    runner.require_loopback(args.host)
    out = _out_dir(args.out)
    progress = False if args.no_progress else None
    records = []
    for s in _build(args):
        if args.port is not None:
            rec = runner.run(s, args.host, args.port, broker=args.name,
                             broker_pid=args.broker_pid, progress=progress)
            records.append(rec)
            _emit(rec, out)
        for name in compare:
            if name == "amqtt" and s.protocol == 5:
                rec = runner.empty_record(s, name, "127.0.0.1", 0)
                rec["error"] = "amqtt speaks MQTT 3.1.1 only"
            else:
                try:
                    with brokers.Broker(name) as b:
                        rec = runner.run(dataclasses.replace(s), b.host, b.port,
                                         broker=name, broker_pid=b.pid, progress=progress)
                except brokers.BrokerStartError as exc:
                    rec = runner.empty_record(s, name, "127.0.0.1", 0)
                    rec["error"] = f"broker did not start: {exc}"
            records.append(rec)
            _emit(rec, out)
    reference = args.name if args.port is not None else (compare[0] if compare else None)
    rows = report.ratios(records, reference) if reference else []
    if rows:
        report.write_jsonl(rows, out / "ratios.jsonl")
        print(report.format_ratios(rows), file=sys.stderr)
    path = report.write_html(records, out, reference=reference)
    print(f"report: {path}", file=sys.stderr)
    return 0 if all(r["ok"] for r in records) else 1


def _bench(args) -> int:
    targets = [t for t in args.targets.split(",") if t]
    only = [x for x in args.only.split(",") if x] or None
    out = _out_dir(args.out)
    records = bench.run(targets, out, scale=args.scale, only=only,
                        progress=False if args.no_progress else None)
    for rec in records:
        print(json.dumps(rec, sort_keys=True))
    return 0 if all(r["ok"] for r in records) else 1
