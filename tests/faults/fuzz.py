"""Hostile bytes: mutation-based fuzzing of live listeners from valid corpora.

Targets: MQTT over TCP, MQTT over WebSocket (a real handshake, then mutated
MQTT in masked binary frames, and sometimes a mutated WebSocket frame
header), RocketMQ remoting, HTTP, and the master's HA port (what a slave
sends there: 8-byte commit-log offsets, reference 8).  Each connection sends a valid opening
(CONNECT, handshake) or not, then a few frames, each a corpus frame mutated
by bit flips, byte changes, inserts, deletes, truncation, duplicated slices,
splices of two frames or a random length prefix.

Rules it keeps:
- `frames` counts frames written to a socket; a server closing the connection
  at the first bad frame is correct, so the rest of that connection's frames
  count as sent, not parsed (`connections` says how many were opened).
- Meanwhile a paho canary publishes and receives QoS 1 every 0.2 s; every
  message must come back within 5 s (`canary_failures` must be 0).
- The verdict: the server process is alive at the end, logged no traceback,
  the canary never failed.
- Memory is sampled every 0.5 s (RSS and its anonymous part, against frames
  sent); the report gives each quarter's mean and the last quarter's drift
  against the second (``memory_summary``): bounded memory levels off.
- ``targets`` picks the listeners (all by default), to tell which one grows.
"""

from __future__ import annotations

import base64
import json
import os
import random
import socket
import struct
import threading
import time

import paho.mqtt.client as mqtt

from campaign_server import drift


def _mqtt_str(s: bytes) -> bytes:
    return struct.pack(">H", len(s)) + s


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n % 128, n // 128
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _varint(len(body)) + body


def connect_packet(version: int = 4, client_id: bytes = b"fz") -> bytes:
    props = b"\x00" if version == 5 else b""
    return _packet(0x10, _mqtt_str(b"MQTT") + bytes([version, 0x02]) + b"\x00\x3c" + props + _mqtt_str(client_id))


def mqtt_corpus() -> list[bytes]:
    p5 = b"\x00"
    return [
        connect_packet(4), connect_packet(5),
        _packet(0x10, _mqtt_str(b"MQTT") + bytes([5, 0xEE]) + b"\x00\x0a" + b"\x05\x11\x00\x00\x00\x10"
                + _mqtt_str(b"fzw") + b"\x00" + _mqtt_str(b"will/t") + _mqtt_str(b"bye") + _mqtt_str(b"u") + _mqtt_str(b"p")),
        _packet(0x30, _mqtt_str(b"fz/a") + b"hello"),
        _packet(0x32, _mqtt_str(b"fz/b") + b"\x00\x01" + b"qos1"),
        _packet(0x34, _mqtt_str(b"fz/c") + b"\x00\x02" + b"qos2"),
        _packet(0x31, _mqtt_str(b"fz/r") + b"retained"),
        _packet(0x30, _mqtt_str(b"") + b"\x03\x23\x00\x01" + b"alias"),  # v5 shape: topic alias 1
        _packet(0x82, b"\x00\x03" + _mqtt_str(b"fz/#") + b"\x01" + _mqtt_str(b"$share/g/fz/+") + b"\x02"),
        _packet(0x82, b"\x00\x04" + p5 + _mqtt_str(b"$SYS/#") + b"\x00"),
        _packet(0xA2, b"\x00\x05" + _mqtt_str(b"fz/#")),
        _packet(0x40, b"\x00\x01"), _packet(0x50, b"\x00\x02"), _packet(0x62, b"\x00\x02"), _packet(0x70, b"\x00\x02"),
        _packet(0xC0, b""), _packet(0xE0, b""), _packet(0xF0, b"\x00\x00"),
    ]


