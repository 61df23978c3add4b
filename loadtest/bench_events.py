"""Event-rule benchmark: events/s through a bus with 1, 10 and 100 rules to an MQTT target, and put->target latency.

    python -m loadtest.bench_events [--rules 1,10,100] [--events 2000,1000,300] [--batch 100] [--quick]

Starts one ``mqgate serve`` process (its own data directory, free ports,
the event API on), then for each rule count N: a bus with N rules, half of
them matching every event (``max(1, N // 2)``; the others filter on a value
the events never carry), each matching rule with an MQTT target on its own
topic ``bench/<N>/<i>``; a paho-mqtt subscriber to ``bench/<N>/#`` counts
what arrives. Events are put with PutEvents (CloudEvents batches of
``--batch``), each carrying its put time (``time.time()``, same machine).

Prints one JSON object: per rule count, ``events`` put, ``deliveries``
expected and received, ``events_per_s`` (events put / seconds from the first
put to the last delivery), ``deliveries_per_s``, ``put_per_s`` (PutEvents
alone), and latency put->MQTT subscriber ``p50_ms``, ``p99_ms``, ``max_ms``
(of that burst: it includes the time an event queued behind the others);
then ``--idle-events`` events are put one at a time, each once the
previous one reached every matching target: ``idle_p50_ms``, ``idle_p99_ms``
are the latency of the path itself.

Everything shares this machine: the broker, the rules' consumer groups, the
gateway and the subscriber. Figures are for comparison within one run.
Imports ``gateway`` only to make the API user (a micro-benchmark of our own
parts, like the other ``bench_*`` files).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import paho.mqtt.client as paho

USER = ("bench", "bench-pw")
TIMEOUT = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, root: Path) -> None:
        from gateway.http.users import passwd_admin_main

        self.root = root
        data = root / "data"
        data.mkdir()
        passwd_admin_main([str(data / "http_users"), USER[0], "-b", USER[1]])
        self.ports = {"mqtt": _free_port(), "events": _free_port()}
        args = [sys.executable, "-m", "gateway", "serve", "--data-dir", str(data), "--mqtt-port",
                str(self.ports["mqtt"]), "--ws-port", "0", "--http-port", "0", "--grpc-port", "0",
                "--namesrv-port", str(_free_port()), "--broker-port", str(_free_port()),
                "--events-port", str(self.ports["events"]), "--log-level", "WARNING"]
        self.log = open(root / "serve.log", "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        self.api = f"http://127.0.0.1:{self.ports['events']}/api/v1/events"
        self.http = httpx.Client(auth=USER, timeout=30)
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.http.get(f"{self.api}/buses").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"mqgate serve did not start: {(root / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.1)

    def post(self, path: str, body) -> dict:
        r = self.http.post(f"{self.api}{path}", json=body)
        if r.status_code >= 300:
            raise SystemExit(f"POST {path}: {r.status_code} {r.text}")
        return r.json()

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Receiver:
    def __init__(self, port: int, flt: str) -> None:
        self.latencies: list[float] = []
        self.last = 0.0
        self._lock = threading.Lock()
        ready = threading.Event()
        c = self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"bench-{flt}")
        c.on_subscribe = lambda *_a: ready.set()
        c.on_message = self._on_message
        c.connect("127.0.0.1", port, keepalive=60)
        c.subscribe(flt, 0)
        c.loop_start()
        if not ready.wait(30):
            raise SystemExit("no SUBACK")

    def _on_message(self, _c, _u, msg) -> None:
        now = time.time()
        sent = json.loads(msg.payload)["t"]
        with self._lock:
            self.latencies.append(now - sent)
            self.last = now

    def count(self) -> int:
        with self._lock:
            return len(self.latencies)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def run_one(server: Server, n_rules: int, n_events: int, batch: int, idle_events: int) -> dict:
    bus = f"b{n_rules}"
    server.post("/buses", {"name": bus})
    matching = max(1, n_rules // 2)
    for i in range(n_rules):
        hit = i < matching
        server.post("/rules", {"name": f"r{i}", "bus": bus, "pattern": {"data": {"k": ["hit" if hit else "miss"]}},
                               "transform": {"form": "JSONPATH", "value": "$.data"},
                               "targets": [{"type": "mqtt", "topic": f"bench/{n_rules}/{i}", "qos": 1}]})
    receiver = Receiver(server.ports["mqtt"], f"bench/{n_rules}/#")
    expected = n_events * matching
    try:
        begin = time.time()
        for start in range(0, n_events, batch):
            events = [{"specversion": "1.0", "id": f"{bus}-{j}", "source": "bench", "type": "reading",
                       "subject": f"dev-{j % 64}", "data": {"k": "hit", "n": j, "t": time.time()}}
                      for j in range(start, min(n_events, start + batch))]
            r = server.http.post(f"{server.api}/buses/{bus}/events", content=json.dumps(events),
                                 headers={"content-type": "application/cloudevents-batch+json"})
            if r.status_code != 200:
                raise SystemExit(f"PutEvents: {r.status_code} {r.text}")
        put_s = time.time() - begin
        deadline = time.monotonic() + TIMEOUT
        while receiver.count() < expected and time.monotonic() < deadline:
            time.sleep(0.05)
        got = receiver.count()
        total_s = (receiver.last or time.time()) - begin
        lat = [x * 1000 for x in receiver.latencies]
        out = {"rules": n_rules, "matching_rules": matching, "events": n_events, "deliveries_expected": expected,
               "deliveries": got, "put_per_s": round(n_events / put_s, 1),
               "events_per_s": round(n_events / total_s, 1), "deliveries_per_s": round(got / total_s, 1),
               "p50_ms": round(_pct(lat, 50), 1), "p99_ms": round(_pct(lat, 99), 1), "max_ms": round(max(lat), 1)}
        # one event at a time, each put once the previous one reached every matching target: the
        # latency of the path itself, without the queueing of the burst above
        skip = receiver.count()
        for j in range(idle_events):
            event = {"specversion": "1.0", "id": f"{bus}-idle-{j}", "source": "bench", "type": "reading",
                     "subject": f"dev-{j % 64}", "data": {"k": "hit", "n": j, "t": time.time()}}
            server.http.post(f"{server.api}/buses/{bus}/events", content=json.dumps(event),
                             headers={"content-type": "application/cloudevents+json"})
            deadline = time.monotonic() + TIMEOUT
            while receiver.count() < skip + (j + 1) * matching and time.monotonic() < deadline:
                time.sleep(0.001)
        idle = [x * 1000 for x in receiver.latencies[skip:]]
        if idle:
            out.update({"idle_events": idle_events, "idle_p50_ms": round(_pct(idle, 50), 1),
                        "idle_p99_ms": round(_pct(idle, 99), 1)})
        return out
    finally:
        receiver.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rules", default="1,10,100")
    p.add_argument("--events", default="2000,1000,300", help="events per rule count (one value for all)")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--idle-events", type=int, default=50, help="events put one at a time for the idle latency")
    p.add_argument("--quick", action="store_true", help="1 and 10 rules, 200 events each")
    a = p.parse_args(argv)
    rules = [int(x) for x in a.rules.split(",")]
    events = [int(x) for x in a.events.split(",")]
    if a.quick:
        rules, events, a.idle_events = [1, 10], [200], 20
    if len(events) == 1:
        events *= len(rules)
    root = Path(tempfile.mkdtemp(prefix="bench-events-"))
    server = Server(root)
    try:
        results = [run_one(server, n, e, a.batch, a.idle_events) for n, e in zip(rules, events)]
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    json.dump({"benchmark": "events", "cpus": os.cpu_count(), "batch": a.batch, "results": results}, sys.stdout,
              indent=2)
    print()
    return 0 if all(r["deliveries"] == r["deliveries_expected"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
