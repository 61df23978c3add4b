"""Idle connections across gateway nodes: ``python -m loadtest.bench_idle_nodes [--connections 100000]``.

Why it exists: issue 13 asks for a 100,000-idle-connection run on this
machine. One process here may open at most 20,000 files (the hard limit,
which nothing in this container may raise: no CAP_SYS_RESOURCE), so no
single broker, Mosquitto included, can hold 100,000 connections. A cluster
can: this starts one broker (``mqgate serve`` with its MQTT edge off,
ASYNC_FLUSH, in a temp dir) and ``--nodes`` ``mqgate gateway`` nodes in
front of it (default: enough that each holds at most 17,000), then opens
``--connections`` raw MQTT 3.1.1 connections (clean session, keepalive 0,
as the S5 storm does) from ``--procs`` client processes, spread evenly over
the nodes and over source addresses 127.0.0.2-65 (so that loopback's
ephemeral ports are not the limit).

Prints one JSON object: connections opened and refused, connects/s over the
whole storm, and per node and in total the RSS before the storm and once
every connection is open (``steady_rss``), with MiB per 1000 connections
(the growth over the connections held, the S5 measure). The broker's RSS is
reported apart: idle clean sessions cost it nothing per connection.

Uses no project code: it starts ``python -m gateway`` processes and speaks
raw MQTT through loadtest's own codec.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import socket
import sys
import tempfile
import time
import zlib

from . import codec, procstat, rawclient
from .bench_nodes import _stop, start_broker, start_nodes

PER_NODE = 17_000   # connections a node holds at most by default: its 20,000 files less its own
PER_PROC = 15_000   # connections a client process opens at most (same limit, on our side)
BATCH = 64          # CONNECTs sent before their CONNACKs are read


def _open(port: int, client_id: str) -> socket.socket:
    source = (f"127.0.0.{2 + zlib.crc32(client_id.encode()) % 64}", 0)
    sock = socket.create_connection(("127.0.0.1", port), timeout=60, source_address=source)
    sock.sendall(codec.connect(client_id, keepalive=0))
    return sock


def _client_proc(work: list[tuple[int, str]], conn) -> None:
    """Open every (port, client id) of ``work``, report, hold them until told to stop."""
    held, refused, error = [], 0, ""
    t0 = time.monotonic()
    try:
        for start in range(0, len(work), BATCH):
            socks = [_open(port, cid) for port, cid in work[start:start + BATCH]]
            for sock in socks:
                _k, body, _rest = rawclient.expect(sock, codec.PacketReader(), codec.CONNACK)
                if codec.connack_code(body):
                    refused += 1
                    sock.close()
                else:
                    held.append(sock)
    except (OSError, rawclient.ConnectError) as e:
        error = f"{type(e).__name__}: {e}"
    conn.send({"opened": len(held), "refused": refused, "error": error,
               "start": t0, "end": time.monotonic()})
    conn.recv()  # the parent has measured
    for sock in held:
        sock.close()


def _node_rss(pids: list[int]) -> list[int]:
    return [procstat.steady_rss(pid, quiet=1.0, limit=20.0) or 0 for pid in pids]


def run(connections: int, nodes: int, procs: int, tmp: str) -> dict:
    broker, ports = start_broker(tmp)
    gateways = []
    try:
        namesrv = f"127.0.0.1:{ports['namesrv']}"
        node_ports = start_nodes(nodes, namesrv, tmp, "node", gateways)
        pids = [g.pid for g in gateways]
        before = _node_rss(pids)
        broker_before = procstat.steady_rss(broker.pid) or 0
        work = [(node_ports[k % nodes], f"idle-{k}") for k in range(connections)]
        ctx = multiprocessing.get_context("fork")
        pipes, children = [], []
        for j in range(procs):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_client_proc, args=(work[j::procs], child), daemon=True)
            proc.start()
            pipes.append(parent)
            children.append(proc)
        reports = [p.recv() for p in pipes]  # each child's storm is over
        after = _node_rss(pids)
        broker_after = procstat.steady_rss(broker.pid) or 0
        for p in pipes:
            p.send("stop")
        for proc in children:
            proc.join(60)
        opened = sum(r["opened"] for r in reports)
        seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
        mib = 1 << 20
        return {
            "connections": connections, "opened": opened, "refused": sum(r["refused"] for r in reports),
            "errors": [r["error"] for r in reports if r["error"]],
            "nodes": nodes, "client_procs": procs,
            "connects_per_s": round(opened / seconds) if seconds > 0 else None,
            "storm_s": round(seconds, 1),
            "node_rss_before_mib": [round(b / mib, 1) for b in before],
            "node_rss_after_mib": [round(a / mib, 1) for a in after],
            "nodes_rss_total_mib": round(sum(after) / mib, 1),
            "rss_per_1000_mib": round((sum(after) - sum(before)) / mib / (opened / 1000), 2) if opened else None,
            "broker_rss_before_mib": round(broker_before / mib, 1),
            "broker_rss_after_mib": round(broker_after / mib, 1),
            "loadavg_1m": os.getloadavg()[0],
        }
    finally:
        _stop(gateways)
        _stop([broker])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_idle_nodes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=0, help=f"gateway nodes (default: one per {PER_NODE:,} connections)")
    ap.add_argument("--procs", type=int, default=0, help=f"client processes (default: one per {PER_PROC:,})")
    a = ap.parse_args(argv)
    nodes = a.nodes or max(1, math.ceil(a.connections / PER_NODE))
    procs = a.procs or max(1, math.ceil(a.connections / PER_PROC))
    with tempfile.TemporaryDirectory(prefix="bench-idle-nodes-") as tmp:
        print(json.dumps(run(a.connections, nodes, procs, tmp)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
