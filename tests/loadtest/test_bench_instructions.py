"""loadtest.bench_instructions: callgrind's instruction counts per fanned-in message."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_instructions_per_message_of_mosquitto_from_two_runs_under_callgrind():
    run = subprocess.run([sys.executable, "-m", "loadtest.bench_instructions", "--targets", "mosquitto",
                          "--count", "40", "--publishers", "2"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    m = result["targets"]["mosquitto"]
    assert [r["messages"] for r in m["runs"]] == [40, 80]
    assert all(r["delivered"] == r["messages"] and r["lost"] == 0 for r in m["runs"])
    first, second = (r["instructions"] for r in m["runs"])
    # a run of a C broker costs millions of instructions; the extra 40 messages cost some thousands each
    assert 1_000_000 < first < second
    assert m["instructions_per_message"] == round((second - first) / 40) > 0


def test_settle_waits_until_the_broker_process_is_idle():
    from loadtest.bench_instructions import wait_idle

    busy_then_idle = "import time\nt = time.time()\nwhile time.time() - t < 1: pass\ntime.sleep(60)"
    busy = "while True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for code in (busy_then_idle, busy)]
    try:
        assert wait_idle(procs[0].pid, timeout=30, window=0.5)
        assert not wait_idle(procs[1].pid, timeout=1.5, window=0.5)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_paced_messages_of_mosquitto_each_a_read_of_its_own():
    """``--rate``: one publisher sends the messages one at a time (L0's
    shape); every message arrives and the difference of the two runs is
    the cost of one more message."""
    run = subprocess.run([sys.executable, "-m", "loadtest.bench_instructions", "--targets", "mosquitto",
                          "--count", "20", "--rate", "50"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["rate"] == 50 and result["publishers"] == 1
    m = result["targets"]["mosquitto"]
    assert [(r["messages"], r["delivered"], r["lost"]) for r in m["runs"]] == [(20, 20, 0), (40, 40, 0)]
    first, second = (r["instructions"] for r in m["runs"])
    assert 1_000_000 < first < second
    assert m["instructions_per_message"] == round((second - first) / 20) > 0
