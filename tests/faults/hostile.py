"""Hostile clients that speak well-formed MQTT: slowloris, churn, topic floods, ACL bypass.

Rules it keeps (each attack returns its figures; the campaign judges them):
- slowloris: `n` sockets send half a CONNECT and stop; the server must close
  each within `connectTimeout` (+ slack), keep serving a canary, RSS bounded.
- connection churn: `n` raw CONNECT/DISCONNECT pairs from a few processes, RSS before/after.
- topic flood: one client subscribes to `n` distinct topics in batches and
  unsubscribes them; RSS at the peak and after.
- ACL bypass: an anonymous client allowed only ``open/#`` tries to reach
  ``secret/#`` through ``$share``, ``$SYS``, a topic alias, a will and
  retained messages; a victim allowed everything watches.  `leaks` must be 0.
"""

from __future__ import annotations

import multiprocessing
import resource
import socket
import struct
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes

from campaign_server import wait_for
from fuzz import Canary, connect_packet

ACL_FILE = """\
topic readwrite open/#

user victim
topic readwrite #
"""


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def slowloris(server, n: int, connect_timeout: float) -> dict:
    port = server.ports["mqtt"]
    canary = Canary(port, topic="open/canary")  # the ACL lets anonymous clients use open/# only
    rss0 = server.sample()["rss_kib"]
    socks, refused = [], 0
    t0 = time.monotonic()
    for i in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(connect_packet(4, b"slow%d" % i)[:5])  # header and part of the protocol name
            socks.append(s)
        except OSError:
            refused += 1
    opened_s = time.monotonic() - t0
    peak = server.sample()
    closed = 0
    # a connection waits in the listen backlog until accepted; its connectTimeout starts there
    deadline = time.monotonic() + connect_timeout + 30
    for s in socks:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if s.recv(16) == b"":
                closed += 1
        except OSError as e:
            closed += isinstance(e, ConnectionResetError)
        s.close()
    all_closed_s = time.monotonic() - t0
    after = server.sample()
    return {"connections": n, "opened": len(socks), "refused": refused, "open_s": round(opened_s, 1),
            "all_closed_after_s": round(all_closed_s, 1),
            "closed_by_server": closed, "rss_before_mib": round(rss0 / 1024, 1),
            "rss_peak_mib": round(peak["rss_kib"] / 1024, 1), "fds_peak": peak["fds"],
            "rss_after_mib": round(after["rss_kib"] / 1024, 1), "canary": canary.close()}


def _churn_share(port: int, first: int, step: int, n: int, threads: int) -> int:
    """CONNECT/DISCONNECT pairs ``first, first + step, ...`` below ``n`` from
    ``threads`` threads of this process; the failures."""
    failed = [0] * threads

    def one_thread(k: int) -> None:
        for i in range(first + k * step, n, step * threads):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.sendall(connect_packet(4, b"churn%d" % (i % 1000)))
                    if s.recv(4)[:1] != b"\x20":
                        failed[k] += 1
                    s.sendall(b"\xe0\x00")
            except OSError:
                failed[k] += 1

    workers = [threading.Thread(target=one_thread, args=(k,), daemon=True) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(failed)


def churn(server, n: int, procs: int = 2, threads: int = 3) -> dict:
    """``n`` CONNECT/DISCONNECT pairs from ``procs`` processes of ``threads``
    threads each (one thread is bound by its own round trips, one process by
    its GIL: a single one makes about 1,000 a second, not the server's limit)."""
    port = server.ports["mqtt"]
    rss0 = server.sample()["rss_kib"]
    t0 = time.monotonic()
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        failed = sum(pool.starmap(_churn_share, [(port, p, procs, n, threads) for p in range(procs)]))
    return {"connects": n, "processes": procs, "threads": procs * threads, "failed": failed,
            "per_s": round(n / (time.monotonic() - t0)),
            "rss_before_mib": round(rss0 / 1024, 1), "rss_after_mib": round(server.sample()["rss_kib"] / 1024, 1)}


def topic_flood(server, n: int, batch: int = 500, passes: int = 2) -> dict:
    """``passes`` times: subscribe ``n`` new distinct topics, then unsubscribe them.
    Memory is bounded when RSS after the last pass is about RSS after the first
    (what is kept is reused, not grown)."""
    port = server.ports["mqtt"]
    rss0 = server.sample()["rss_kib"]
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="topic-flood")
    c.username_pw_set("victim")  # allowed everything by ACL_FILE
    acks = []
    connected = threading.Event()
    c.on_connect = lambda *a: connected.set()
    c.on_subscribe = lambda *a: acks.append(1)
    c.on_unsubscribe = lambda *a: acks.append(1)
    c.connect("127.0.0.1", port, keepalive=60)
    c.loop_start()
    if not connected.wait(10):
        raise RuntimeError("the topic-flood client did not connect")
    t0 = time.monotonic()
    peaks, afters = [], []
    sent = 0

    def batches(p: int, op) -> None:
        nonlocal sent
        for start in range(0, n, batch):
            op([f"flood/{p}/{i}/x" for i in range(start, min(n, start + batch))])
            sent += 1
            wait_for(lambda: len(acks) >= sent - 20, 30)  # at most 20 batches in flight
        wait_for(lambda: len(acks) >= sent, 60)

    try:
        for p in range(passes):
            batches(p, lambda topics: c.subscribe([(t, 0) for t in topics]))
            peaks.append(round(server.sample()["rss_kib"] / 1024, 1))
            batches(p, c.unsubscribe)
            afters.append(round(server.sample()["rss_kib"] / 1024, 1))
    finally:
        c.disconnect()
        c.loop_stop()
    return {"topics": n, "passes": passes, "acks": len(acks), "expected_acks": sent,
            "seconds": round(time.monotonic() - t0, 1), "rss_before_mib": round(rss0 / 1024, 1),
            "rss_peak_mib": max(peaks), "rss_peak_per_pass_mib": peaks, "rss_after_per_pass_mib": afters,
            "rss_after_mib": afters[-1]}


