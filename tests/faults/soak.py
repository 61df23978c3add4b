"""Soak: steady MQTT and native traffic for N minutes; drift of RSS, open files, p99 latency, disk.

Rules it keeps:
- The MQTT rate is half the capacity measured in the same run (a short
  flat-out QoS 1 burst, publisher to subscriber, end to end), so the figure
  means the same on any machine; `rate` overrides it.  The C++ client sends
  SYNC messages and timers at `native_rate` (50/s) meanwhile and consumes.
- Each sample (every `interval` s) records RSS (and its anonymous part, the
  heap: the rest is mapped commit-log pages), open files, disk bytes of the
  data directory and the p99 of the publish-to-delivery latency of the
  messages delivered since the previous sample.
- Drift = (mean of the last quarter of samples) / (mean of the second
  quarter) - 1, per figure: the first quarter is warm-up.
- The server keeps its log for `RETENTION_HOURS` (deleted at any hour), in
  small segments and index files (`BROKER`), so that within the hour the
  disk, the open files and the mapped pages reach the steady state a
  broker keeping 72 h reaches after 72 h: flat means retention keeps up.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt

from campaign_server import drift

HERE = Path(__file__).resolve().parent
RETENTION_HOURS = 0.1  # 6 minutes of log kept
# 32 MiB segments, 30,000-unit consume-queue files and 200,000-entry index
# files: each rolls within minutes, and the deleted steps are small beside what
# is kept, so the quarter means are not a saw-tooth's phase (6,000,000-byte
# queue files rolled every ~30 minutes: a step in open files and disk).
BROKER = f"""\
fileReservedTime = {RETENTION_HOURS}
deleteWhen = "*"
mappedFileSizeCommitLog = 33554432
mappedFileSizeConsumeQueue = 600000
maxHashSlotNum = 50000
maxIndexNum = 200000
"""


def _client(cid: str, port: int) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid)
    c.max_inflight_messages_set(100)
    c.connect("127.0.0.1", port, keepalive=30)
    c.loop_start()
    return c


def _capacity(port: int, seconds: float = 5.0) -> float:
    """Messages/s delivered end to end (QoS 1 publisher -> QoS 1 subscriber), flat out."""
    sub = _client("soak-cap-sub", port)
    got = []
    subscribed = threading.Event()
    sub.on_subscribe = lambda *a: subscribed.set()
    sub.on_message = lambda *a: got.append(1)
    sub.subscribe("soakcap/t", qos=1)
    subscribed.wait(10)
    pub = _client("soak-cap", port)
    t0 = time.monotonic()
    sent = 0
    while time.monotonic() - t0 < seconds:
        if sent - len(got) < 200:  # the window is end to end: the subscriber paces it
            pub.publish("soakcap/t", b"x" * 64, qos=1)
            sent += 1
        else:
            time.sleep(0.001)
    rate = len(got) / (time.monotonic() - t0)
    for c in (pub, sub):
        c.disconnect()
        c.loop_stop()
    return rate


def run(server, minutes: float, interval: float = 5.0, rate: float | None = None, native_rate: float = 50.0,
        log=print) -> dict:
    port = server.ports["mqtt"]
    capacity = _capacity(port)
    rate = rate or capacity / 2
    lat: list[float] = []
    lock = threading.Lock()
    sub = _client("soak-sub", port)

    def on_message(c, u, m):
        sent = float(m.payload.split(b" ", 1)[0])
        with lock:
            lat.append(time.time() - sent)

    sub.on_message = on_message
    sub.subscribe("soak/#", qos=1)
    pub = _client("soak-pub", port)
    stop = threading.Event()

    def publish() -> None:
        n, t0 = 0, time.monotonic()
        while not stop.is_set():
            n += 1
            pub.publish(f"soak/{n % 16}", b"%.6f " % time.time() + b"x" * 64, qos=1)
            ahead = t0 + n / rate - time.monotonic()
            if ahead > 0:
                stop.wait(ahead)  # paced: the rate is the schedule

    native = subprocess.Popen([sys.executable, str(HERE / "native_worker.py"), "send", server.namesrv, "SoakNative",
                               "SoakTimer", "SoakG", str(server.work / "soak-native.jsonl"),
                               str(server.work / "soak-stop"), str(native_rate)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = threading.Thread(target=publish, daemon=True)
    t.start()
    samples = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < minutes * 60:
            stop.wait(interval)
            with lock:
                window, lat[:] = sorted(lat), []
            s = server.sample()
            samples.append({"t": round(time.monotonic() - t0, 1), "rss_mib": round(s["rss_kib"] / 1024, 1),
                            "rss_anon_mib": round(s["rss_anon_kib"] / 1024, 1),
                            "fds": s["fds"], "disk_mib": round(server.disk_bytes() / 2 ** 20, 1),
                            "p99_ms": round(window[int(len(window) * 0.99) - 1] * 1000, 2) if window else None,
                            "delivered_per_s": round(len(window) / interval)})
            if len(samples) % 12 == 1:
                log(f"soak: {samples[-1]}")
    finally:
        stop.set()
        t.join(5)
        (server.work / "soak-stop").touch()
        try:
            native.wait(30)
        except subprocess.TimeoutExpired:
            native.kill()
            native.wait(10)
        for c in (pub, sub):
            c.disconnect()
            c.loop_stop()
    native_acked = sum(1 for line in (server.work / "soak-native.jsonl").read_text().splitlines()
                       if '"native"' in line or '"timer"' in line)
    drifts = {k: drift([s[k] for s in samples if s[k] is not None]) for k in ("rss_mib", "rss_anon_mib", "fds", "p99_ms", "disk_mib")}
    return {"minutes": minutes, "capacity_msgs_per_s": round(capacity), "rate_msgs_per_s": round(rate),
            "native_rate_msgs_per_s": native_rate,
            "native_acked": native_acked, "samples": samples, "drift": drifts,
            "tracebacks": server.tracebacks(), "server_alive": server.alive()}
