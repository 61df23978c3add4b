"""Send and pull throughput of the PyPI `rocketmq` (C++ 1.2.x) client against our broker.

Run:  .venv/bin/python tests/interop/bench_cpp_client.py [--count N] [--size 100]

Starts a name server and a broker (ASYNC_FLUSH, temp dir) in a background
thread of this process, then measures with one producer thread:
sync sends, oneway sends, and push-consume of everything sent (a fresh
consumer group reading from offset 0). Prints one JSON object. The client
and the server share this process and its GIL, so the figures are a floor.
"""

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from harness import ClusterThread, create_topic, queue_count, wait_for  # noqa: E402
from rocketmq.client import Message, Producer, PushConsumer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    run = uuid.uuid4().hex[:6]
    body = b"x" * args.size
    with tempfile.TemporaryDirectory() as d:
        cluster = ClusterThread(d).start()
        try:
            topic = f"Bench_{run}"
            create_topic(cluster, topic, 4)
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
            wait_for(lambda: sum(queue_count(cluster, topic, q) for q in range(4)) >= total, 120, 0.005)
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
        "client": "PyPI rocketmq 0.4.4 (C++ 1.2.x)", "body_bytes": args.size, "count": args.count,
        "send_sync_msgs_per_s": round(args.count / sync_s),
        "send_oneway_msgs_per_s_until_stored": round(args.count / oneway_s),
        "push_consume_msgs_per_s_incl_start": round(received[0] / pull_s), "consumed": received[0],
    }))


if __name__ == "__main__":
    main()
