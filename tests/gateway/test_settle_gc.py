"""What a server process does to its collector (in a child process: the
test runner's collector is left alone): `collect_before_start` collects and
freezes before anything listens, `settle_gc` freezes start-up once it is
ready and collects nothing then (a full collection there took 30-43 ms of
the event loop while the first clients were connected)."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import gc, weakref
from gateway.serve import GC_THRESHOLD, collect_before_start, settle_gc

class Node:
    pass

def cycle():
    a = Node()
    a.me = a
    return weakref.ref(a)

early = cycle()
collect_before_start()
assert early() is None   # the garbage made before start is freed
frozen = gc.get_freeze_count()
assert frozen > 1000, frozen   # the imports' objects
before = gc.get_threshold()
late = cycle()
settle_gc()
assert late() is not None   # no collection once the server is up: frozen with start-up
assert gc.get_freeze_count() > frozen
after = gc.get_threshold()
assert after == (GC_THRESHOLD, before[1], before[2]), (before, after)
later = cycle()
assert gc.collect() >= 1 and later() is None   # what comes later is still collected
print("ok")
"""


def test_collect_before_start_then_settle_freezes_and_raises_the_young_threshold():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


ORDER = """
import gateway.serve as serve
from gateway.config import ServeConfig
calls = []
serve.collect_before_start = lambda: calls.append("collect")
serve.trio.run = lambda *args, **kw: calls.append("trio.run")
serve.run_server(ServeConfig(namesrv_port=0), "namesrv")
assert calls == ["collect", "trio.run"], calls
print("ok")
"""


def test_a_server_process_collects_before_its_event_loop_starts():
    out = subprocess.run([sys.executable, "-c", ORDER], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
