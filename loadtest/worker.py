"""One client process: connects its share of clients, runs them, reports.

Messages a worker puts on the control queue, in this order:
``("ready", i, info)`` once every client is connected (and subscribed), or
``("error", i, text)`` and nothing more; then ``("published", i)`` when all its
publishers are done (at once if it has none); then ``("result", i, data)``.

Rules it keeps:

- Nothing happens before ``start`` is set: the orchestrator sets it once all
  workers are ready, so no message is published before every subscriber is.
- The worker stops at ``deadline_ns`` whatever happens, and says so
  (``timed_out``); it dies with its parent (PR_SET_PDEATHSIG) and ignores
  Ctrl-C, which the orchestrator handles by killing it.
- A subscriber stops when it has its ``expected`` arrivals, or when publishers
  are all done and it has been quiet for ``drain`` seconds.
- Storm connections ("idle") are always raw sockets: a thread per idle paho
  client would measure the generator.
"""

from __future__ import annotations

import ctypes
import resource
import selectors
import signal
import socket
import time
import traceback
import zlib
from array import array
from dataclasses import dataclass

from . import codec, rawclient
from .accounting import Buckets, SubscriberLog


@dataclass
class RunConfig:
    host: str
    port: int
    qos: int
    payload: int
    inflight: int
    version: int
    mode: str
    deadline_ns: int
    drain: float
    bucket: float
    connect_timeout: float = 10.0
    # Spread connections over source addresses 127.0.0.2-127.0.0.65: one
    # source address gives at most ~28,000 connections to one port (the
    # ephemeral port range); a 100,000-connection storm needs more.
    spread_sources: bool = False


def _detach_from_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # die with the parent, even if it is killed with SIGKILL
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(index: int, specs, cfg: RunConfig, control) -> None:
    _detach_from_terminal()
    try:
        clients, idle, info = _setup(specs, cfg)
    except Exception as exc:  # reported, the orchestrator decides
        control.queue.put(("error", index, f"{type(exc).__name__}: {exc}\n"
                           + traceback.format_exc(limit=3)))
        return
    control.queue.put(("ready", index, info))
    remaining = (cfg.deadline_ns - time.monotonic_ns()) / 1e9
    if not control.start.wait(max(0.0, remaining)):
        _close(clients, idle)
        control.queue.put(("published", index))
        control.queue.put(("result", index, _result(index, clients, True, info)))
        return
    timed_out = _run(index, clients, cfg, control)
    _close(clients, idle)
    control.queue.put(("result", index, _result(index, clients, timed_out, info)))


def _setup(specs, cfg: RunConfig):
    t0 = 0  # buckets are rebased on the shared t0 at start
    clients, idle = [], []
    info = {"connect_start_ns": time.monotonic_ns(), "connections": 0}
    idle_specs = [s for s in specs if s.role == "idle"]
    for batch_start in range(0, len(idle_specs), 32):
        idle += _connect_batch(idle_specs[batch_start:batch_start + 32], cfg)
    for spec in (s for s in specs if s.role != "idle"):
        buckets = Buckets(t0, cfg.bucket)
        if cfg.mode == "paho":
            from . import pahoclient
            if spec.role == "pub":
                clients.append(pahoclient.PahoPublisher(
                    cfg.host, cfg.port, spec, qos=cfg.qos, payload=cfg.payload,
                    inflight=cfg.inflight, version=cfg.version,
                    timeout=cfg.connect_timeout, buckets=buckets))
            else:
                clients.append(pahoclient.PahoSubscriber(
                    cfg.host, cfg.port, spec, qos=cfg.qos, version=cfg.version,
                    timeout=cfg.connect_timeout, buckets=buckets,
                    log=SubscriberLog(spec.group)))
            continue
        sock, reader, rest, server_window = rawclient.open_connection(
            cfg.host, cfg.port, spec.client_id, version=cfg.version, clean=spec.clean,
            timeout=cfg.connect_timeout,
            receive_maximum=65535 if spec.role == "sub" else 0)
        if spec.role == "pub":
            client = rawclient.RawPublisher(sock, spec, qos=cfg.qos, payload=cfg.payload,
                                            inflight=min(cfg.inflight, server_window), version=cfg.version,
                                            start_ns=0, buckets=buckets)
            client.reader = reader
        else:
            client = rawclient.RawSubscriber(sock, spec, version=cfg.version,
                                             buckets=buckets, log=SubscriberLog(spec.group))
            client.reader = reader
            rest += rawclient.subscribe(sock, reader, spec, qos=cfg.qos, version=cfg.version)
            client.handle(rest, time.monotonic_ns())
            if spec.offline_while_publishing:
                sock.sendall(codec.DISCONNECT_PACKET)
                sock.close()
                client.sock, client.closed = None, True
        clients.append(client)
    info["connect_end_ns"] = time.monotonic_ns()
    info["connections"] = len(idle) + len(clients)
    return clients, idle, info


def _connect_batch(specs, cfg: RunConfig) -> list:
    """Open a few connections at once: send every CONNECT, then read CONNACKs."""
    socks = []
    for spec in specs:
        if cfg.spread_sources:
            source = (f"127.0.0.{2 + zlib.crc32(spec.client_id.encode()) % 64}", 0)
            sock = socket.create_connection((cfg.host, cfg.port), timeout=cfg.connect_timeout,
                                            source_address=source)
        else:
            sock = socket.create_connection((cfg.host, cfg.port), timeout=cfg.connect_timeout)
        sock.sendall(codec.connect(spec.client_id, version=cfg.version, keepalive=0))
        socks.append(sock)
    for sock, spec in zip(socks, specs):
        _kind, body, _rest = rawclient.expect(sock, codec.PacketReader(), codec.CONNACK)
        if codec.connack_code(body, cfg.version):
            raise rawclient.ConnectError(f"{spec.client_id}: CONNACK refused")
    return socks