def remoting_frame(code: int, ext: dict | None = None, body: bytes = b"", opaque: int = 1) -> bytes:
    header = json.dumps({"code": code, "flag": 0, "language": "JAVA", "opaque": opaque, "serializeTypeCurrentRPC": "JSON",
                         "version": 317, "extFields": ext or {}}).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def remoting_corpus() -> list[bytes]:
    send = {"producerGroup": "FZ", "topic": "FuzzT", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "KEYS\x01k\x02",
            "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
    pull = {"consumerGroup": "FZG", "topic": "FuzzT", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}
    return [remoting_frame(10, send, b"body"), remoting_frame(11, pull), remoting_frame(105, {"topic": "FuzzT"}),
            remoting_frame(34, {}, json.dumps({"clientID": "fz", "producerDataSet": [], "consumerDataSet": []}).encode()),
            remoting_frame(17, {"topic": "FuzzT"}), remoting_frame(26, {"topic": "FuzzT"}),
            remoting_frame(310, {"producerGroup": "FZ", "topic": "FuzzT"}, b"\x00\x00\x00\x04b"),
            remoting_frame(37, {"consumerGroup": "FZG", "topic": "FuzzT", "queueId": "0", "commitOffset": "5"})]


def ha_corpus() -> list[bytes]:
    """A slave's reports (int64 big-endian commit-log ends): from the start,
    small, far past the end, several in one write, and half of one."""
    reports = [struct.pack(">q", n) for n in (0, 1, 4096, 1 << 20, 1 << 40, (1 << 63) - 1)]
    return reports + [reports[0] + reports[2], reports[2] + reports[3] + reports[0], reports[3][:5]]


def http_corpus() -> list[bytes]:
    return [b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /api/v1/clients HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /api/v1/publish HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 41\r\n\r\n"
            b'{"topic":"fz/h","payload":"x","qos":1}   ',
            b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"]


def mutate(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        if not b:
            b = bytearray(rng.choice(corpus))
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif op == 2:
            b[i:i] = os.urandom(rng.randint(1, 8))
        elif op == 3:
            del b[i:i + rng.randint(1, 8)]
        elif op == 4:
            del b[rng.randint(0, len(b)):]
        elif op == 5:
            j = rng.randint(i, len(b))
            b[j:j] = b[i:j] * rng.randint(1, 3)
        elif op == 6:
            other = rng.choice(corpus)
            b = b[:i] + bytearray(other[rng.randrange(len(other)):])
        elif op == 7 and len(b) >= 4:
            b[0:4] = struct.pack(">I", rng.choice((0, 1, 0x7FFFFFFF, 0xFFFFFFFF, rng.randrange(1 << 32))))
        else:
            b[1:1] = _varint(rng.choice((0, 127, 128, 16383, 268435455)))
    return bytes(b)


def _ws_frame(rng: random.Random, payload: bytes, opcode: int = 2) -> bytes:
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n))
    return head + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload))


WS_HANDSHAKE = (b"GET /mqtt HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Key: " + base64.b64encode(b"0123456789abcdef") + b"\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n")


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.frames: dict[str, int] = {}
        self.connections: dict[str, int] = {}
        self.refused = 0

    def add(self, target: str, frames: int) -> None:
        with self.lock:
            self.frames[target] = self.frames.get(target, 0) + frames
            self.connections[target] = self.connections.get(target, 0) + 1

    def total(self) -> int:
        with self.lock:
            return sum(self.frames.values())


def one_connection(rng: random.Random, target: str, port: int, counters: Counters, per_conn: int) -> None:
    """One connection to ``target``: an opening or not, ``per_conn`` mutated frames, a reset."""
    corpus = {"mqtt": MQTT, "ws": MQTT, "remoting": REMOTING, "http": HTTP, "ha": HA}[target]
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        with counters.lock:
            counters.refused += 1
        return
    sent = 0
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST: no TIME_WAIT pile-up
        opening = b""
        if target == "ws":
            s.sendall(WS_HANDSHAKE)
            s.recv(4096)
        if target in ("mqtt", "ws") and rng.random() < 0.7:
            opening = connect_packet(rng.choice((4, 5)), b"fz%d" % rng.randrange(1000))
        frames = [mutate(rng, rng.choice(corpus), corpus) for _ in range(per_conn)]
        if target == "ws":
            data = (_ws_frame(rng, opening) if opening else b"") + b"".join(
                _ws_frame(rng, f) if rng.random() < 0.9 else mutate(rng, _ws_frame(rng, f), corpus) for f in frames)
        else:
            data = opening + b"".join(frames)
        s.sendall(data)
        sent = len(frames)
        s.settimeout(0.05)
        try:
            s.recv(65536)
        except OSError:
            pass
    except OSError:
        sent = sent or 1
    finally:
        s.close()
        counters.add(target, sent)


MQTT, REMOTING, HTTP, HA = mqtt_corpus(), remoting_corpus(), http_corpus(), ha_corpus()


