"""Stress: the telemetry stream job's start, and java.io.OptionalDataException (issue 20).

Run by hand from the repository root (not part of ``make test``). One JVM,
or one per run with ``--fresh``; 5-60 s a run on 2 shared cores:

    python tests/spark/stress_stream_start.py --runs 1 --mode lost-node
    python tests/spark/stress_stream_start.py --runs 20 --mode together --share
    python tests/spark/stress_stream_start.py --runs 40 --fresh --mode starts --timeline --tree 6f01314~1
    python tests/spark/stress_stream_start.py --runs 6 --fresh --mode starts --timeline
    python tests/spark/stress_stream_start.py --runs 15 --mode together --pairs 4
    python tests/spark/stress_stream_start.py --runs 40 --mode job --tree 6f01314~1

It prints a JSON line per run and a JSON summary; exit 1 if a run failed.

The cause (Spark 4.3.0's Python data source code, checked in its jar):
every function Spark builds for one registered Python data source shares
the registered class's ``envVars``, one java.util.HashMap
(``UserDefinedPythonDataSource.createPythonFunction`` passes
``dataSourceCls.envVars``), and each streaming query's source, created in
that query's own thread, puts four keys into it with no lock
(``PythonStreamingSourceRunner.init``). Two sources created at one moment
can put the same new key at once: HashMap loses a node but counts it, so
its size is one more than its entries, for good. Every task of every query
carries the map (the partition reader function), and Java's deserialization
reads past the entries: ``OptionalDataException`` in ``HashMap.readObject``
in the first micro-batch of both queries. Whether the queries share a
DataFrame does not matter (they share the registration). Only the first
puts into a fresh map can collide: a new process, or here a new
``register`` before each run.

Checks per run: the registered ``commitlog`` source's map after the run
(``size()`` against its entries, and a Java serialization round trip) and
the run's own error. ``--timeline`` also reads Spark's log: was the second
query started before the first had put its keys (``overlap``), and how far
apart the two sources put them (``runner_gap_ms``).

Modes:
- ``job``: ``spark.telemetry.run_stream`` of the tree, ``--stream --once``.
- ``starts``: only the job's start: its two queries, started as the tree's
  run_stream starts them, stopped once both sources exist.
- ``together``: the job's queries started from one thread each behind a
  barrier (``--share``: each pair over one DataFrame, the old job's shape;
  ``--pairs N``: N copies of the two queries), stopped once sources exist.
- ``one-by-one``: the same queries, started by `spark.stream_start`.
- ``lost-node``: the job, after leaving the fresh map as a lost node leaves
  it (size one more than its entries, set by reflection).

``--tree REV`` runs ``spark/`` of that git revision (extracted to a temp
directory put first on the driver's and workers' path; ``core`` is this
tree's). ``--burn N`` keeps N busy-looping processes running meanwhile.

What it showed (2026-11-27, 2 cores shared with 4 other jobs, load 5-8;
"old" = 6f01314~1, one shared DataFrame; "main" = 6f01314, two DataFrames,
started back to back; "fixed" = started by `spark.stream_start`):
- ``lost-node``: 2/2 runs fail with CI's exception and CI's frames
  (ObjectInputStream.readObject0:1756 < readObject:509 < readObject:467 <
  HashMap.readObject:1550, ... ShuffleMapTask.runTask:90); map size 6,
  5 entries.
- A natural collision, two queries released together over one DataFrame
  (``together --share``, its first version, which also ran the batch): 1 of
  20 runs left the map at size 6 with 5 entries (its Java round trip throws
  OptionalDataException) and failed its first micro-batch with
  OptionalDataException. The later version (stopped once the sources
  exist): 0 of 30 with ``--share``, 0 of 29 without; eight queries released
  together (``--pairs 4``): 0 of 15. The window is a few instructions of
  ``HashMap.putVal``; a barrier in Python only aligns the starts to
  milliseconds.
- The job itself never failed here: ``job``, in one session, old 0/40 and
  main 0/40; ``job --fresh`` old 0/3, main 0/3 (the previous session: 12
  fresh runs of old, 0 failures). Why so rare, from ``--timeline``: in a
  warm session the first query has put its keys long before the second
  starts (old: overlap in 1 of 8 runs, the first, cold one); in a fresh
  process (CI's case) the two sources are always created together (old,
  ``--fresh --mode starts --timeline``: overlap in 86 of 86 runs; of 80,
  the two runners put their keys a median 67 ms apart, 21 within 2 ms,
  the closest 58 us apart) and a collision needs them within a few
  instructions: none of those 86 runs corrupted the map.
- Fixed: overlap 0/8 in one session and 0/6 fresh; the second source puts
  its keys 1.2 to 10.7 s after the first, so the puts cannot meet.

So the cause is shown (the exact exception and frames from the mechanism,
and one natural occurrence), the old job's own failure was not made
frequent, and the fix removes the concurrency the race needs, in every run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def extract_tree(rev: str, into: str) -> str:
    """``spark/`` of git revision ``rev`` under ``into``; returns the directory to put on the path."""
    os.makedirs(into, exist_ok=True)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "spark"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def write_log(data_dir: str, count: int) -> None:
    """A small commit log: ``count`` telemetry messages and one bad payload (a reject)."""
    from core.store import MessageStore, StoreConfig
    from core.store.message import Message

    store = MessageStore(StoreConfig(store_path_root_dir=data_dir, mapped_file_size_commit_log=1 << 20,
                                     mapped_file_size_consume_queue=20 * 1000, message_index_enable=False))
    store.start()
    try:
        for i in range(count):
            store.append(Message(topic="devices", body=json.dumps({"temp": i % 30}).encode(),
                                 properties={"mqttTopic": f"devices/d{i % 5}/telemetry"},
                                 born_timestamp=1_700_000_040_000 + i * 10))
        store.append(Message(topic="devices", body=b"not json", properties={"mqttTopic": "devices/d0/telemetry"},
                             born_timestamp=1_700_000_040_000))
    finally:
        store.shutdown()


def env_map_state(session, name: str = "commitlog") -> dict:
    """The registered source's shared envVars map: its size, its entries, and a Java round trip."""
    jvm = session.sparkContext._jvm
    m = session._jsparkSession.sessionState().dataSourceManager().lookupDataSource(name).dataSourceCls().envVars()
    size, keys = m.size(), sorted(m.keySet())
    try:
        jvm.org.apache.spark.util.Utils.deserialize(jvm.org.apache.spark.util.Utils.serialize(m))
        round_trip = "ok"
    except Exception as e:  # Py4JJavaError: the Java exception's class is in its text
        round_trip = next((w for w in str(e).split() if "Exception" in w), "error").rstrip(":")
    return {"size": size, "entries": len(keys), "keys": keys, "java_round_trip": round_trip}


