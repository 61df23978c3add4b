"""Spark scan benchmark: ``python -m loadtest.bench_spark [--records N] [--dir DIR]``.

Writes ``--records`` (default 1,000,000) MQTT-telemetry-like messages into a
temporary `core.store.MessageStore` (topic ``devices``, property
``mqttTopic=devices/d<k>/telemetry`` over 1,000 devices, a ~35-byte JSON body,
message index off so that writing is quick), then measures in local[2] one
query, ``format("commitlog")`` scan + ``groupBy(mqtt_topic)`` with count and
sum of body length, collected, over these column sets (``VARIANTS``):

- ``full``: all eleven columns of the source's schema. ``records_per_s``
  is this one; ``target`` is 700,000.
- ``telemetry``: the columns the telemetry job reads
  (`spark.telemetry.SOURCE_COLUMNS`, properties map included) and its
  ``mqttTopicFilter`` (``devices/+/telemetry``).
- ``projected``: ``mqtt_topic`` and ``body`` only. Python data sources get
  no column pruning from Spark; a user schema is how a query asks for less.
- with ``--floor``: ``floor``, the full query over the same rows already
  decoded (Arrow IPC files written beforehand, read back by a trivial data
  source): what Spark itself spends taking Arrow batches from Python workers
  and aggregating, i.e. the best any decoder could do.

Each variant first runs ``--warmup`` times (the first run of the session
also starts the Python workers; the JVM compiles its hot paths over the
first runs); those times are reported as ``warmup_s``. Then ``--runs``
rounds run every variant once in turn, so that other load on the machine
falls on all of them alike. Per timed run: seconds, ``/proc/loadavg`` (1
minute) before it, and CPU seconds of the JVM and of the Python workers
(read from /proc for the session's process tree). ``records_per_s`` is
records / the best run, ``records_per_s_median`` records / the median run.

Outside Spark, one core: ``plan_s`` (walking entry sizes to cut partitions,
on the driver) and ``decode_records_per_s`` (reading the planned ranges and
decoding all columns to Arrow).

Prints one JSON object. This file and ``bench_store`` are the ``loadtest``
files that import project code (the issue asks for them here).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from loadtest.procstat import cpu_seconds


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
TELEMETRY_FILTER = "devices/+/telemetry"


def variants(floor: bool) -> list[tuple[str, str, str | None, dict]]:
    """(name, format, user schema or None, extra options) of each measured scan."""
    from spark.telemetry import SOURCE_COLUMNS

    out = [
        ("full", "commitlog", None, {}),
        ("telemetry", "commitlog", SOURCE_COLUMNS, {"mqttTopicFilter": TELEMETRY_FILTER}),
        ("projected", "commitlog", PROJECTION, {}),
    ]
    if floor:
        out.append(("floor", "bench_floor", None, {}))
    return out


def load_1m() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds of ``root``'s descendants: the JVM and the Python processes under it.

    Live processes only, each with its waited-for children, so a worker that
    exits between two readings stays counted (in its parent) and none twice.
    """
    children: dict[int, list[tuple[int, str]]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append((int(name), comm))
    out = {"jvm": 0.0, "python_workers": 0.0}
    todo = [root]
    while todo:
        for pid, comm in children.get(todo.pop(), []):
            out["jvm" if comm == "java" else "python_workers"] += cpu_seconds(pid) or 0.0
            todo.append(pid)
    return out


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


def spark_runs(data_dir: str, records: int, runs: int, warmup: int, max_bytes: int,
               floor_files: list[str] | None) -> dict:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyspark
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
    if floor_files:
        session.dataSource.register(_FloorSource.make(floor_files))

    def run(fmt: str, schema: str | None, options: dict) -> dict:
        load = load_1m()
        cpu0 = tree_cpu(os.getpid())
        t = time.perf_counter()
        reader = session.read.format(fmt).option("maxBytesPerPartition", str(max_bytes)).options(**options)
        if schema:
            reader = reader.schema(schema)
        rows = reader.load(data_dir).groupBy("mqtt_topic").agg(
            F.count("*").alias("n"), F.sum(F.length("body")).alias("b")
        ).collect()
        s = time.perf_counter() - t
        cpu1 = tree_cpu(os.getpid())
        total = sum(r.n for r in rows)
        assert total == records, (fmt, schema, total, records)
        return {"s": round(s, 3), "load_1m": load, "groups": len(rows),
                **{f"cpu_{k}_s": round(cpu1[k] - cpu0[k], 2) for k in cpu0}}

    todo = variants(bool(floor_files))
    out = {name: {"columns": schema or "all", "options": opts, "warmup_s": [], "runs": []}
           for name, _fmt, schema, opts in todo}
    try:
        for name, fmt, schema, opts in todo:
            for _ in range(warmup):
                out[name]["warmup_s"].append(run(fmt, schema, opts)["s"])
        for _ in range(runs):
            for name, fmt, schema, opts in todo:
                out[name]["runs"].append(run(fmt, schema, opts))
    finally:
        session.stop()
    for r in out.values():
        times = [x["s"] for x in r["runs"]]
        r["best_s"], r["median_s"] = min(times), round(statistics.median(times), 3)
        r["records_per_s"] = round(records / r["best_s"])
        r["records_per_s_median"] = round(records / r["median_s"])
        r["load_1m_range"] = [min(x["load_1m"] for x in r["runs"]), max(x["load_1m"] for x in r["runs"])]
        for k in ("cpu_jvm_s", "cpu_python_workers_s"):
            r[f"median_{k}"] = round(statistics.median(x[k] for x in r["runs"]), 2)
    out["spark_version"] = pyspark.__version__
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_spark")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=5, help="timed rounds (every variant once per round)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs of each variant first")
    p.add_argument("--max-bytes-per-partition", type=int, default=32 << 20)
    p.add_argument("--dir", default=None, help="where the temporary store goes (removed afterwards)")
    p.add_argument("--floor", action="store_true", help="also time Spark alone over pre-decoded Arrow data")
    args = p.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench_spark_", dir=args.dir)
    try:
        with open("/proc/loadavg") as f:
            result = {"records": args.records, "cores": os.cpu_count(), "loadavg_start": f.read().strip()}
        result.update(write_store(root, args.records))
        result.update(decode_outside_spark(root, args.max_bytes_per_partition))
        floor_files = write_floor_files(root, args.max_bytes_per_partition, root) if args.floor else None
        runs = spark_runs(root, args.records, args.runs, args.warmup, args.max_bytes_per_partition, floor_files)
        with open("/proc/loadavg") as f:
            loadavg_end = f.read().strip()
        result.update({
            **runs,
            "records_per_s": runs["full"]["records_per_s"],
            "records_per_s_median": runs["full"]["records_per_s_median"],
            "records_per_s_telemetry": runs["telemetry"]["records_per_s"],
            "target": 700_000,
            "loadavg_end": loadavg_end,
        })
        print(json.dumps(result))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
