"""`gateway.serve.settle_gc`, what a server process does to its collector once
it is ready (in a child process: the test runner's collector is left alone)."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import gc
from gateway.serve import GC_THRESHOLD, settle_gc
before = gc.get_threshold()
settle_gc()
after = gc.get_threshold()
assert gc.get_freeze_count() > 1000, gc.get_freeze_count()   # the start-up objects
assert after == (GC_THRESHOLD, before[1], before[2]), (before, after)
cycle = []
cycle.append(cycle)
del cycle
assert gc.collect() >= 1   # what comes later is still collected
print("ok")
"""


def test_settle_gc_freezes_start_up_and_raises_the_young_threshold():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
