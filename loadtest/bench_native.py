"""Native-protocol client benchmark: ``python -m loadtest.bench_native [--count N] [--namesrv H:P]``.

Prints one JSON object: messages per second with 100-byte bodies, for our
trio client (`core.client`) and for the PyPI ``rocketmq`` 0.4.4 C++ client,
against the same broker:

- ``send_sync``: one sync send at a time (latency-bound), until N are acknowledged;
- ``send_sync_16`` (ours only): 16 concurrent sync senders;
- ``send_oneway``: N oneway sends, timed until the broker has stored all N
  (GET_MAX_OFFSET over the topic's queues);
- ``consume``: a new push-consumer group reads the N messages of the sync
  topic from the start (long-polling pulls, default batch of 1 per listener call).

Without ``--namesrv`` a broker is started for the run (``python -m gateway
serve`` in a temp dir, MQTT off, ASYNC_FLUSH) and stopped afterwards. Each
client family runs in its own child process, one after the other, so they
neither share a GIL nor overlap.

This file may import `core.client` (the issue asks for the comparison here).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

BODY = b"x" * 100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stored(namesrv: str, topic: str, *, must_exist: bool = False) -> int:
    """Messages stored in ``topic`` (sum of GET_MAX_OFFSET), through our client's API layer."""
    import trio

    from core.client.api import open_client_api

    async def count() -> int:
        async with open_client_api() as api:
            route = await api.get_route(namesrv, topic)
            if route is None:
                if must_exist:
                    raise LookupError(f"no route for {topic} yet")
                return 0
            addrs = route.broker_addrs()
            return sum([await api.max_offset(addrs[mq.broker_name], mq) for mq in route.subscribe_queues()])

    return trio.run(count)


