"""MQTT gateway nodes benchmark: ``python -m loadtest.bench_nodes [--nodes 1,2,3] [--groups 1] [--count N]``.

Prints one JSON object per node count: delivered messages per second and
the p50/p99 publish-to-delivery latency, with the same load spread over 1,
2 or 3 ``mqgate gateway`` nodes in front of one broker (``mqgate serve``
with its MQTT edge off, ASYNC_FLUSH, started in a temp dir for the run),
or ``--groups N`` broker groups (the others ``mqgate broker`` processes,
``broker-b``...: the nodes spread the publishers' topics over them).

The load: ``--publishers`` paho clients (QoS 1, each waits for the PUBACK of
one message before the next: latency-bound, as devices are) and
``--subscribers`` clean-session paho clients on ``bench/#`` at QoS 1, both
spread round robin over the nodes, so most deliveries cross nodes. Each
publisher sends ``--count`` messages whose payload is its send time; a
message counts as delivered once per subscriber. Each client runs in a
thread of this process (the GIL of this one process is a limit of the
load generator: ``node_cpu_s`` and ``broker_cpu_s`` in the output are the
CPU seconds the nodes and the broker used during the measurement, and
``loadavg_1m`` tells how busy the machine was).

Uses no project code: it starts ``python -m gateway`` processes and speaks
MQTT with paho-mqtt.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

READY = re.compile(r"ready: (.*)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], log_path: str, timeout: float = 60.0) -> tuple[subprocess.Popen, dict]:
    log = open(log_path, "ab")
    proc = subprocess.Popen([sys.executable, "-m", "gateway", *args], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log_path, "rb") as f:
            m = READY.findall(f.read().decode(errors="replace"))
        if m:
            return proc, {k: int(v) for k, v in (kv.split("=") for kv in m[-1].split())}
        if proc.poll() is not None:
            raise RuntimeError(f"{args[0]} exited with {proc.returncode}; see {log_path}")
        time.sleep(0.05)
    proc.kill()
    raise TimeoutError(f"{args[0]} not ready in {timeout} s; see {log_path}")


def start_broker(tmp: str) -> tuple[subprocess.Popen, dict]:
    """``mqgate serve`` as the cluster's name server and broker, its MQTT edge off."""
    return _start(["serve", "--data-dir", os.path.join(tmp, "data"), "--mqtt-port", "0", "--ws-port", "0",
                   "--http-port", "0", "--grpc-port", "0", "--flush", "async",
                   "--namesrv-port", str(_free_port()), "--broker-port", str(_free_port())],
                  os.path.join(tmp, "broker.log"))


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def _client(port: int, cid: str) -> paho.Client:
    c = paho.Client(CallbackAPIVersion.VERSION2, client_id=cid, protocol=paho.MQTTv311)
    c.max_inflight_messages_set(1)
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def start_nodes(count: int, namesrv: str, tmp: str, prefix: str, procs: list[subprocess.Popen]) -> list[int]:
    """Start ``count`` ``mqgate gateway`` nodes (appended to ``procs`` as they
    start, so the caller stops them even if a later one fails); their MQTT ports."""
    ports = []
    for i in range(count):
        p, pt = _start(["gateway", "--namesrv", namesrv, "--mqtt-port", str(_free_port()), "--ws-port", "0"],
                       os.path.join(tmp, f"{prefix}{i}.log"))
        procs.append(p)
        ports.append(pt["mqtt-tcp"])
    return ports


