"""Spark scan benchmark: ``python -m loadtest.bench_spark [--records N] [--dir DIR]``.

Writes ``--records`` (default 1,000,000) MQTT-telemetry-like messages into a
temporary `core.store.MessageStore` (topic ``devices``, property
``mqttTopic=devices/d<k>/telemetry`` over 1,000 devices, a ~45-byte JSON body,
message index off so that writing is quick), then measures in local[2]:

- ``full``: ``format("commitlog")`` scan of all eleven columns + ``groupBy
  (mqtt_topic)`` with count and sum of body length, collected; run
  ``--runs`` times (the first run includes Python worker start-up).
  ``records_per_s`` is records / the best run; ``target`` is 700,000.
- ``projected``: the same query with ``.schema("mqtt_topic string, body
  binary")``, so the source decodes (and Spark ingests) only the two
  columns the query uses. Python data sources get no column pruning from
  Spark; a user schema is how a query asks for less.
- with ``--floor``: ``floor``, the same full query over the same rows
  already decoded (Arrow IPC files written beforehand, read back by a
  trivial data source): what Spark itself spends taking Arrow batches from
  Python workers and aggregating, i.e. the best any decoder could do.
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
    from pyspark.sql.datasource import InputPartition

    from spark import plan
    from spark.commitlog_source import read_range
    from spark.decode import RowFilter

    plan.plan(data_dir, None, None, max_bytes)  # page cache warm, like the Spark runs
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


PROJECTION = "mqtt_topic string, body binary"


class _FloorSource:
    """Built lazily (pyspark imports): a data source replaying Arrow IPC files."""

    @staticmethod
    def make(files: list[str]):
        from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

        from spark.commitlog_source import SCHEMA

        class Reader(DataSourceReader):
            def partitions(self):
                return [InputPartition(f) for f in files]

            def read(self, partition):
                import pyarrow as pa

                with pa.memory_map(partition.value) as src:
                    yield from pa.ipc.open_file(src).read_all().to_batches()

        class Floor(DataSource):
            @classmethod
            def name(cls):
                return "bench_floor"

            def schema(self):
                return SCHEMA

            def reader(self, schema):
                return Reader()

        return Floor


def write_floor_files(data_dir: str, max_bytes: int, out_dir: str) -> list[str]:
    import pyarrow as pa
    from pyspark.sql.datasource import InputPartition

    from spark import plan
    from spark.commitlog_source import read_range
    from spark.decode import ARROW_SCHEMA, RowFilter

    files = []
    for i, r in enumerate(plan.plan(data_dir, None, None, max_bytes)[0]):
        path = os.path.join(out_dir, f"floor{i}.arrow")
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, ARROW_SCHEMA) as w:
            for batch in read_range(InputPartition(r), RowFilter()):
                w.write_batch(batch)
        files.append(path)
    return files


def spark_runs(data_dir: str, runs: int, max_bytes: int, floor_files: list[str] | None) -> dict:
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
    variants = [("full", "commitlog", None), ("projected", "commitlog", PROJECTION)]
    if floor_files:
        session.dataSource.register(_FloorSource.make(floor_files))
        variants.append(("floor", "bench_floor", None))
    out = {}
    try:
        for name, fmt, schema in variants:
            times, groups, total = [], 0, 0
            for _ in range(runs):
                t = time.perf_counter()
                reader = session.read.format(fmt).option("maxBytesPerPartition", str(max_bytes))
                if schema:
                    reader = reader.schema(schema)
                rows = reader.load(data_dir).groupBy("mqtt_topic").agg(
                    F.count("*").alias("n"), F.sum(F.length("body")).alias("b")
                ).collect()
                times.append(round(time.perf_counter() - t, 3))
                groups, total = len(rows), sum(r.n for r in rows)
            out[name] = {"scan_groupby_s": times, "groups": groups, "rows": total}
    finally:
        session.stop()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_spark")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--max-bytes-per-partition", type=int, default=32 << 20)
    p.add_argument("--dir", default=None, help="where the temporary store goes (removed afterwards)")
    p.add_argument("--floor", action="store_true", help="also time Spark alone over pre-decoded Arrow data")
    args = p.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench_spark_", dir=args.dir)
    try:
        result = {"records": args.records}
        result.update(write_store(root, args.records))
        result.update(decode_outside_spark(root, args.max_bytes_per_partition))
        floor_files = write_floor_files(root, args.max_bytes_per_partition, root) if args.floor else None
        runs = spark_runs(root, args.runs, args.max_bytes_per_partition, floor_files)
        for name, r in runs.items():
            assert r["rows"] == args.records, (name, r["rows"], args.records)
            r["records_per_s"] = round(args.records / min(r["scan_groupby_s"]))
        result.update({
            "full": runs["full"],
            "projected": runs["projected"],
            **({"floor": runs["floor"]} if "floor" in runs else {}),
            "records_per_s": runs["full"]["records_per_s"],
            "records_per_s_projected": runs["projected"]["records_per_s"],
            "target": 700_000,
            "load_average_1m": round(os.getloadavg()[0], 2),
        })
        print(json.dumps(result))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