class Canary:
    """A well-behaved paho client: QoS 1 round trips every 0.2 s, each within 5 s."""

    def __init__(self, port: int, topic: str = "canary/t"):
        self.topic = topic
        self.sent: dict[int, float] = {}
        self.got: set[int] = set()
        self.failures = 0
        self.rtts: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"canary-{os.getpid()}")
        ready = threading.Event()
        self.client.on_subscribe = lambda *a: ready.set()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        self.client.subscribe(topic, qos=1)
        if not ready.wait(10):
            raise RuntimeError("the canary could not subscribe")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_message(self, client, userdata, msg):
        n = int(msg.payload)
        with self._lock:
            if n in self.sent and n not in self.got:
                self.got.add(n)
                self.rtts.append(time.monotonic() - self.sent[n])

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(0.2):
            n += 1
            with self._lock:
                self.sent[n] = time.monotonic()
                overdue = [k for k, t in self.sent.items() if k not in self.got and time.monotonic() - t > 5]
                for k in overdue:
                    self.got.add(k)  # counted once
                self.failures += len(overdue)
            self.client.publish(self.topic, str(n).encode(), qos=1)

    def close(self) -> dict:
        self._stop.set()
        self._thread.join(5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(self.got) < len(self.sent):
            time.sleep(0.05)
        with self._lock:
            self.failures += len(set(self.sent) - self.got)
            rtts = sorted(self.rtts)
        self.client.disconnect()
        self.client.loop_stop()
        return {"round_trips": len(rtts), "failures": self.failures,
                "p99_ms": round(rtts[int(len(rtts) * 0.99) - 1] * 1000, 2) if rtts else None}


TARGETS = ("ha", "http", "mqtt", "remoting", "ws")


def run(server, frames: int, seed: int = 1, threads: int = 8, per_conn: int = 8, targets=TARGETS, log=print) -> dict:
    """Fuzz ``server`` (a started CampaignServer) with about ``frames`` frames,
    spread over ``targets`` (those of TARGETS it has a port for)."""
    bad = set(targets) - set(TARGETS)
    if bad:
        raise ValueError(f"unknown fuzz targets {sorted(bad)}; known: {', '.join(TARGETS)}")
    ports = {t: server.ports.get("broker" if t == "remoting" else t) for t in targets}
    ports = {t: p for t, p in ports.items() if p}
    targets = sorted(ports)
    counters = Counters()
    canary = Canary(server.ports["mqtt"])
    samples: list[tuple] = []  # (s since start, frames sent, RSS KiB, anonymous KiB, file-backed KiB)
    t0 = time.monotonic()
    stop = threading.Event()

    def worker(k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        while not stop.is_set() and counters.total() < frames:
            target = targets[rng.randrange(len(targets))]
            one_connection(rng, target, ports[target], counters, per_conn)

    pool = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(threads)]
    for t in pool:
        t.start()
    last_log = 0.0
    while any(t.is_alive() for t in pool):
        if not server.alive():
            stop.set()
            break
        m = server.sample()
        samples.append((round(time.monotonic() - t0, 1), counters.total(), m["rss_kib"], m["rss_anon_kib"],
                        m["rss_file_kib"]))
        if time.monotonic() - last_log > 10:
            last_log = time.monotonic()
            log(f"fuzz: {counters.total()}/{frames} frames, rss {m['rss_kib'] // 1024} MiB "
                f"(anon {m['rss_anon_kib'] // 1024} MiB)")
        stop.wait(0.5)
    for t in pool:
        t.join(10)
    alive = server.alive()
    canary_result = canary.close() if alive else {"failures": -1}
    return {"frames": counters.frames, "frames_total": counters.total(), "connections": counters.connections,
            "connect_refused": counters.refused, "seconds": round(time.monotonic() - t0, 1),
            "server_alive": alive, "tracebacks": server.tracebacks(), "canary": canary_result,
            **memory_summary(samples), "rss_series": samples}


def memory_summary(samples: list[tuple]) -> dict:
    """RSS and its anonymous part (the heap; the rest is mapped files: libraries,
    commit-log and consume-queue pages) at the start and the peak, the mean of
    each quarter of the run, and the drift of the last quarter against the
    second: near 0 when memory has levelled off (the first quarter is warm-up)."""
    if not samples:
        return {"rss_start_mib": None, "rss_peak_mib": None}
    out = {}
    for name, col in (("rss", 2), ("anon", 3)):
        values = [s[col] / 1024 for s in samples]
        n = len(values)
        quarters = [values[n * q // 4: max(n * (q + 1) // 4, n * q // 4 + 1)] for q in range(4)]
        out[f"{name}_start_mib"] = round(values[0], 1)
        out[f"{name}_peak_mib"] = round(max(values), 1)
        out[f"{name}_quarter_means_mib"] = [round(sum(q) / len(q), 1) for q in quarters]
        out[f"{name}_drift"] = drift(values)
    return out
