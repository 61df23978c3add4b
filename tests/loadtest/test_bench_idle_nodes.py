"""`python -m loadtest.bench_idle_nodes` at a size that runs in seconds.

The 100,000-connection run (issue 13) spreads its connections over gateway
nodes because one process here may open at most 20,000 files. Asserted:
every connection got its CONNACK on the node it was sent to, and the
figures the README quotes are in the output. Never a timing.
"""

import json
import subprocess
import sys


def test_idle_connections_spread_over_gateway_nodes_all_get_their_connack():
    out = subprocess.run([sys.executable, "-m", "loadtest.bench_idle_nodes", "--connections", "300",
                          "--nodes", "2", "--procs", "2"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    assert (rec["opened"], rec["refused"], rec["errors"]) == (300, 0, [])
    assert rec["nodes"] == 2 and len(rec["node_rss_after_mib"]) == 2
    assert all(after > 0 for after in rec["node_rss_after_mib"])
    assert rec["connects_per_s"] > 0 and rec["rss_per_1000_mib"] is not None