def _wait_stored(namesrv: str, topic: str, n: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while _stored(namesrv, topic) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: fewer than {n} messages stored after {timeout}s")
        time.sleep(0.02)


# ---- our client ----


def bench_ours(namesrv: str, n: int, tag: str) -> dict:
    import trio

    from core.client import ConsumeFromWhere, Message, open_producer, open_push_consumer

    out: dict = {}
    sync_topic, oneway_topic, conc_topic = f"BenchOursSync{tag}", f"BenchOursOneway{tag}", f"BenchOursConc{tag}"

    async def main() -> None:
        async with open_producer(namesrv, "BenchOursPG") as p:
            await p.send(Message(sync_topic, BODY))  # routes and connections warm
            await p.send(Message(oneway_topic, BODY))
            await p.send(Message(conc_topic, BODY))
            t = time.perf_counter()
            for _ in range(n - 1):
                await p.send(Message(sync_topic, BODY))
            out["send_sync"] = (n - 1) / (time.perf_counter() - t)

            t = time.perf_counter()
            async with trio.open_nursery() as nursery:
                per = (n - 1) // 16
                for _ in range(16):
                    async def sender() -> None:
                        for _ in range(per):
                            await p.send(Message(conc_topic, BODY))
                    nursery.start_soon(sender)
            out["send_sync_16"] = per * 16 / (time.perf_counter() - t)

            t = time.perf_counter()
            for _ in range(n - 1):
                await p.send_oneway(Message(oneway_topic, BODY))
            await trio.to_thread.run_sync(_wait_stored, namesrv, oneway_topic, n)
            out["send_oneway"] = (n - 1) / (time.perf_counter() - t)

        done = trio.Event()
        count = 0

        async def listener(msgs, ctx) -> None:
            nonlocal count
            count += len(msgs)
            if count >= n:
                done.set()

        t = time.perf_counter()
        async with open_push_consumer(namesrv, f"BenchOursG{tag}", {sync_topic: "*"}, listener,
                                      consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET):
            with trio.fail_after(300):
                await done.wait()
            out["consume"] = n / (time.perf_counter() - t)

    trio.run(main)
    return out


# ---- the C++ client (PyPI rocketmq 0.4.4) ----


def bench_cpp(namesrv: str, n: int, tag: str) -> dict:
    from rocketmq.client import Message, Producer, PushConsumer

    out: dict = {}
    sync_topic, oneway_topic = f"BenchCppSync{tag}", f"BenchCppOneway{tag}"

    def msg(topic: str) -> Message:
        m = Message(topic)
        m.set_body(BODY)
        return m

    p = Producer("BenchCppPG")
    p.set_namesrv_addr(namesrv)
    p.start()
    try:
        p.send_sync(msg(sync_topic))
        p.send_sync(msg(oneway_topic))
        t = time.perf_counter()
        for _ in range(n - 1):
            p.send_sync(msg(sync_topic))
        out["send_sync"] = (n - 1) / (time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(n - 1):
            p.send_oneway(msg(oneway_topic))
        _wait_stored(namesrv, oneway_topic, n)
        out["send_oneway"] = (n - 1) / (time.perf_counter() - t)
    finally:
        p.shutdown()

    lock = threading.Lock()
    done = threading.Event()
    count = [0]

    def callback(_m) -> None:
        with lock:
            count[0] += 1
            if count[0] >= n:
                done.set()

    c = PushConsumer(f"BenchCppG{tag}")
    c.set_namesrv_addr(namesrv)
    c.subscribe(sync_topic, callback)
    t = time.perf_counter()
    c.start()
    try:
        if not done.wait(300):
            raise TimeoutError(f"C++ consumer got {count[0]} of {n}")
        out["consume"] = n / (time.perf_counter() - t)
    finally:
        c.shutdown()
    return out


# ---- orchestration ----


def _start_broker(data_dir: str) -> tuple[subprocess.Popen, str]:
    ns_port, broker_port = _free_port(), _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--data-dir", data_dir, "--namesrv-port", str(ns_port),
         "--broker-port", str(broker_port), "--mqtt-port", "0", "--ws-port", "0", "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    namesrv = f"127.0.0.1:{ns_port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            _stored(namesrv, "TBW102", must_exist=True)  # once the broker registered with the name server
            break
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the broker did not start")
            time.sleep(0.2)
    return proc, namesrv


def _child(part: str, namesrv: str, n: int, tag: str) -> dict:
    res = subprocess.run(
        [sys.executable, "-m", "loadtest.bench_native", "--part", part, "--namesrv", namesrv, "--count", str(n),
         "--tag", tag],
        capture_output=True, text=True, timeout=900,
    )
    if res.returncode != 0:
        return {"error": (res.stderr or res.stdout).strip().splitlines()[-1:] or ["failed"]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_native", description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=5000, help="messages per measurement (default 5000)")
    ap.add_argument("--namesrv", help="use this running name server instead of starting a broker")
    ap.add_argument("--part", choices=("ours", "cpp"), help=argparse.SUPPRESS)
    ap.add_argument("--tag", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    tag = a.tag or str(int(time.time()))
    if a.part:
        fn = bench_ours if a.part == "ours" else bench_cpp
        print(json.dumps({k: round(v, 1) for k, v in fn(a.namesrv, a.count, tag).items()}))
        return 0
    proc = None
    with tempfile.TemporaryDirectory(prefix="bench_native_") as tmp:
        try:
            if a.namesrv:
                namesrv = a.namesrv
            else:
                proc, namesrv = _start_broker(os.path.join(tmp, "data"))
            result = {
                "body_bytes": len(BODY), "count": a.count, "broker": "started for the run" if proc else namesrv,
                "ours": _child("ours", namesrv, a.count, tag),
                "cpp": _child("cpp", namesrv, a.count, tag),
            }
        finally:
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
    ours, cpp = result["ours"], result["cpp"]
    result["ours_over_cpp"] = {k: round(ours[k] / cpp[k], 3) for k in ("send_sync", "send_oneway", "consume")
                               if isinstance(ours.get(k), float) and isinstance(cpp.get(k), float) and cpp[k]}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