def _reconnect(client, cfg: RunConfig, sel) -> None:
    spec = client.spec
    if cfg.mode == "paho":
        client.reconnect()
        return
    sock, reader, rest, _window = rawclient.open_connection(
        cfg.host, cfg.port, spec.client_id, version=cfg.version, clean=False,
        timeout=cfg.connect_timeout, receive_maximum=65535)
    client.sock, client.reader, client.closed = sock, reader, False
    client.awaiting_rel.clear()
    sock.setblocking(False)
    sel.register(sock, selectors.EVENT_READ, client)
    client.handle(rest, time.monotonic_ns())


def _run(index: int, clients, cfg: RunConfig, control) -> bool:
    t0 = control.t0.value
    start_ns = time.monotonic_ns()
    sel = selectors.DefaultSelector()
    raw = cfg.mode == "raw"
    for c in clients:
        c.buckets.t0_ns = t0
        c.start_ns = start_ns
        if raw and c.sock is not None:
            c.sock.setblocking(False)
            sel.register(c.sock, selectors.EVENT_READ, c)
    pubs = [c for c in clients if c.spec.role == "pub"]
    subs = [c for c in clients if c.spec.role == "sub"]
    finished: set[int] = set()
    published_said = False
    pubs_done_ns = 0
    writing: set[int] = set()
    while True:
        now = time.monotonic_ns()
        if now >= cfg.deadline_ns:
            if not published_said:
                control.queue.put(("published", index))
            return True
        if not published_said and all(p.done for p in pubs):
            control.queue.put(("published", index))
            published_said = True
        if not pubs_done_ns and control.pubs_done.is_set():
            pubs_done_ns = now
            for s in subs:
                if s.spec.offline_while_publishing:
                    _reconnect(s, cfg, sel)
        for s in subs:
            hung_up = raw and s.closed and (pubs_done_ns or not s.spec.offline_while_publishing)
            if id(s) not in finished and (
                    s.done or hung_up or (pubs_done_ns and now - max(s.last_ns, pubs_done_ns)
                               >= cfg.drain * 1e9)):
                finished.add(id(s))
        sent = sum(p.sent for p in pubs)
        control.counters[2 * index] = sent
        control.counters[2 * index + 1] = sum(s.arrivals for s in subs)
        if published_said and len(finished) == len(subs):
            return False
        timeout = 0.05
        for c in pubs:
            c.fill(now)
            due = c.next_due(now)
            if due is not None:
                timeout = min(timeout, due)
            elif raw and c.can_send():  # more to send at once (a full window waits for acks in select)
                timeout = 0.0
        if not raw:
            time.sleep(min(timeout, 0.002))
            continue
        for c in clients:
            if c.out and not c.closed:
                _flush(c)
            wants = bool(c.out) and not c.closed
            if wants != (id(c) in writing) and c.sock is not None and not c.closed:
                events = selectors.EVENT_READ | (selectors.EVENT_WRITE if wants else 0)
                sel.modify(c.sock, events, c)
                (writing.add if wants else writing.discard)(id(c))
        for key, mask in sel.select(timeout):
            c = key.data
            if mask & selectors.EVENT_READ:
                try:
                    data = c.sock.recv(1 << 18)
                except (BlockingIOError, InterruptedError):
                    data = None
                except OSError:
                    data = b""
                if data == b"":
                    sel.unregister(c.sock)
                    writing.discard(id(c))
                    c.closed = True
                    c.out.clear()
                elif data:
                    c.on_data(data, time.monotonic_ns())
            if mask & selectors.EVENT_WRITE and not c.closed:
                _flush(c)


def _flush(c) -> None:
    try:
        n = c.sock.send(c.out)
    except (BlockingIOError, InterruptedError):
        return
    except OSError:
        c.closed = True
        c.out.clear()
        return
    del c.out[:n]


def _close(clients, idle) -> None:
    for c in clients:
        try:
            if hasattr(c, "client"):
                c.close()
            elif c.sock is not None and not c.closed:
                c.sock.setblocking(True)
                c.sock.settimeout(1.0)
                c.sock.sendall(codec.DISCONNECT_PACKET)
                c.sock.close()
        except OSError:
            pass
    for sock in idle:
        try:
            sock.sendall(codec.DISCONNECT_PACKET)
            sock.close()
        except OSError:
            pass


def _result(index, clients, timed_out, info) -> dict:
    pubs = [c for c in clients if c.spec.role == "pub"]
    subs = [c for c in clients if c.spec.role == "sub"]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "worker": index,
        "timed_out": timed_out,
        "sent": {p.spec.publisher: p.sent for p in pubs},
        "pub_buckets": [p.buckets.counts for p in pubs],
        "sub_buckets": [s.buckets.counts for s in subs],
        "logs": [(s.log.group, {k: array("I", v) for k, v in s.log.arrivals.items()},
                  array("q", s.log.latencies_ns), s.log.foreign) for s in subs],
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "pub_last_ns": max((p.last_ns for p in pubs), default=0),
        "sub_last_ns": max((s.last_ns for s in subs), default=0),
        **info,
    }
