"""A gateway node's start against the cluster's meta history (issue 20):
``python -m loadtest.bench_node_restart [--cycles 20000 200000] [--clients 1000]``.

Real processes: ``mqgate serve`` with its MQTT edge off (name server and
broker), one ``mqgate gateway`` node that tails the meta records (and, as
the leader, compacts them), then a second node started once the history is
written; its start (process start to its ``ready`` line) and the records
its replay read (its log line) are measured. Two modes per history size:
``history`` (``metaCompactionMinRecords`` out of reach: every record ever
written is replayed) and ``compacted`` (the defaults, 10000 and 2.0).

A cycle is what a persistent session's connect and disconnect write: two
``"sess"`` records (the gateway's own ``record``), sent in batches by a
native producer as if from a third node; the cycles go round ``--clients``
client ids, so the live state stays the same while the history grows.

Prints one JSON object: ``{"runs": [{"cycles", "mode", "records_written",
"records_read", "replay_s", "start_s", "compactions"}, ...]}``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core.client import Message, Producer
from gateway.meta import META_TOPIC, record

BATCH = 200
WAIT = 120.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(root: Path, name: str, *args: str) -> tuple[subprocess.Popen, Path, float]:
    log = root / f"{name}.log"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", *args], stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + WAIT
    while "ready:" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.01)
    return proc, log, time.perf_counter() - t0


def _session(cid: str, gone: int | None) -> dict:
    return {"v": 5, "exp": 86400, "next": 0, "off": 0, "subs": {f"dev/{cid}/cmd": [1, False, False, 0, None]},
            "flows": {"receive_maximum": 32, "next": 1, "flows": []}, "gone": gone, "node": "gwbench"}


def run(root: Path, cycles: int, clients: int, mode: str) -> dict:
    procs = []
    conf = root / "node.toml"
    conf.write_text("[mqtt]\nmetaCompactionMinRecords = 1099511627776\n" if mode == "history" else "")
    try:
        ns = _port()
        p, _log, _ = _start(root, "broker", "serve", "--data-dir", str(root / "broker"), "--mqtt-port", "0",
                            "--ws-port", "0", "--http-port", "0", "--grpc-port", "0", "--namesrv-port", str(ns),
                            "--broker-port", str(_port()))
        procs.append(p)
        node = ["gateway", "--namesrv", f"127.0.0.1:{ns}", "--ws-port", "0", "--http-port", "0", "--config", str(conf)]
        p, first, _ = _start(root, "node1", *node, "--data-dir", str(root / "n1"), "--mqtt-port", str(_port()))
        procs.append(p)
        producer = Producer(f"127.0.0.1:{ns}", "bench_node_restart").start()
        written = 0
        try:
            batch = []
            for i in range(cycles):
                cid = f"bench-{i % clients}"
                for gone in (None, 1):
                    msg, _qid = record("sess", cid, _session(cid, gone))
                    batch.append(Message(META_TOPIC, msg.body, properties=msg.properties))
                if len(batch) >= BATCH or i == cycles - 1:
                    producer.send_batch(batch)
                    written += len(batch)
                    batch = []
        finally:
            producer.shutdown()
        # the first node has applied everything (and compacted when due): its last compaction is complete
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            text = first.read_text(errors="replace")
            if text.count("compacting gateway meta") == text.count("compacted gateway meta"):
                time.sleep(1.0)  # a compaction due at the last records starts within this
                if first.read_text(errors="replace") == text:
                    break
        compactions = first.read_text(errors="replace").count("compacted gateway meta")
        p, second, start_s = _start(root, "node2", *node, "--data-dir", str(root / "n2"), "--mqtt-port", str(_port()))
        procs.append(p)
        m = re.search(r"(\d+) records read in ([\d.]+) s", second.read_text(errors="replace"))
        return {"cycles": cycles, "mode": mode, "records_written": written, "records_read": int(m.group(1)),
                "replay_s": float(m.group(2)), "start_s": round(start_s, 3), "compactions": compactions}
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGKILL)
            p.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, nargs="+", default=[20000, 200000])
    ap.add_argument("--clients", type=int, default=1000)
    args = ap.parse_args()
    runs = []
    for cycles in args.cycles:
        for mode in ("history", "compacted"):
            with tempfile.TemporaryDirectory(prefix="bench-node-restart-", dir=os.environ.get("TMPDIR")) as d:
                runs.append(run(Path(d), cycles, args.clients, mode))
            print(json.dumps(runs[-1]), file=sys.stderr)
    print(json.dumps({"runs": runs}))


if __name__ == "__main__":
    main()
