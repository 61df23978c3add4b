"""Where the slow messages of a latency run went, from evidence that does not
depend on how loaded the machine is.

    python -m loadtest.bench_stalls [--qos 0] [--count 5000] [--rate 1000]
                                    [--slow-ms 0.5] [--stall-ms 0.2] [--keep DIR]
                                    [--config FILE]

Starts ``mqgate serve`` (this tree, a fresh data directory, free ports) in a
process of its own that records, from the moment it is ready
(`gateway.serve.settle_gc`): every trio task step that used more than
``--stall-ms`` of CPU (its task), every step the kernel switched out
voluntarily (it waited for the GIL or a lock: ``ru_nvcsw`` of the thread),
every garbage collection (generation, CPU time), every flush the
commit-log flusher ran in its thread (`CommitLogFlusher._run_flush`), and
every scheduler batch and task step (``ticks_per_message`` and
``steps_per_message``: the messages sent one at a time, each costs about
this many trio ticks and steps, periodic work included). One
raw-socket publisher then sends ``--count`` messages at ``--rate`` (after a
warm-up that is not counted) to one subscriber on the same topic, each
carrying its number and send time (``time.monotonic_ns``, the server's clock
too).

Each message slower than ``--slow-ms`` is put down to what the server did
while it was under way: ``gc``, ``flush`` (the flusher's thread ran: its
GIL hand-overs can hold up the event loop), ``blocked``, ``busy:<task>``, or
``none`` (no step of the server stood out: the time went to scheduling, the
network or the client). CPU times and counts do not depend on the load;
wall-clock latencies do, so compare runs made one after the other.

Prints one JSON object: the latency summary, the slow messages per cause,
the collections, the flushes (wall and thread CPU) and the busy steps per
task. (The "server" side of this module runs inside the server process:
``python -m loadtest.bench_stalls --serve OUT -- <mqgate serve arguments>``.)
"""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import resource
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from . import brokers, codec

_TOPIC = "stalls/t"
_STAMP = struct.Struct(">Iq")  # message number, send time (ns)


# ---- the server side: runs inside ``mqgate serve`` ---------------------------------

def _serve(out: str, argv: list[str], stall_s: float) -> int:
    import trio

    import core.broker.flush as flush_mod
    import gateway.serve as serve_mod
    from gateway.__main__ import main

    now, cpu, usage, THREAD = time.monotonic, time.thread_time, resource.getrusage, resource.RUSAGE_THREAD
    rec = {"settled_at": None, "busy": [], "blocked": [], "gcs": [], "flushes": [], "ticks": [], "steps": []}
    gc_start = [0.0, 0.0]

    def on_gc(phase, info):
        if phase == "start":
            gc_start[:] = [now(), cpu()]
        elif rec["settled_at"] is not None:
            rec["gcs"].append((gc_start[0], now() - gc_start[0], info["generation"], cpu() - gc_start[1],
                               threading.current_thread() is threading.main_thread()))

    class Steps(trio.abc.Instrument):
        def before_task_step(self, task):
            self.switches = usage(THREAD).ru_nvcsw
            self.t0, self.c0 = now(), cpu()

        def after_task_step(self, task):
            used = cpu() - self.c0
            if rec["settled_at"] is None:
                return
            wall = now() - self.t0
            rec["steps"].append((self.t0, 0.0))
            if used > stall_s:
                rec["busy"].append((self.t0, wall, task.name, used))
            if usage(THREAD).ru_nvcsw != self.switches:
                rec["blocked"].append((self.t0, wall, task.name, used))

        def before_io_wait(self, timeout):
            if rec["settled_at"] is not None:
                rec["ticks"].append((now(), 0.0))  # one scheduler batch (an epoll_wait) begins

    run, settle, run_flush = trio.run, serve_mod.settle_gc, flush_mod.CommitLogFlusher._run_flush

    def instrumented_run(*args, **kw):
        kw["instruments"] = [*kw.get("instruments", ()), Steps()]
        return run(*args, **kw)

    def settle_and_mark():
        settle()
        rec["settled_at"] = now()

    async def timed_flush(self, fn):
        used = [0.0]

        def in_thread():
            c0 = cpu()
            try:
                return fn()
            finally:
                used[0] = cpu() - c0

        t0 = now()
        full = fn is self._flush
        if full:  # _run_flush tells a full flush from a waiters' one by identity
            self._flush = in_thread
        try:
            await run_flush(self, in_thread)
        finally:
            if full:
                self._flush = fn
            if rec["settled_at"] is not None:
                rec["flushes"].append((t0, now() - t0, "full" if full else "log", used[0]))

    def dump():
        Path(out).write_text(json.dumps(rec))

    trio.run, serve_mod.settle_gc = instrumented_run, settle_and_mark
    flush_mod.CommitLogFlusher._run_flush = timed_flush
    gc.callbacks.append(on_gc)
    atexit.register(dump)
    return main(argv)


