"""`mqgate telemetry --stream` stopped with SIGINT in the middle of a micro-batch stops cleanly.

The job runs as its own process in its own process group, and the signal
goes to the whole group, as a Ctrl-C in a terminal does (the Python workers
of Spark get it too). Before the fix, PySpark's SIGINT handler cancelled
every running job, so the micro-batch under way died with whatever its
tasks were doing (SPARK_JOB_CANCELLED, an interrupted read) and the job
exited 1. A java.io.OptionalDataException in the first micro-batch, seen
here twice, had another cause: the two queries' sources created at one
moment (see spark.stream_start).
"""

import json
import os
import signal
import subprocess
import sys
import time

from core.store.message import Message

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _why(stderr: str) -> str:
    """The first error's own lines (a StreamingQueryException's text ends in its plan), then the tail."""
    lines = stderr.splitlines()
    first = next((i for i, ln in enumerate(lines) if ("Exception" in ln or "Traceback" in ln) and " WARN " not in ln),
                 None)
    head = "\n".join(lines[first:first + 40]) if first is not None else ""
    return f"{head}\n...\n{stderr[-1500:]}"


def test_sigint_during_a_micro_batch_stops_cleanly_and_the_next_start_goes_on(spark, make_store, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    store = make_store(data, 1 << 20)
    for i in range(40_000):  # a first micro-batch that takes seconds
        store.append(Message(topic="devices", body=json.dumps({"temp": i % 30, "seq": i}).encode(),
                             properties={"mqttTopic": f"devices/d{i % 20}/telemetry"},
                             born_timestamp=1_700_000_040_000 + i * 10))
    env = {**os.environ, "PYTHONPATH": ROOT, "PYSPARK_PYTHON": sys.executable}
    argv = [sys.executable, "-m", "spark.telemetry", "--data-dir", str(data), "--out", str(out), "--stream",
            "--trigger-interval", "1 second"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        planned = out / "_checkpoints" / "aggregates" / "offsets" / "0"
        deadline = time.monotonic() + 180
        while not planned.exists():  # the first micro-batch has been planned and runs now
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, _why(stderr)
    errors = [ln for ln in stderr.splitlines() if ("Exception" in ln or "Traceback" in ln) and " WARN " not in ln]
    assert not errors, _why(stderr)
    assert "rejects:" in stdout
    # the next start continues from the checkpoint
    from spark import telemetry

    assert telemetry.main(["--data-dir", str(data), "--out", str(out), "--stream", "--once"], session=spark) == 0