def run_once(nodes: int, publishers: int, subscribers: int, count: int, tmp: str, namesrv: str,
             broker_pids: list[int]) -> dict:
    procs = []
    try:
        ports = start_nodes(nodes, namesrv, tmp, f"node{nodes}-", procs)
        latencies: list[float] = []
        lock = threading.Lock()
        expected = publishers * count * subscribers
        done = threading.Event()
        subs = []
        probes: set[tuple[int, str]] = set()
        for i in range(subscribers):
            c = _client(ports[i % nodes], f"bench-sub-{nodes}-{i}")

            def on_message(c, u, m, i=i):
                if m.topic.startswith("bench/probe/"):
                    with lock:
                        probes.add((i, m.topic))
                    return
                lat = time.time() - struct.unpack(">d", m.payload[:8])[0]
                with lock:
                    latencies.append(lat)
                    if len(latencies) >= expected:
                        done.set()
            c.on_message = on_message
            r = threading.Event()
            c.on_subscribe = lambda *a, r=r: r.set()
            c.subscribe("bench/#", 1)
            if not r.wait(30):
                raise TimeoutError("SUBACK")
            subs.append(c)
        # Every node routes to every subscriber before the clock starts (a
        # subscription reaches the other nodes with the meta records).
        probers = [_client(port, f"bench-probe-{nodes}-{j}") for j, port in enumerate(ports)]
        want = {(i, f"bench/probe/{j}") for i in range(subscribers) for j in range(nodes)}
        deadline = time.monotonic() + 30
        while not want <= probes:
            if time.monotonic() > deadline:
                raise TimeoutError("subscriptions did not reach every node in 30 s")
            for j, c in enumerate(probers):
                c.publish(f"bench/probe/{j}", b"", qos=0)
            time.sleep(0.1)
        for c in probers:
            c.disconnect()
            c.loop_stop()
        cpu0 = {p.pid: _cpu_seconds(p.pid) for p in procs}
        broker0 = sum(map(_cpu_seconds, broker_pids))

        def publish(i: int) -> None:
            c = _client(ports[i % nodes], f"bench-pub-{nodes}-{i}")
            for k in range(count):
                info = c.publish(f"bench/{i}/{k % 16}", struct.pack(">d", time.time()) + b"x" * 56, qos=1)
                info.wait_for_publish(30)
            c.disconnect()
            c.loop_stop()

        t0 = time.monotonic()
        threads = [threading.Thread(target=publish, args=(i,)) for i in range(publishers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.wait(60)
        elapsed = time.monotonic() - t0
        cpu = sum(_cpu_seconds(p.pid) - cpu0[p.pid] for p in procs)
        broker_cpu = sum(map(_cpu_seconds, broker_pids)) - broker0
        for c in subs:
            c.disconnect()
            c.loop_stop()
        lat = sorted(latencies)
        n = len(lat)
        return {"nodes": nodes, "groups": len(broker_pids), "publishers": publishers, "subscribers": subscribers, "sent": publishers * count,
                "delivered": n, "expected": expected, "seconds": round(elapsed, 3),
                "delivered_per_s": round(n / elapsed, 1),
                "p50_ms": round(lat[n // 2] * 1000, 2) if n else None,
                "p99_ms": round(lat[min(n - 1, int(n * 0.99))] * 1000, 2) if n else None,
                "node_cpu_s": round(cpu, 2), "broker_cpu_s": round(broker_cpu, 2),
                "loadavg_1m": os.getloadavg()[0]}
    finally:
        _stop(procs)


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each (the nodes drain), then wait, killing one that takes over 30 s."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_nodes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="1,2,3", help="node counts to measure (default 1,2,3)")
    ap.add_argument("--publishers", type=int, default=6)
    ap.add_argument("--subscribers", type=int, default=3)
    ap.add_argument("--count", type=int, default=300, help="messages per publisher (default 300)")
    ap.add_argument("--groups", type=int, default=1, help="broker groups (default 1)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-nodes-") as tmp:
        broker, ports = start_broker(tmp)
        brokers = [broker]
        try:
            namesrv = f"127.0.0.1:{ports['namesrv']}"
            for g in range(1, a.groups):
                name = f"broker-{chr(ord('a') + g)}"
                conf = os.path.join(tmp, f"{name}.toml")
                with open(conf, "w") as f:
                    f.write(f'[broker]\nbrokerName = "{name}"\n')
                brokers.append(_start(["broker", "--namesrv", namesrv, "--data-dir", os.path.join(tmp, name),
                                       "--config", conf, "--broker-port", str(_free_port()), "--grpc-port", "0",
                                       "--flush", "async"], os.path.join(tmp, f"{name}.log"))[0])
            pids = [b.pid for b in brokers]
            for n in (int(x) for x in a.nodes.split(",")):
                print(json.dumps(run_once(n, a.publishers, a.subscribers, a.count, tmp, namesrv, pids)), flush=True)
        finally:
            for b in brokers:
                b.terminate()
            for b in brokers:
                b.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