def lose_a_node(session, name: str = "commitlog") -> None:
    """Leave the registered source's envVars map as two racing first puts of one key leave it.

    Both puts saw the key's bin empty and linked their node; one node is
    lost, both counted: ``size`` is one more than the entries. Set through
    reflection (Spark's launcher opens java.util to unnamed modules).
    """
    jvm = session.sparkContext._jvm
    m = session._jsparkSession.sessionState().dataSourceManager().lookupDataSource(name).dataSourceCls().envVars()
    field = jvm.java.lang.Class.forName("java.util.HashMap").getDeclaredField("size")
    field.setAccessible(True)
    field.setInt(m, field.getInt(m) + 1)


def java_frames(error: str, limit: int = 6) -> list:
    """The first frames after the first OptionalDataException in an error's text."""
    lines = error.splitlines()
    first = next((i for i, ln in enumerate(lines) if "java.io.OptionalDataException" in ln), None)
    if first is None:
        return []
    frames = [ln.strip() for ln in lines[first + 1:first + 1 + limit]]
    task = next((ln.strip() for ln in lines[first:] if "Task.runTask" in ln), None)  # who deserialized
    return frames + ([task] if task else [])


def job_writers(session, telemetry, args, share: bool = False, pairs: int = 1) -> list:
    """The job's two writers (aggregates, rejects), built with the tree's own functions; ``pairs`` times.

    ``share``: each pair over one parsed DataFrame, as the job was before 6f01314.
    """
    def rows():
        return telemetry.parsed(telemetry._source(session.readStream, args), args.device_level,
                                telemetry._fields(args))

    writers = []
    for pair in range(pairs):
        shared = rows() if share else None
        ckpt = os.path.join(args.out, f"_checkpoints{pair}")
        frames = {"aggregates": telemetry.aggregates((shared or rows()).withWatermark("ts", args.watermark),
                                                     args.window),
                  "rejects": telemetry.rejects(shared or rows())}
        writers += [df.writeStream.format("parquet").outputMode("append").partitionBy("date")
                    .option("path", os.path.join(args.out, f"{name}{pair}"))
                    .option("checkpointLocation", os.path.join(ckpt, name))
                    .trigger(availableNow=True).queryName(f"telemetry_{name}{pair}") for name, df in frames.items()]
    return writers