# ---- the load: one publisher, one subscriber ------------------------------------------

def _connect(port: int, client_id: str) -> tuple[socket.socket, codec.PacketReader]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(codec.connect(client_id))
    return sock, _await_packet(sock, codec.PacketReader())


def _await_packet(sock: socket.socket, reader: codec.PacketReader) -> codec.PacketReader:
    while True:
        data = sock.recv(4096)
        if not data:
            raise RuntimeError("the server closed the connection during set-up")
        if reader.feed(data):
            return reader


def drive(port: int, qos: int, count: int, warmup: int, rate: float) -> tuple[list[int], list[int]]:
    """Send times and arrival times (ns) of the counted messages (0: never arrived)."""
    sub, sub_reader = _connect(port, "stalls-sub")
    sub.sendall(codec.subscribe(1, [(_TOPIC, qos)]))
    _await_packet(sub, sub_reader)
    pub, pub_reader = _connect(port, "stalls-pub")
    for s in (sub, pub):
        s.settimeout(None)
    sent, arrived = [0] * count, [0] * count
    total = warmup + count
    sel = selectors.DefaultSelector()
    sel.register(sub, selectors.EVENT_READ, sub)
    sel.register(pub, selectors.EVENT_READ, pub)
    start = time.monotonic_ns()
    deadline = start + int((total / rate + 30) * 1e9)
    i = got = 0
    while got < total and time.monotonic_ns() < deadline:
        now = time.monotonic_ns()
        while i < total and now >= start + int(i * 1e9 / rate):
            body = _STAMP.pack(i, now) + b"x" * 12
            pub.sendall(codec.publish(_TOPIC, body, qos=qos, packet_id=i % 65535 + 1))
            i += 1
            now = time.monotonic_ns()
        wait = (start + int(i * 1e9 / rate) - now) / 1e9 if i < total else 0.05
        for key, _ in sel.select(max(0.0, wait)):
            data = key.data.recv(1 << 16)
            at = time.monotonic_ns()
            if key.data is pub:
                pub_reader.feed(data)  # PUBACKs: nothing to do
                continue
            for kind, flags, body in sub_reader.feed(data):
                if kind != codec.PUBLISH:
                    continue
                _topic, q, packet_id, payload = codec.parse_publish(flags, body)
                n, t = _STAMP.unpack_from(payload)
                if n >= warmup:
                    sent[n - warmup], arrived[n - warmup] = t, at
                got += 1
                if q == 1:
                    sub.sendall(codec.puback(packet_id))
    for s in (pub, sub):
        s.sendall(codec.DISCONNECT_PACKET)
        s.close()
    return sent, arrived


# ---- putting the slow messages down to causes ---------------------------------------------

def _overlapping(events, a: float, b: float) -> list:
    return [e for e in events if e[0] < b and e[0] + e[1] > a]


def _causes(rec: dict, sent: list[int], arrived: list[int], slow_s: float) -> Counter:
    flushes = [(t, d) for t, d, *_ in rec["flushes"]]
    causes = Counter()
    for s, r in zip(sent, arrived):
        if not r or (r - s) / 1e9 <= slow_s:
            continue
        a, b = s / 1e9, r / 1e9
        names = []
        if _overlapping(rec["gcs"], a, b):
            names.append("gc")
        if _overlapping(flushes, a, b):
            names.append("flush")
        if _overlapping(rec["blocked"], a, b):
            names.append("blocked")
        names += sorted({"busy:" + e[2].rsplit(".", 1)[-1] for e in _overlapping(rec["busy"], a, b)})
        causes[" ".join(names) or "none"] += 1
    return causes


def _percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))]


