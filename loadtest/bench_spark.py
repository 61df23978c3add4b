"""Spark scan benchmark: ``python -m loadtest.bench_spark [--records N] [--dir DIR]``.

Writes ``--records`` (default 1,000,000) MQTT-telemetry-like messages into a
temporary `core.store.MessageStore` (topic ``devices``, property
``mqttTopic=devices/d<k>/telemetry`` over 1,000 devices, a ~45-byte JSON body,
message index off so that writing is quick), then measures in local[2]:

- ``spark_scan_groupby_s``: ``format("commitlog")`` scan + ``groupBy
  (mqtt_topic)`` with count and sum of body length, collected; run
  ``--runs`` times (the first run includes Python worker start-up).
  ``records_per_s`` is records / the best run; ``target`` is 700,000.
- the same pipeline's parts outside Spark, one core: ``plan_s`` (walking
  entry sizes to cut partitions, on the driver) and ``decode_records_per_s``
  (reading the planned ranges and decoding them to Arrow).

Prints one JSON object. This file and ``bench_store`` are the ``loadtest``
files that import project code (the issue asks for them here).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def write_store(root: str, records: int) -> dict:
    from core.store import EncodedMessage, Message, MessageStore, StoreConfig

    store = MessageStore(StoreConfig(store_path_root_dir=root, message_index_enable=False))
    store.start()
    t = time.perf_counter()
    batch = []
    base_ts = int(time.time() * 1000) - records  # one ms apart
    for i in range(records):
        body = b'{"temp": %d.%d, "hum": %d, "seq": %d}' % (20 + i % 9, i % 10, 40 + i % 17, i)
        msg = Message(
            topic="devices", body=body, queue_id=i % 4, born_timestamp=base_ts + i,
            properties={"mqttTopic": f"devices/d{i % 1000}/telemetry", "contentType": "application/json"},
        )
        batch.append(EncodedMessage(msg))
        if len(batch) == 1000:
            store.append_batch(batch)
            batch = []
    if batch:
        store.append_batch(batch)
    store.flush()
    size = store.max_phy_offset
    store.shutdown()
    return {"write_s": round(time.perf_counter() - t, 2), "log_bytes": size}


def decode_outside_spark(data_dir: str, max_bytes: int) -> dict:
    from spark import plan
    from spark.commitlog_source import read_range
    from spark.decode import RowFilter
    from pyspark.sql.datasource import InputPartition

    t = time.perf_counter()
    ranges, _end = plan.plan(data_dir, None, None, max_bytes)
    plan_s = time.perf_counter() - t
    t = time.perf_counter()
    rows = 0
    for r in ranges:
        for batch in read_range(InputPartition(r), RowFilter()):
            rows += batch.num_rows
    decode_s = time.perf_counter() - t
    return {"partitions": len(ranges), "plan_s": round(plan_s, 3), "decode_s": round(decode_s, 3),
            "decode_records_per_s": round(rows / decode_s), "decoded_rows": rows}


def spark_runs(data_dir: str, runs: int, max_bytes: int) -> tuple[list[float], int, int]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark

    session = (
        SparkSession.builder.master("local[2]").appName("bench_spark")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark.register(session)
    times, groups, total = [], 0, 0
    try:
        for _ in range(runs):
            t = time.perf_counter()
            df = session.read.format("commitlog").option("maxBytesPerPartition", str(max_bytes)).load(data_dir)
            out = df.groupBy("mqtt_topic").agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("b")).collect()
            times.append(round(time.perf_counter() - t, 3))
            groups, total = len(out), sum(r.n for r in out)
    finally:
        session.stop()
    return times, groups, total


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_spark")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--max-bytes-per-partition", type=int, default=32 << 20)
    p.add_argument("--dir", default=None, help="where the temporary store goes (removed afterwards)")
    args = p.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench_spark_", dir=args.dir)
    try:
        result = {"records": args.records}
        result.update(write_store(root, args.records))
        result.update(decode_outside_spark(root, args.max_bytes_per_partition))
        times, groups, total = spark_runs(root, args.runs, args.max_bytes_per_partition)
        assert total == args.records, (total, args.records)
        result.update({
            "spark_scan_groupby_s": times,
            "groups": groups,
            "records_per_s": round(args.records / min(times)),
            "target": 700_000,
        })
        print(json.dumps(result))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
