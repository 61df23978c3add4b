"""Replication benchmark and kill campaign: ``python -m loadtest.bench_ha [--count N] [--rounds R]``.

Prints one JSON object with three parts, each run against real processes on
loopback (`python -m gateway namesrv|broker|serve`, Debian's ``etcd``):

- ``sends``: 64 concurrent senders of our trio client, N messages of 100 B
  each: msgs/s and p50/p99 latency for a SYNC_MASTER with one slave, next to
  one broker in SYNC_FLUSH without a slave, and an ASYNC_MASTER with a slave.
- ``async_lag``: while the ASYNC_MASTER run sends, the master's and the
  slave's log ends sampled every 20 ms (GET_BROKER_HA_STATUS): max and p99
  lag in bytes.
- ``failover``: R rounds of SIGKILL of the master of a two-node group
  (``serve`` nodes: broker + MQTT, SYNC_MASTER and SLAVE, etcd failover, 3 s
  lease) under steady load: the PyPI ``rocketmq`` C++ client sending
  SYNC messages and a paho-mqtt client publishing QoS 1 to whichever node
  serves MQTT. Each round: seconds from the kill until the other node is
  master and serving MQTT, until the old master (restarted at once) is back
  in sync as a slave, and until the C++ producer's next SEND_OK (a lone
  SYNC_MASTER answers SLAVE_NOT_AVAILABLE, so it resumes once the slave is
  back and it has the new route: its refresh is every 30 s). At the end every acknowledged message (C++ SEND_OK,
  MQTT PUBACK) is looked for in the final master's commit log: ``lost``
  must be 0. A persistent paho session that subscribed before round 1
  resumes on the final master and counts what it receives.

This file may import `core` (a micro-benchmark of our own parts).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio

from core.client import Message, open_producer
from core.client.api import open_client_api
from core.remoting import RequestCode
from core.store.message import decode_segment

SEGMENT = 64 * 1024 * 1024


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))  # the HA port
                return port
            except OSError:
                continue


class Proc:
    """One `python -m gateway` process; ready when it prints its ``ready:`` line."""

    def __init__(self, root: Path, label: str, role: str, *args: str):
        self.root, self.label = root, label
        self.args = [sys.executable, "-m", "gateway", role, "--data-dir", str(root / label), *args]
        self.log = root / f"{label}.log"
        self.p: subprocess.Popen | None = None

    def start(self) -> "Proc":
        start = self.log.stat().st_size if self.log.exists() else 0
        self.p = subprocess.Popen(self.args, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while "ready:" not in self.log.read_bytes()[start:].decode(errors="replace"):
            if self.p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.label} did not start: see {self.log}")
            time.sleep(0.05)
        return self

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.p is not None and self.p.poll() is None:
            self.p.send_signal(sig)
            self.p.wait(60)


def broker(root: Path, label: str, ns: str, port: int, table: dict, *, mqtt: int = 0) -> Proc:
    toml = root / f"{label}.toml"
    text = "[broker]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items())
    if mqtt:  # the persistent session keeps everything it missed (default: the newest 1000)
        text += "[mqtt]\nmaxQueuedMessages = 0\n"
    toml.write_text(text)
    args = ["--config", str(toml), "--broker-port", str(port), "--namesrv", ns]
    if mqtt:
        return Proc(root, label, "serve", *args, "--namesrv-port", "0", "--mqtt-port", str(mqtt), "--ws-port", "0")
    return Proc(root, label, "broker", *args)


async def ha_status(addr: str) -> dict | None:
    try:
        async with open_client_api(2.0) as api:
            resp = await api.call(addr, RequestCode.GET_BROKER_HA_STATUS)
        return json.loads(resp.body)
    except Exception:
        return None


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


# ---------------------------------------------------------------- sends and lag


async def _send_load(ns: str, count: int, lag_addrs: tuple[str, str] | None) -> dict:
    latencies: list[float] = []
    lags: list[int] = []
    done = trio.Event()

    async def sample():
        while not done.is_set():
            m, s = await ha_status(lag_addrs[0]), await ha_status(lag_addrs[1])
            if m and s:
                lags.append(m["maxOffset"] - s["maxOffset"])
            await trio.sleep(0.02)

    async with open_producer(ns, "PG_BENCH", send_timeout=10.0) as p:
        await p.send(Message("BenchHA", b"warm"))
        left = [count]

        async def sender():
            while left[0] > 0:
                left[0] -= 1
                t = time.perf_counter()
                r = await p.send(Message("BenchHA", b"x" * 100))
                latencies.append(time.perf_counter() - t)
                statuses[r.status.name] = statuses.get(r.status.name, 0) + 1

        statuses: dict[str, int] = {}
        async with trio.open_nursery() as n:
            if lag_addrs:
                n.start_soon(sample)
            start = time.perf_counter()
            async with trio.open_nursery() as senders:
                for _ in range(64):
                    senders.start_soon(sender)
            elapsed = time.perf_counter() - start
            done.set()
    out = {"msgs_per_s": round(count / elapsed), "p50_ms": round(pct(latencies, 0.5) * 1000, 2),
           "p99_ms": round(pct(latencies, 0.99) * 1000, 2), "statuses": statuses}
    if lag_addrs:
        out["lag_bytes_max"] = max(lags, default=0)
        out["lag_bytes_p99"] = pct(lags, 0.99) if lags else 0
        out["lag_samples"] = len(lags)
    return out


def bench_sends(root: Path, count: int) -> dict:
    results = {}
    setups = {
        "sync_master_with_slave": ({"brokerRole": "SYNC_MASTER"}, True),
        "sync_flush_no_slave": ({"brokerRole": "ASYNC_MASTER", "flushDiskType": "SYNC_FLUSH"}, False),
        "async_master_with_slave": ({"brokerRole": "ASYNC_MASTER"}, True),
    }
    for name, (table, with_slave) in setups.items():
        d = root / name
        d.mkdir()
        ns_port = free_port()
        ns = Proc(d, "ns", "namesrv", "--namesrv-port", str(ns_port)).start()
        nsaddr = f"127.0.0.1:{ns_port}"
        mp, sp = free_port(), free_port()
        base = {"brokerName": "gb", "mappedFileSizeCommitLog": SEGMENT}
        procs = [broker(d, "m", nsaddr, mp, {**base, "brokerId": 0, **table}).start()]
        if with_slave:
            procs.append(broker(d, "s", nsaddr, sp, {**base, "brokerId": 1, "brokerRole": "SLAVE"}).start())
            time.sleep(1.0)  # the slave links
        lag = (f"127.0.0.1:{mp}", f"127.0.0.1:{sp}") if name.startswith("async") else None
        try:
            results[name] = trio.run(_send_load, nsaddr, count, lag)
        finally:
            for p in reversed(procs):
                p.stop()
            ns.stop()
    return results


# ---------------------------------------------------------------- kill campaign


class Etcd:
    def __init__(self, root: Path):
        self.port, peer = free_port(), free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.p = subprocess.Popen(
            ["etcd", "--name", "b", "--data-dir", str(root / "etcd"), "--listen-client-urls", self.endpoint,
             "--advertise-client-urls", self.endpoint, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"b=http://127.0.0.1:{peer}", "--log-level", "warn"],
            stdout=open(root / "etcd.log", "ab"), stderr=subprocess.STDOUT)
        time.sleep(1.5)


class CppProducer(threading.Thread):
    """The official C++ client sending SYNC messages without pause; acked keys and their times."""

    def __init__(self, ns: str):
        super().__init__(daemon=True)
        from rocketmq.client import Producer

        self.p = Producer("PG_KILL")
        self.p.set_namesrv_addr(ns)
        self.p.set_timeout(3000)
        self.p.start()
        self.acked: list[tuple[str, float]] = []
        self.stop = threading.Event()
        self.error: object = None

    def run(self) -> None:
        from rocketmq.client import Message as CppMessage, SendStatus as CppStatus

        i = 0
        while not self.stop.is_set():
            key = f"cpp-{i}"
            i += 1
            m = CppMessage("KillHA")
            m.set_keys(key)
            m.set_body(key)
            try:
                result = self.p.send_sync(m)
                if result.status == CppStatus.OK:
                    self.acked.append((key, time.time()))
                    continue
                self.error = result.status
            except Exception as e:  # no route, broker gone: the client library raises
                self.error = e
            time.sleep(0.05)


class MqttPublisher(threading.Thread):
    """paho QoS 1 publishes to whichever node serves MQTT; PUBACKed payloads and their times."""

    def __init__(self, ports: list[int]):
        super().__init__(daemon=True)
        self.ports = ports
        self.acked: list[tuple[str, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        import paho.mqtt.client as paho

        i = 0
        while not self.stop.is_set():
            for port in self.ports:
                c = paho.Client(client_id="kill-pub", protocol=paho.MQTTv311,
                                callback_api_version=paho.CallbackAPIVersion.VERSION2)
                try:
                    c.connect("127.0.0.1", port, keepalive=10)
                except OSError:
                    continue
                c.loop_start()
                try:
                    deadline = time.monotonic() + 2
                    while not c.is_connected() and time.monotonic() < deadline:
                        time.sleep(0.01)
                    while c.is_connected() and not self.stop.is_set():
                        payload = f"mqtt-{i}"
                        i += 1
                        info = c.publish(f"killha/d{i % 7}", payload, qos=1)
                        info.wait_for_publish(3)
                        if info.is_published():
                            self.acked.append((payload, time.time()))
                finally:
                    c.loop_stop()
                    c.disconnect()
            time.sleep(0.1)


def persistent_session(port: int, want: set[str] | None = None, wait_s: float = 0) -> set[str]:
    import paho.mqtt.client as paho

    got: set[str] = set()
    c = paho.Client(client_id="kill-sub", clean_session=False, protocol=paho.MQTTv311,
                    callback_api_version=paho.CallbackAPIVersion.VERSION2)
    c.on_message = lambda _c, _u, m: got.add(m.payload.decode())
    c.connect("127.0.0.1", port)
    c.loop_start()
    if want is None:
        c.subscribe("killha/#", qos=1)
        time.sleep(0.5)
    else:  # until everything came, or nothing new for 10 s, or wait_s in all
        deadline = time.time() + wait_s
        last, last_change = -1, time.time()
        while not want <= got and time.time() < deadline and time.time() - last_change < 10:
            if len(got) != last:
                last, last_change = len(got), time.time()
            time.sleep(0.1)
    c.loop_stop()
    c.disconnect()
    return got


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.05)
    raise RuntimeError(f"not within {timeout} s: {what}")


def campaign(root: Path, rounds: int) -> dict:
    etcd = Etcd(root)
    ns_port = free_port()
    ns = Proc(root, "ns", "namesrv", "--namesrv-port", str(ns_port)).start()
    nsaddr = f"127.0.0.1:{ns_port}"
    nodes = {}
    for bid in (0, 1):
        port, mqtt = free_port(), free_port()
        table = {"brokerName": "gk", "brokerId": bid, "brokerRole": "SYNC_MASTER" if bid == 0 else "SLAVE",
                 "mappedFileSizeCommitLog": SEGMENT, "etcdEndpoints": etcd.endpoint, "haLeaseTtlMs": 3000}
        nodes[bid] = {"proc": broker(root, f"n{bid}", nsaddr, port, table, mqtt=mqtt).start(),
                      "addr": f"127.0.0.1:{port}", "mqtt": mqtt}

    def role(bid: int) -> str | None:
        st = trio.run(ha_status, nodes[bid]["addr"])
        return st["role"] if st else None

    def master() -> int | None:
        return next((b for b in nodes if (role(b) or "").endswith("MASTER")), None)

    def in_sync(bid: int) -> bool:
        st = trio.run(ha_status, nodes[bid]["addr"])
        return bool(st and any(s["inSync"] for s in st["slaves"]))

    wait_for(lambda: master() is not None, 30, "a master")
    first = master()
    wait_for(lambda: in_sync(first), 30, "the slave follows")
    persistent_session(nodes[first]["mqtt"])
    cpp, mq = CppProducer(nsaddr), MqttPublisher([nodes[0]["mqtt"], nodes[1]["mqtt"]])
    cpp.start()
    mq.start()
    out_rounds = []
    for r in range(rounds):
        time.sleep(3)  # steady load
        old = master()
        if old is None:
            raise RuntimeError("no master before a round")
        new = 1 - old
        nodes[old]["proc"].stop(signal.SIGKILL)
        killed = time.time()
        wait_for(lambda: (role(new) or "").endswith("MASTER"), 30, "a new master")
        master_s = time.time() - killed
        wait_for(lambda: _accepts(nodes[new]["mqtt"]), 30, "MQTT")
        mqtt_s = time.time() - killed
        # a lone SYNC_MASTER answers SLAVE_NOT_AVAILABLE (stored, not acknowledged), which the C++ client
        # reports as "No route info of this topic" after its retries: it resumes once the old master rejoins
        nodes[old]["proc"].start()
        wait_for(lambda: in_sync(new), 60, "the old master rejoins")
        rejoined = time.time() - killed
        cpp_resumed = wait_for(lambda: next((t for _k, t in reversed(cpp.acked) if t > killed), None), 90,
                               f"the C++ producer resumes ({len(cpp.acked)} acked before, last error {cpp.error!r})")
        text = nodes[old]["proc"].log.read_text(errors="replace")
        out_rounds.append({"round": r + 1, "new_master_s": round(master_s, 2), "mqtt_serving_s": round(mqtt_s, 2),
                           "cpp_resumed_s": round(cpp_resumed - killed, 2), "rejoined_s": round(rejoined, 2),
                           "cuts_so_far": text.count("commit log cut at offset")})
        print(json.dumps(out_rounds[-1]), file=sys.stderr)
    cpp.stop.set()
    mq.stop.set()
    cpp.join(10)
    mq.join(10)
    cpp.p.shutdown()
    final = master()
    mqtt_keys = {k for k, _t in mq.acked}
    drain_start = time.time()
    resumed = persistent_session(nodes[final]["mqtt"], mqtt_keys, 600)
    drain_s = time.time() - drain_start
    for n in nodes.values():
        n["proc"].stop()
    ns.stop()
    etcd.p.terminate()
    log_dir = root / f"n{final}" / "commitlog"
    stored = {m.body.decode(errors="replace") for f in sorted(os.listdir(log_dir))
              for m in decode_segment((log_dir / f).read_bytes())}
    cpp_keys = {k for k, _t in cpp.acked}
    return {"rounds": out_rounds, "acked_cpp": len(cpp_keys), "acked_mqtt": len(mqtt_keys),
            "lost_cpp": len(cpp_keys - stored), "lost_mqtt": len(mqtt_keys - stored),
            "session_received": len(resumed & mqtt_keys), "session_missing": len(mqtt_keys - resumed),
            "session_drain_s": round(drain_s, 1),
            "new_master_s_max": max((r["new_master_s"] for r in out_rounds), default=None),
            "new_master_s_mean": round(statistics.mean(r["new_master_s"] for r in out_rounds), 2) if out_rounds else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_ha", description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20000, help="messages per send run (default 20000)")
    ap.add_argument("--rounds", type=int, default=10, help="kill rounds (default 10; 0 = none)")
    ap.add_argument("--skip-sends", action="store_true", help="only the kill campaign")
    ap.add_argument("--keep", action="store_true", help="keep the data directories and logs (path on stderr)")
    a = ap.parse_args(argv)
    out: dict = {}
    tmp = tempfile.mkdtemp(prefix="bench-ha-")
    print(f"data and logs in {tmp}", file=sys.stderr)
    try:
        root = Path(tmp)
        if not a.skip_sends:
            (root / "sends").mkdir()
            out["sends"] = bench_sends(root / "sends", a.count)
            print(json.dumps({"sends": out["sends"]}), file=sys.stderr)
            out["async_lag"] = {k: v for k, v in out["sends"]["async_master_with_slave"].items() if k.startswith("lag")}
        if a.rounds:
            (root / "kill").mkdir()
            out["failover"] = campaign(root / "kill", a.rounds)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
