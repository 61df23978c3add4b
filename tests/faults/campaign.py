"""The fault campaign (issue 17): ``make faults``, or ``python tests/faults/campaign.py``.

Runs each fault kind with its parameters against real `mqgate serve`
processes and real clients, and writes ``OUT/report.json`` (every figure)
and ``OUT/index.html`` (the figures and their plots, PNG files next to it).

Why under tests/ and not loadtest/: it drives the C++ client and the 5.x
gRPC client (loadtest may import paho-mqtt and matplotlib only) and reuses
tests/support/serve_process.py; it is a fault test that runs long.

Exit status 0 when every verdict holds (nothing lost, QoS 2 exactly once,
no crash, no traceback, canary never failed, no ACL leak), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import shutil
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fuzz  # noqa: E402
import hostile  # noqa: E402
import kills  # noqa: E402
import report  # noqa: E402
import soak  # noqa: E402
from campaign_server import CampaignServer  # noqa: E402

FULL = dict(rounds=20, fuzz_frames=1_000_000, slowloris=10_000, churn=1_000_000, topics=1_000_000, soak_minutes=60.0)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="campaign.py", description="mqgate fault campaign (issue 17)")
    p.add_argument("--out", type=Path, default=Path("faults-report"))
    p.add_argument("--rounds", type=int, default=FULL["rounds"], help="kill rounds")
    p.add_argument("--load-min", type=float, default=2.0, help="seconds of load before a kill, at least")
    p.add_argument("--load-max", type=float, default=8.0)
    p.add_argument("--fuzz-frames", type=int, default=FULL["fuzz_frames"])
    p.add_argument("--fuzz-targets", default=",".join(fuzz.TARGETS),
                   help="comma-separated listeners to fuzz: " + ",".join(fuzz.TARGETS))
    p.add_argument("--slowloris", type=int, default=FULL["slowloris"], help="connections that never finish CONNECT")
    p.add_argument("--max-connection-rate", type=int, default=0,
                   help="[mqtt] maxConnectionRate of the hostile run's server (0: none)")
    p.add_argument("--churn", type=int, default=FULL["churn"], help="connects and disconnects")
    p.add_argument("--topics", type=int, default=FULL["topics"], help="distinct topics subscribed and unsubscribed")
    p.add_argument("--soak-minutes", type=float, default=FULL["soak_minutes"])
    p.add_argument("--tx-settle", type=float, default=630.0,
                   help="seconds to wait after the last kill for open transactions to be checked")
    p.add_argument("--only", default="", help="comma-separated kinds: kills,fuzz,hostile,soak")
    p.add_argument("--seed", type=int, default=17)
    return p


def verdict(rep: dict) -> list[str]:
    """What failed, one line each (empty: the campaign passed)."""
    bad = []
    k = rep.get("kills")
    if k:
        if k["lost"]:
            bad.append(f"kills: {k['lost']} acknowledged messages lost")
        if k["mqtt"]["qos2"]["duplicates"]:
            bad.append(f"kills: {k['mqtt']['qos2']['duplicates']} QoS 2 duplicate deliveries")
        for kind in ("native",):
            if k[kind]["order_violations"]:
                bad.append(f"kills: {k[kind]['order_violations']} order violations ({kind})")
        for q in ("qos1", "qos2"):
            if k["mqtt"][q]["order_violations"]:
                bad.append(f"kills: {k['mqtt'][q]['order_violations']} order violations ({q})")
        if k["timers"]["duplicates_with_other_uniq_key"]:
            bad.append("kills: a timer fired twice with different UNIQ_KEYs")
        if k["transactions"]["rolled_back_after_unanswered_checks"]:
            bad.append(f"kills: {k['transactions']['rolled_back_after_unanswered_checks']} transactions the "
                       "application wanted committed are not visible (their checks found no producer)")
        if k["transactions"]["rolled_back_but_visible"]:
            bad.append("kills: a rolled-back transaction is visible")
        if k["tracebacks"]:
            bad.append(f"kills: {len(k['tracebacks'])} tracebacks in the server log")
    f = rep.get("fuzz")
    if f:
        if not f["server_alive"]:
            bad.append("fuzz: the server died")
        if f["tracebacks"]:
            bad.append(f"fuzz: {len(f['tracebacks'])} tracebacks in the server log")
        if f["canary"].get("failures"):
            bad.append(f"fuzz: the canary failed {f['canary']['failures']} times")
    h = rep.get("hostile")
    if h:
        if h["acl"]["leaks"]:
            bad.append(f"acl: {h['acl']['leaks']} leaks")
        if h["slowloris"]["canary"].get("failures"):
            bad.append("slowloris: the canary failed")
        if h["slowloris"]["closed_by_server"] < h["slowloris"]["opened"]:
            bad.append(f"slowloris: {h['slowloris']['opened'] - h['slowloris']['closed_by_server']} half-open "
                       "connections not closed by connectTimeout")
        if h["churn"]["failed"]:
            bad.append(f"churn: {h['churn']['failed']} of {h['churn']['connects']} connects got no CONNACK")
        if h["tracebacks"]:
            bad.append(f"hostile: {len(h['tracebacks'])} tracebacks in the server log")
    s = rep.get("soak")
    if s and (not s["server_alive"] or s["tracebacks"]):
        bad.append("soak: the server died or logged a traceback")
    return bad


def run(args, log=print) -> dict:
    kinds = set(args.only.split(",")) if args.only else {"kills", "fuzz", "hostile", "soak"}
    hostile.raise_nofile()  # inherited by the servers we start: slowloris needs many descriptors
    rep: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "params": vars(args).copy()}
    rep["params"]["out"] = str(args.out)
    t_all = time.monotonic()
    work = args.out / "work"  # data directories and server logs, kept for a post-mortem
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if "kills" in kinds:
        t0 = time.monotonic()
        rep["kills"] = kills.run(work, kills.KillParams(rounds=args.rounds, load_min=args.load_min,
                                                        load_max=args.load_max, seed=args.seed,
                                                    tx_settle=args.tx_settle), log=log)
        rep["kills"]["seconds"] = round(time.monotonic() - t0, 1)
    if "fuzz" in kinds:
        server = CampaignServer(work / "fuzz", http=True, ha=True)
        server.start()
        try:
            rep["fuzz"] = fuzz.run(server, args.fuzz_frames, seed=args.seed, targets=args.fuzz_targets.split(","),
                                   log=log)
        finally:
            server.stop()
    if "hostile" in kinds:
        acl = work / "acl"
        acl.write_text(hostile.ACL_FILE)
        server = CampaignServer(work / "hostile", mqtt_extra=f'connectTimeout = 5.0\naclFile = "{acl}"\n'
                                                             f'maxConnectionRate = {args.max_connection_rate}')
        server.start()
        try:
            h = {"slowloris": hostile.slowloris(server, args.slowloris, 5.0)}
            log(f"slowloris: {h['slowloris']}")
            h["churn"] = hostile.churn(server, args.churn)
            log(f"churn: {h['churn']}")
            h["topics"] = hostile.topic_flood(server, args.topics)
            log(f"topics: {h['topics']}")
            h["acl"] = hostile.acl_bypass(server)
            log(f"acl: {h['acl']}")
            h["tracebacks"] = server.tracebacks()
            h["server_alive"] = server.alive()
            rep["hostile"] = h
        finally:
            server.stop()
    if "soak" in kinds and args.soak_minutes > 0:
        server = CampaignServer(work / "soak", flush="ASYNC_FLUSH", broker_extra=soak.BROKER)
        server.start()
        try:
            rep["soak"] = soak.run(server, args.soak_minutes, log=log)
        finally:
            server.stop()
    rep["seconds"] = round(time.monotonic() - t_all, 1)
    rep["failures"] = verdict(rep)
    return rep


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    rep = run(args, log=lambda m: print(m, file=sys.stderr, flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(rep, indent=1, sort_keys=True))
    html = report.write_html(rep, args.out)
    print(json.dumps({"report": str(args.out / "report.json"), "html": str(html), "failures": rep["failures"]}))
    for line in rep["failures"]:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if rep["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
