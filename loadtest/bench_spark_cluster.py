"""Cluster-source benchmark: ``python -m loadtest.bench_spark_cluster [--records N] [--runs R]``.

Starts a real ``mqgate serve`` (name server + broker, data in a temporary
directory, free loopback ports), sends ``--records`` (default 200,000)
telemetry-like messages to topic ``devices`` (4 queues) with the native
client in batches, then measures in local[2], in one run so that the
figures are ratios on the same machine and load:

- ``pull_records_per_s``: outside Spark, one core: `spark.cluster.pull_range`
  over every queue (pull, walk the entries), no decoding;
- ``rocketmq_records_per_s``: ``format("rocketmq")`` (pulls over loopback,
  decode) + ``groupBy(queue_id).count()``, collected; best of ``--runs``;
- ``commitlog_records_per_s``: the same query with ``format("commitlog")``
  over the same broker's data directory (the files, no broker in the way).

Prints one JSON object. Like ``bench_spark``, this file imports project code.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(root: str) -> tuple[subprocess.Popen, str]:
    ns, broker = _free_port(), _free_port()
    log = open(os.path.join(root, "serve.log"), "wb")
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--data-dir", os.path.join(root, "data"),
                             "--namesrv-port", str(ns), "--broker-port", str(broker), "--mqtt-port", "0",
                             "--ws-port", "0", "--http-port", "0"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(log.name, "rb") as f:
            if re.search(rb"ready: ", f.read()):
                return proc, f"127.0.0.1:{ns}"
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"mqgate serve did not start; see {log.name}")


def send(namesrv: str, records: int) -> float:
    from core.client import Message, Producer
    from core.client.api import open_client_api
    import trio

    async def create():
        async with open_client_api(5.0) as api:
            route = await api.get_route(namesrv, "TBW102")
            for addr in route.broker_addrs().values():
                await api.create_topic(addr, "devices", 4, 4)

    trio.run(create)
    t = time.perf_counter()
    with Producer(namesrv, "bench-spark-cluster", compress_over=1 << 30) as p:
        for start in range(0, records, 500):
            p.send_batch([Message("devices", b'{"temp": %d, "hum": %d}' % (i % 40, i % 97),
                                  properties={"mqttTopic": f"devices/d{i % 1000}/telemetry"})
                          for i in range(start, min(records, start + 500))])
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_spark_cluster")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench-spark-cluster-")
    proc, namesrv = start_serve(root)
    try:
        send_s = send(namesrv, args.records)
        from spark import cluster

        time.sleep(1.0)
        t = time.perf_counter()
        pulled = 0
        for key, b in cluster.queue_bounds(namesrv, "devices").items():
            broker, qid = cluster.split_key(key)
            for chunk in cluster.pull_range(namesrv, "devices", broker, qid, b.min, b.max):
                pulled += chunk.count
        pull_s = time.perf_counter() - t
        assert pulled == args.records, (pulled, args.records)

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        import spark

        session = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                   .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        spark.register(session)
        queries = {
            "rocketmq": lambda: session.read.format("rocketmq").option("namesrv", namesrv).option("topic", "devices")
            .option("minPartitions", "2").load(),
            "commitlog": lambda: session.read.format("commitlog").option("topics", "devices")
            .load(os.path.join(root, "data")),
        }
        times: dict[str, list[float]] = {k: [] for k in queries}
        for _warm in range(1):
            for name, q in queries.items():
                q().groupBy("queue_id").count().collect()
        for _ in range(args.runs):
            for name, q in queries.items():
                t = time.perf_counter()
                rows = q().groupBy("queue_id").count().collect()
                times[name].append(time.perf_counter() - t)
                assert sum(r["count"] for r in rows) == args.records, (name, rows)
        session.stop()
        out = {
            "records": args.records,
            "send_records_per_s": round(args.records / send_s),
            "pull_records_per_s": round(args.records / pull_s),
            **{f"{k}_records_per_s": round(args.records / min(v)) for k, v in times.items()},
            "runs_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
            "loadavg_1m": float(open("/proc/loadavg").read().split()[0]),
        }
        print(json.dumps(out))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