def _this_trees_stream_start():
    """This tree's spark/stream_start.py, whichever tree's spark/ is on the path."""
    spec = importlib.util.spec_from_file_location("_stream_start", os.path.join(ROOT, "spark", "stream_start.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stop_once_created(queries) -> None:
    """Wait (with a deadline) until every query has created its source, then stop them all."""
    created = _this_trees_stream_start().source_created
    deadline = time.monotonic() + 120
    while not all(created(q) for q in queries) and time.monotonic() < deadline:
        time.sleep(0.02)
    for q in queries:
        q.stop()


def start_together(writers) -> list:
    """Start the writers from one thread each, released at one moment."""
    barrier = threading.Barrier(len(writers))
    queries, errors = [], []

    def start(writer):
        barrier.wait(timeout=60)
        try:
            queries.append(writer.start())
        except Exception as e:  # reported with the run
            errors.append(e)

    threads = [threading.Thread(target=start, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if errors:
        raise errors[0]
    return queries


def start_as_the_tree_does(telemetry, writers) -> list:
    """Old trees start the queries back to back; trees with `spark.stream_start` one by one."""
    start_one_by_one = getattr(telemetry, "start_one_by_one", None)
    return start_one_by_one(writers) if start_one_by_one else [w.start() for w in writers]


def one_run(session, spark_pkg, telemetry, mode: str, share: bool, data: str, out: str, pairs: int = 1) -> dict:
    spark_pkg.register(session)  # a fresh registration: a fresh envVars map, as in a fresh process
    if mode == "lost-node":
        lose_a_node(session)
    args = telemetry.parse_args(["--data-dir", data, "--out", out, "--stream", "--once"])
    began = time.monotonic()
    error = None
    try:
        if mode in ("job", "lost-node"):
            telemetry.run_stream(session, args)
        elif mode == "starts":
            stop_once_created(start_as_the_tree_does(telemetry, job_writers(session, telemetry, args)))
        elif mode == "one-by-one":
            writers = job_writers(session, telemetry, args, share, pairs)
            stop_once_created(_this_trees_stream_start().start_one_by_one(writers))
        else:
            stop_once_created(start_together(job_writers(session, telemetry, args, share, pairs)))
    except Exception as e:  # the job's own error, kept with the run
        error = str(e)
    state = env_map_state(session)
    return {
        "seconds": round(time.monotonic() - began, 1),
        "optional_data_exception": bool(error and "OptionalDataException" in error),
        "error": error.strip().splitlines()[0][:200] if error else None,
        "frames": java_frames(error) if error else [],
        "map_corrupt": state["size"] != state["entries"] or state["java_round_trip"] != "ok",
        **state,
    }


TIMELINE_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.f.ref = f
appender.f.type = File
appender.f.name = f
appender.f.fileName = {path}
appender.f.layout.type = PatternLayout
appender.f.layout.pattern = %d{{HH:mm:ss.nnnnnn}} [%t] %c{{1}}: %m%n
logger.runner.name = org.apache.spark.sql.execution.python.streaming.PythonStreamingSourceRunner
logger.runner.level = info
logger.micro.name = org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution
logger.micro.level = info
"""


class Timeline:
    """When each query was started and when its source runner put its keys, from Spark's own log lines.

    - ``start``: ``Starting <name> [id ...`` (the caller's ``start()``);
    - ``runner``: ``Initializing Python runner`` in the query's stream thread,
      logged just before ``PythonStreamingSourceRunner.init`` puts its keys.
    """

    def __init__(self, work: str):
        self.path = os.path.join(work, "timeline.log")
        self.config = os.path.join(work, "timeline-log4j2.properties")
        with open(self.config, "w") as f:
            f.write(TIMELINE_LOG4J.format(path=self.path))
        self._read = 0

    def events(self) -> dict:
        """{query name: {event: seconds of the day}} from the lines logged since the last call."""
        try:
            with open(self.path) as f:
                f.seek(self._read)
                lines = f.readlines()
                self._read = f.tell()
        except FileNotFoundError:
            return {}
        found: dict = {}
        for ln in lines:
            stamp, _, rest = ln.partition(" ")
            try:
                h, m, sec = stamp.split(":")
                t = int(h) * 3600 + int(m) * 60 + float(sec)
            except ValueError:
                continue
            if "MicroBatchExecution: Starting " in rest and "[id =" in rest:
                name = rest.split("MicroBatchExecution: Starting ", 1)[1].split(" [id", 1)[0]
                found.setdefault(name, {}).setdefault("start", t)
            elif "Initializing Python runner" in rest and "stream execution thread for " in rest:
                name = rest.split("stream execution thread for ", 1)[1].split(" [id", 1)[0]
                found.setdefault(name, {}).setdefault("runner", t)
        return found


def starts_overlap(events: dict) -> dict:
    """Was the second query started before the first had put its keys? And the gap between the puts."""
    queries = sorted((e for e in events.values() if "start" in e and "runner" in e), key=lambda e: e["start"])
    if len(queries) < 2:
        return {"overlap": None, "runner_gap_ms": None}
    first, second = queries[0], queries[1]
    return {"overlap": second["start"] < first["runner"],
            "runner_gap_ms": round((second["runner"] - first["runner"]) * 1000, 3)}


def run_in_session(opts, data: str, work: str) -> list:
    """``opts.runs`` runs in this process, one SparkSession (classes warm after the first run)."""
    import spark as spark_pkg
    from spark import telemetry
    from pyspark.sql import SparkSession

    timeline = Timeline(work) if opts.timeline else None
    builder = SparkSession.builder
    log4j = opts.log4j or (timeline and timeline.config)
    if log4j:
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j}")
    session = (builder.master("local[2]").appName("stress-stream-start")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    try:
        if not log4j:
            session.sparkContext.setLogLevel("OFF")
        results = []
        for i in range(opts.runs):
            r = one_run(session, spark_pkg, telemetry, opts.mode, opts.share, data, os.path.join(work, f"out{i}"),
                        opts.pairs)
            r["spark_from"] = telemetry.__file__
            if timeline:
                r.update(starts_overlap(timeline.events()))
            results.append(r)
            print(json.dumps({"run": i, **{k: v for k, v in r.items() if k != "keys"}}), flush=True)
        return results
    finally:
        session.stop()


def run_fresh(opts, data: str, spark_dir: str) -> list:
    """``opts.runs`` runs, each in a new process (a new JVM: cold classes, as in CI's runs of the job)."""
    results = []
    for i in range(opts.runs):
        argv = [sys.executable, os.path.abspath(__file__), "--runs", "1", "--mode", opts.mode, "--data", data,
                "--spark-dir", spark_dir, "--pairs", str(opts.pairs)] + (["--share"] if opts.share else []) + (
                    ["--timeline"] if opts.timeline else [])
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            out, _ = child.communicate(timeout=600)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        line = next((ln for ln in out.splitlines() if ln.startswith('{"run"')), None)
        r = json.loads(line) if line else {"error": f"child exited {child.returncode} without a result",
                                          "optional_data_exception": False, "map_corrupt": False, "keys": None}
        r["run"] = i
        results.append(r)
        print(json.dumps(r), flush=True)
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--mode", choices=("job", "starts", "together", "one-by-one", "lost-node"), default="job")
    p.add_argument("--share", action="store_true", help="with --mode together: both queries over one DataFrame")
    p.add_argument("--pairs", type=int, default=1,
                   help="with --mode together / one-by-one: that many copies of the job's two queries")
    p.add_argument("--tree", default=None, help="git revision whose spark/ runs (default: this tree)")
    p.add_argument("--fresh", action="store_true", help="each run in a new process (a new JVM)")
    p.add_argument("--burn", type=int, default=0, help="busy-looping processes kept running meanwhile")
    p.add_argument("--messages", type=int, default=500)
    p.add_argument("--timeline", action="store_true",
                   help="from Spark's log: was the second query started before the first put its keys")
    p.add_argument("--log4j", default=None, help="a log4j2 properties file for the driver (else Spark logs nothing)")
    p.add_argument("--data", default=None, help=argparse.SUPPRESS)  # a --fresh child: the parent's log
    p.add_argument("--spark-dir", default=None, help=argparse.SUPPRESS)  # a --fresh child: where spark/ is
    opts = p.parse_args(argv)

    work = tempfile.mkdtemp(prefix="stress-stream-start-")
    burners = []
    try:
        spark_dir = opts.spark_dir or (extract_tree(opts.tree, os.path.join(work, "tree")) if opts.tree else ROOT)
        path = [spark_dir, ROOT] if spark_dir != ROOT else [ROOT]
        sys.path[:0] = path
        os.environ["PYTHONPATH"] = os.pathsep.join(path + [os.environ.get("PYTHONPATH", "")])  # the workers' path
        os.environ["PYSPARK_PYTHON"] = sys.executable
        data = opts.data
        if data is None:
            data = os.path.join(work, "data")
            write_log(data, opts.messages)
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(opts.burn)]
        results = run_fresh(opts, data, spark_dir) if opts.fresh else run_in_session(opts, data, work)
        summary = {
            "tree": opts.tree or "worktree", "spark_from": results[0].get("spark_from") if results else None,
            "mode": opts.mode, "share": opts.share, "pairs": opts.pairs, "fresh": opts.fresh, "burn": opts.burn, "runs": len(results),
            "optional_data_exception": sum(bool(r["optional_data_exception"]) for r in results),
            "map_corrupt": sum(bool(r["map_corrupt"]) for r in results),
            "other_errors": sum(bool(r["error"]) and not r["optional_data_exception"] for r in results),
        }
        if opts.timeline:
            gaps = sorted(abs(r["runner_gap_ms"]) for r in results if r.get("runner_gap_ms") is not None)
            summary.update({
                "overlapping_starts": sum(bool(r.get("overlap")) for r in results),
                "timeline_missing": sum(r.get("overlap") is None for r in results),
                "runner_gap_ms_min_median": [gaps[0], gaps[len(gaps) // 2]] if gaps else None,
            })
        print(json.dumps({"summary": summary}), flush=True)
        return 1 if summary["optional_data_exception"] or summary["map_corrupt"] or summary["other_errors"] else 0
    finally:
        for b in burners:
            b.kill()
            b.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
