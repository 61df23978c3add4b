"""Client-id ownership benchmark: ``python -m loadtest.bench_owner [--count N] [--takeovers N]``.

Prints one JSON object per mode of ``mqgate gateway`` (docs/CLUSTER.md,
"One owner per client id"): ``meta`` (no etcd: the meta records' order
decides) and ``etcd`` (``--etcd``: the owner key decides), each with two
nodes in front of one broker (``mqgate serve`` with its MQTT edge off,
ASYNC_FLUSH) and, for ``etcd``, one etcd (Debian's ``etcd-server``), all
started in a temp dir for the run:

* ``connect_*``: ``--count`` persistent 3.1.1 CONNECTs of new client ids,
  one after the other on one node, each followed by a DISCONNECT: the
  CONNECT-to-CONNACK time (p50/p99 ms) and CONNECT+DISCONNECT cycles per
  second (with etcd each takes the owner key, and each disconnect releases it);
* ``takeover_*``: ``--takeovers`` times, a client id connected on one node
  connects on the other (the old connection stays open until the server
  closes it): the CONNECT-to-CONNACK time of the new connection, which
  includes the old node closing its connection.

Uses no project code: it starts ``python -m gateway`` processes and speaks
MQTT 3.1.1 over raw sockets (CONNECT, CONNACK and DISCONNECT only).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

from loadtest.bench_nodes import _free_port, _start, _stop, start_broker


def _connect_packet(cid: str) -> bytes:
    body = b"\x00\x04MQTT\x04\x00\x00\x3c" + len(cid).to_bytes(2, "big") + cid.encode()
    assert len(body) < 128
    return bytes([0x10, len(body)]) + body


def _connect(port: int, cid: str) -> tuple[socket.socket, float]:
    """A connection whose CONNECT was accepted, and how long the CONNACK took (s)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    t0 = time.perf_counter()
    s.sendall(_connect_packet(cid))
    ack = b""
    while len(ack) < 4:
        chunk = s.recv(4 - len(ack))
        if not chunk:
            raise RuntimeError(f"{cid}: connection closed before the CONNACK")
        ack += chunk
    took = time.perf_counter() - t0
    if ack[:2] != b"\x20\x02" or ack[3] != 0:
        raise RuntimeError(f"{cid}: CONNACK {ack.hex()}")
    return s, took


def _pcts(xs: list[float]) -> dict:
    xs = sorted(xs)
    n = len(xs)
    return {"p50_ms": round(xs[n // 2] * 1000, 2), "p99_ms": round(xs[min(n - 1, int(n * 0.99))] * 1000, 2)}


def _start_etcd(tmp: str) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("etcd")
    if binary is None:
        raise SystemExit("etcd is not installed (Debian: apt-get install etcd-server)")
    client, peer = f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"
    log = open(os.path.join(tmp, "etcd.log"), "ab")
    proc = subprocess.Popen([binary, "--name", "b", "--data-dir", os.path.join(tmp, "etcd"), "--listen-client-urls",
                             client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                             "--initial-advertise-peer-urls", peer, "--initial-cluster", f"b={peer}",
                             "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{client}/health", timeout=1) as r:
                if b'"true"' in r.read():
                    return proc, client
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise TimeoutError("etcd not ready in 30 s")


def run_mode(mode: str, count: int, takeovers: int, tmp: str, namesrv: str, etcd: str | None) -> dict:
    procs = []
    try:
        ports = []
        for i in range(2):
            extra = ["--etcd", etcd] if etcd else []
            p, pt = _start(["gateway", "--namesrv", namesrv, *extra, "--mqtt-port", str(_free_port()),
                            "--ws-port", "0"], os.path.join(tmp, f"{mode}-node{i}.log"))
            procs.append(p)
            ports.append(pt["mqtt-tcp"])
        connects = []
        t0 = time.perf_counter()
        for k in range(count):
            s, took = _connect(ports[0], f"bench-own-{mode}-{k}")
            connects.append(took)
            s.sendall(b"\xe0\x00")  # DISCONNECT
            s.recv(1)  # the server closes
            s.close()
        cycle_s = time.perf_counter() - t0
        takes = []
        old, _ = _connect(ports[0], f"bench-take-{mode}")
        for k in range(takeovers):
            new, took = _connect(ports[(k + 1) % 2], f"bench-take-{mode}")
            takes.append(took)
            old.close()
            old = new
        old.close()
        return {"mode": mode, "connects": count, "connect": _pcts(connects),
                "connect_disconnect_per_s": round(count / cycle_s, 1), "takeovers": takeovers,
                "takeover": _pcts(takes), "loadavg_1m": os.getloadavg()[0]}
    finally:
        _stop(procs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_owner", description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=300, help="CONNECT+DISCONNECT cycles per mode (default 300)")
    ap.add_argument("--takeovers", type=int, default=30, help="takeovers across the nodes per mode (default 30)")
    ap.add_argument("--modes", default="meta,etcd", help="meta, etcd or both (default meta,etcd)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-owner-") as tmp:
        broker, ports = start_broker(tmp)
        etcd_proc = None
        try:
            namesrv = f"127.0.0.1:{ports['namesrv']}"
            for mode in a.modes.split(","):
                endpoint = None
                if mode == "etcd":
                    etcd_proc, endpoint = _start_etcd(tmp)
                print(json.dumps(run_mode(mode, a.count, a.takeovers, tmp, namesrv, endpoint)), flush=True)
        finally:
            if etcd_proc is not None:
                etcd_proc.kill()
                etcd_proc.wait(10)
            broker.terminate()
            broker.wait(30)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
