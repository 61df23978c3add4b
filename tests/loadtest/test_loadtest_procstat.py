"""procstat: a baseline taken with steady_rss waits for a process that is still growing."""

from __future__ import annotations

import subprocess
import sys

from loadtest.procstat import rss_bytes, steady_rss

GROWS_LATE = """
import sys, time
time.sleep(0.3)
block = bytearray(64 << 20)  # zero pages: touch them so they count
for i in range(0, len(block), 4096):
    block[i] = 1
print("grown", flush=True)
time.sleep(30)
"""


def test_steady_rss_waits_for_a_process_still_growing():
    proc = subprocess.Popen([sys.executable, "-c", GROWS_LATE], stdout=subprocess.PIPE)
    try:
        early = rss_bytes(proc.pid)
        steady = steady_rss(proc.pid, quiet=0.5, limit=10)
        assert proc.stdout.readline() == b"grown\n"  # it had grown when steady_rss returned
        assert steady - early >= 60 << 20
        assert abs(rss_bytes(proc.pid) - steady) < 4 << 20
    finally:
        proc.kill()
        proc.wait()


def test_steady_rss_of_a_gone_process_is_none():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert steady_rss(proc.pid, quiet=0.1, limit=0.5) is None