def _v5(client_id: str, port: int, username: str | None = None, will: tuple | None = None) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    if username:
        c.username_pw_set(username)
    if will:
        c.will_set(*will)
    c.suback: list = []
    c.got: list = []
    c.on_subscribe = lambda cl, ud, mid, codes, props: c.suback.append([int(getattr(x, "value", x)) for x in codes])
    c.on_message = lambda cl, ud, m: c.got.append((m.topic, bytes(m.payload)))
    connected = threading.Event()
    c.connack = None

    def on_connect(cl, ud, flags, reason_code, props):
        c.connack = int(getattr(reason_code, "value", reason_code))
        connected.set()

    c.on_connect = on_connect
    c.connect("127.0.0.1", port, keepalive=30)
    c.loop_start()
    if not connected.wait(10):  # paho drops a SUBSCRIBE sent before the CONNACK
        raise RuntimeError(f"{client_id} did not connect")
    return c


def acl_bypass(server) -> dict:
    """``server`` runs with ACL_FILE as its aclFile."""
    port = server.ports["mqtt"]
    victim = _v5("victim", port, "victim")
    victim.subscribe("secret/#", qos=1)
    victim.publish("secret/r2", b"victim-retained", qos=1, retain=True)
    wait_for(lambda: victim.suback, 10)
    attempts = {}
    # a will on a denied topic: refused at CONNECT, or accepted and never published
    willer = _v5("mallory-will", port, will=("secret/will", b"from-will", 1, False))
    will_connack = willer.connack
    sock = willer.socket()  # None: the server refused the CONNECT and closed
    if sock is not None:
        sock.shutdown(socket.SHUT_RDWR)  # gone without DISCONNECT: the will would be due now
    willer.loop_stop()
    mallory = _v5("mallory", port)
    try:
        for name, flt in (("share", "$share/g/secret/#"), ("sys", "$SYS/#"), ("wildcard_retained", "+/r2")):
            n = len(mallory.suback)
            mallory.subscribe(flt, qos=1)
            wait_for(lambda: len(mallory.suback) > n, 10)
            attempts[name] = {"filter": flt, "suback": mallory.suback[-1] if len(mallory.suback) > n else None}
        props = Properties(PacketTypes.PUBLISH)
        props.TopicAlias = 1
        mallory.publish("open/a", b"via-open", qos=1, properties=props)
        mallory.publish("secret/x", b"alias-set", qos=1, properties=props)  # refused: alias must not map to it
        mallory.publish("", b"via-alias", qos=1, properties=props)
        mallory.publish("secret/r", b"mallory-retained", qos=1, retain=True)
        victim.publish("secret/y", b"victim-live", qos=1)
        wait_for(lambda: any(p == b"victim-live" for _, p in victim.got), 10)
        late = _v5("late-reader", port, "victim")
        late.subscribe("secret/#", qos=1)
        wait_for(lambda: late.suback, 10)
        wait_for(lambda: any(p == b"victim-retained" for _, p in late.got), 10)
        # the will would come at once (no delay); give the server the time the victim's own message took
        t_live = time.monotonic()
        wait_for(lambda: any(p == b"from-will" for _, p in victim.got), 3)
        leaked_to_victim = [p.decode() for _, p in victim.got if p in (b"alias-set", b"via-alias", b"mallory-retained", b"from-will")]
        leaked_retained = [p.decode() for _, p in late.got if p == b"mallory-retained"]
        leaked_to_mallory = [(t, p.decode()) for t, p in mallory.got if t.startswith(("secret", "$SYS"))]
        late.disconnect()
        late.loop_stop()
    finally:
        victim.disconnect()
        victim.loop_stop()
        try:
            mallory.disconnect()
        except Exception:  # noqa: BLE001 - its socket is gone on purpose
            pass
    refused = {k: (v["suback"] is not None and all(c >= 0x80 for c in v["suback"])) for k, v in attempts.items()}
    # a granted wildcard is not a leak by itself (delivery is filtered per topic); a delivered message is
    leaks = len(leaked_to_victim) + len(leaked_retained) + len(leaked_to_mallory)
    return {"subscribe_refused": refused, "attempts": attempts, "will_connack": will_connack, "leaked_to_victim": leaked_to_victim, "leaked_retained": leaked_retained,
            "leaked_to_attacker": leaked_to_mallory, "leaks": leaks, "waited_s": round(time.monotonic() - t_live, 1)}
