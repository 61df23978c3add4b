"""A heap probe for a running `mqgate` process: what its memory is made of (issue 17).

Not part of the server: Python imports this file at start-up only when its
folder is on PYTHONPATH, and it does something only when
``MQGATE_PROBE_DIR`` names a folder. Then SIGUSR2 writes there, named by
process id and probe number (``PID-N``):

- ``PID-N.json``: RSS (total, anonymous, file-backed), after a full
  collection the count of live objects by type (the 120 most common),
  pymalloc's allocated blocks; with ``MQGATE_PROBE_TRIM=1`` also RSS after
  glibc's ``malloc_trim(0)`` (what the C allocator held free);
- ``PID-N.malloc.txt``: ``sys._debugmallocstats()`` (pymalloc arenas, pools in use
  and unused: fragmentation);
- ``PID-N.tm``: a tracemalloc snapshot, if the process runs with
  ``PYTHONTRACEMALLOC`` (compare two with ``Snapshot.compare_to``).

Usage, from the tree's root::

    PYTHONPATH=tests/faults/heap_probe MQGATE_PROBE_DIR=/tmp/probe \\
        python tests/faults/campaign.py --only fuzz --fuzz-frames 200000 --out /tmp/f &
    kill -USR2 <pid of the mqgate serve process>   # as often as wanted

A probe stops the process for about as long as a full collection takes
(~0.1 s with 100,000 live objects, more with tracemalloc). Without the probe
loaded, SIGUSR2 ends a `mqgate` process.
"""

from __future__ import annotations

import os

_DIR = os.environ.get("MQGATE_PROBE_DIR")


def _rss() -> dict[str, int]:
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return {k: int(fields[k].split()[0]) for k in ("VmRSS", "RssAnon", "RssFile")}


def _probe(signum, frame) -> None:  # noqa: ARG001 - a signal handler's signature
    import collections
    import ctypes
    import gc
    import json
    import sys
    import time
    import tracemalloc

    _probe.n += 1
    name = os.path.join(_DIR, f"{os.getpid()}-{_probe.n}")
    t0 = time.monotonic()
    out: dict = {"pid": os.getpid(), "time": time.time(), "rss_kib": _rss()}
    gc.collect()
    objects = gc.get_objects()  # not the ones gc.freeze() moved out of sight (start-up's)
    counts = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in objects)
    out["objects"] = len(objects)
    del objects
    out["types"] = counts.most_common(120)
    out["pymalloc_blocks"] = sys.getallocatedblocks()
    if tracemalloc.is_tracing():
        tracemalloc.take_snapshot().dump(name + ".tm")
        out["traced_bytes"] = tracemalloc.get_traced_memory()
    if os.environ.get("MQGATE_PROBE_TRIM"):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        out["rss_kib_after_trim"] = _rss()
    # _debugmallocstats writes to the C stderr: point descriptor 2 at the file meanwhile
    fd = os.open(name + ".malloc.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    saved = os.dup(2)
    try:
        os.dup2(fd, 2)
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
    out["seconds"] = round(time.monotonic() - t0, 3)
    with open(name + ".json", "w") as f:
        json.dump(out, f)


if _DIR:
    import signal

    os.makedirs(_DIR, exist_ok=True)
    _probe.n = 0
    signal.signal(signal.SIGUSR2, _probe)
