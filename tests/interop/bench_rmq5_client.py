"""Send and receive throughput of the PyPI `rocketmq-python-client` (5.x, gRPC) against `mqgate serve`.

Run:  .venv/bin/python tests/interop/bench_rmq5_client.py [--count N] [--size 100] [--batch 32]

Starts `mqgate serve` (ASYNC_FLUSH, temp dir, free ports, only the gRPC
listener and the broker), then measures with one client thread: sync sends
(one SendMessage round trip each), then a SimpleConsumer of a fresh group
receiving ``--batch`` messages per ReceiveMessage and acking each. Prints
one JSON object. The client is single-threaded here: the figures are round
trips per second through grpcio on both sides, not the broker's ceiling.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))

from serve_process import ServeProcess, free_port  # noqa: E402

from rocketmq.v5.client import ClientConfiguration, Credentials  # noqa: E402
from rocketmq.v5.consumer import SimpleConsumer  # noqa: E402
from rocketmq.v5.model import FilterExpression, Message  # noqa: E402
from rocketmq.v5.producer import Producer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    topic, group = f"bench5_{uuid.uuid4().hex[:6]}", f"bench5_g_{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        with ServeProcess(Path(tmp) / "data", "--namesrv-port", "0", "--broker-port", "0", "--mqtt-port", "0",
                          "--ws-port", "0", "--grpc-port", str(port)):
            endpoint = f"127.0.0.1:{port}"
            producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
            producer.startup()
            body = b"x" * a.size
            t = time.perf_counter()
            for _ in range(a.count):
                m = Message()
                m.topic, m.body = topic, body
                producer.send(m)
            send_s = time.perf_counter() - t
            producer.shutdown()
            consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group,
                                      {topic: FilterExpression("*")}, 5)
            consumer.startup()
            got, t = 0, time.perf_counter()
            while got < a.count:
                for m in consumer.receive(a.batch, 60):
                    consumer.ack(m)
                    got += 1
            receive_s = time.perf_counter() - t
            consumer.shutdown()
    print(json.dumps({"client": "rocketmq-python-client 5.x (gRPC)", "count": a.count, "size": a.size,
                      "batch": a.batch, "sync_send_per_s": round(a.count / send_s),
                      "receive_and_ack_per_s": round(a.count / receive_s)}))


if __name__ == "__main__":
    main()