def summarize(rec: dict, sent: list[int], arrived: list[int], slow_ms: float) -> dict:
    """The figures of one run; only what the server recorded while the
    counted messages were under way (not its shutdown)."""
    lat = sorted((r - s) / 1e6 for s, r in zip(sent, arrived) if r)
    if lat:
        a, b = min(s for s in sent if s) / 1e9, max(arrived) / 1e9
        rec = {k: _overlapping(v, a, b) if isinstance(v, list) else v for k, v in rec.items()}
    gcs = rec["gcs"]
    return {
        "received": len(lat), "expected": len(sent),
        "latency_ms": {"p50": _percentile(lat, 0.5), "p99": _percentile(lat, 0.99),
                       "p999": _percentile(lat, 0.999), "max": lat[-1]} if lat else None,
        "slow_ms": slow_ms, "slow": sum(1 for x in lat if x > slow_ms),
        "slow_by_cause": dict(_causes(rec, sent, arrived, slow_ms / 1e3).most_common()),
        "collections": {f"gen{g}": sum(1 for e in gcs if e[2] == g) for g in (0, 1, 2)},
        "collection_cpu_ms_max": max((e[3] * 1e3 for e in gcs), default=0.0),
        "flushes": len(rec["flushes"]),
        "flush_wall_ms_mean": sum(e[1] for e in rec["flushes"]) / max(1, len(rec["flushes"])) * 1e3,
        "flush_thread_cpu_ms_mean": sum(e[3] for e in rec["flushes"]) / max(1, len(rec["flushes"])) * 1e3,
        "busy_steps": dict(Counter(e[2].rsplit(".", 1)[-1] for e in rec["busy"]).most_common()),
        "blocked_steps": len(rec["blocked"]),
        # scheduler batches and task steps while the counted messages ran, per message
        "ticks_per_message": len(rec.get("ticks", ())) / max(1, len(lat)),
        "steps_per_message": len(rec.get("steps", ())) / max(1, len(lat)),
        "blocked_steps_during_a_flush": sum(1 for e in rec["blocked"]
                                            if _overlapping([(t, d) for t, d, *_ in rec["flushes"]], e[0], e[0] + e[1])),
    }


def run(qos: int, count: int, warmup: int, rate: float, slow_ms: float, stall_ms: float, keep: Path | None,
        config: Path | None = None) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-stalls-", dir=keep))
    port = brokers.free_port()
    record = tmp / "server.json"
    cmd = [sys.executable, "-m", "loadtest.bench_stalls", "--serve", str(record), "--stall-ms", str(stall_ms), "--",
           "serve", "--data-dir", str(tmp / "data"), "--mqtt-port", str(port), "--ws-port", "0",
           "--namesrv-port", "0", "--broker-port", "0", "--grpc-port", str(brokers.free_port()),
           "--http-port", str(brokers.free_port())]
    if config is not None:
        cmd += ["--config", str(config.resolve())]
    with open(tmp / "server.log", "w") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: "ready" in (tmp / "server.log").read_text(), 60)
        sent, arrived = drive(port, qos, count, warmup, rate)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    result = {"qos": qos, "rate": rate, **summarize(json.loads(record.read_text()), sent, arrived, slow_ms)}
    if keep is None:
        _remove(tmp)
    return result


def _wait_for(ready, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > end:
            raise RuntimeError("the server did not say it was ready")
        time.sleep(0.05)  # polling the server's log: it has no other way to say so


def _remove(path: Path) -> None:
    for p in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    path.rmdir()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_stalls")
    p.add_argument("--qos", type=int, default=0, choices=(0, 1))
    p.add_argument("--count", type=int, default=5000)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--slow-ms", type=float, default=0.5)
    p.add_argument("--stall-ms", type=float, default=0.2)
    p.add_argument("--keep", type=Path, default=None, help="keep the server's data, log and record under DIR")
    p.add_argument("--config", type=Path, default=None, help="a TOML file for the server (mqgate serve --config)")
    p.add_argument("--serve", metavar="OUT", default=None, help=argparse.SUPPRESS)
    args, rest = p.parse_known_args(argv)
    if args.serve is not None:
        return _serve(args.serve, rest[1:] if rest[:1] == ["--"] else rest, args.stall_ms / 1e3)
    print(json.dumps(run(args.qos, args.count, args.warmup, args.rate, args.slow_ms, args.stall_ms, args.keep, args.config)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
