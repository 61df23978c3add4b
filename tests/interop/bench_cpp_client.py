"""Send and pull throughput of the PyPI `rocketmq` (C++ 1.2.x) client against our broker.

Run:  .venv/bin/python tests/interop/bench_cpp_client.py [--count N] [--size 100]

Starts a name server and a broker (ASYNC_FLUSH, temp dir) in a child
process (``--same-process``: a background thread of this one, sharing the
GIL with the client), then measures with one producer thread: sync sends,
oneway sends (until all are stored), and push-consume of everything sent
by a fresh consumer group reading from offset 0 (time includes the
consumer's start and first rebalance). Prints one JSON object.
"""

import argparse
import json
import multiprocessing
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from harness import ClusterThread, create_topic, queue_count, wait_for  # noqa: E402
from rocketmq.client import Message, Producer, PushConsumer  # noqa: E402


def _serve(conn, data_dir: str) -> None:
    """Child process: run the cluster; answer ("create", topic) and ("count", topic) requests."""
    cluster = ClusterThread(data_dir).start()
    conn.send(cluster.namesrv)
    while True:
        op, topic = conn.recv()
        if op == "stop":
            break
        if op == "create":
            create_topic(cluster, topic, 4)
            conn.send(True)
        else:
            conn.send(sum(queue_count(cluster, topic, q) for q in range(4)))
    cluster.stop()
    conn.send(True)


class RemoteCluster:
    def __init__(self, data_dir: str):
        self.conn, child = multiprocessing.Pipe()
        self.proc = multiprocessing.get_context("spawn").Process(target=_serve, args=(child, data_dir), daemon=True)
        self.proc.start()
        self.namesrv = self.conn.recv()

    def create(self, topic: str) -> None:
        self.conn.send(("create", topic))
        self.conn.recv()

    def count(self, topic: str) -> int:
        self.conn.send(("count", topic))
        return self.conn.recv()

    def stop(self) -> None:
        self.conn.send(("stop", ""))
        self.conn.recv()
        self.proc.join(30)


class LocalCluster:
    def __init__(self, data_dir: str):
        self.c = ClusterThread(data_dir).start()
        self.namesrv = self.c.namesrv

    def create(self, topic: str) -> None:
        create_topic(self.c, topic, 4)

    def count(self, topic: str) -> int:
        return sum(queue_count(self.c, topic, q) for q in range(4))

    def stop(self) -> None:
        self.c.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--same-process", action="store_true")
    args = ap.parse_args()
    run = uuid.uuid4().hex[:6]
    body = b"x" * args.size
    with tempfile.TemporaryDirectory() as d:
        cluster = LocalCluster(d) if args.same_process else RemoteCluster(d)
        try:
            topic = f"Bench_{run}"
            cluster.create(topic)
            p = Producer(f"BenchPG_{run}")
            p.set_namesrv_addr(cluster.namesrv)
            p.start()
            m = Message(topic)
            m.set_body(body)
            p.send_sync(m)  # warm up: route, connection
            t0 = time.perf_counter()
            for _ in range(args.count):
                p.send_sync(m)
            sync_s = time.perf_counter() - t0
            total = args.count + 1
            t0 = time.perf_counter()
            for _ in range(args.count):
                p.send_oneway(m)
            total += args.count
            wait_for(lambda: cluster.count(topic) >= total, 120, 0.005)
            oneway_s = time.perf_counter() - t0
            received = [0]
            lock = threading.Lock()
            done = threading.Event()

            def on_message(_msg):
                with lock:
                    received[0] += 1
                    if received[0] >= total:
                        done.set()

            c = PushConsumer(f"BenchCG_{run}")
            c.set_namesrv_addr(cluster.namesrv)
            c.set_thread_count(4)
            c.set_message_batch_max_size(32)
            c.subscribe(topic, on_message)
            t0 = time.perf_counter()
            c.start()
            done.wait(180)
            pull_s = time.perf_counter() - t0
            c.shutdown()
            p.shutdown()
        finally:
            cluster.stop()
    print(json.dumps({
        "client": "PyPI rocketmq 0.4.4 (C++ 1.2.x)", "server": "same process" if args.same_process else "child process", "body_bytes": args.size, "count": args.count,
        "send_sync_msgs_per_s": round(args.count / sync_s),
        "send_oneway_msgs_per_s_until_stored": round(args.count / oneway_s),
        "push_consume_msgs_per_s_incl_start": round(received[0] / pull_s), "consumed": received[0],
    }))


if __name__ == "__main__":
    main()
