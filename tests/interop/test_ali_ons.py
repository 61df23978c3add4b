"""The Node `ali-ons` client (npm, 3.12.0) against our name server and broker.

ali-ons sends SEND_MESSAGE_V2 (310) with JSON numbers and booleans in
extFields, claims to be JAVA version 121, sets no UNIQ_KEY, parses the
non-standard route JSON with JSON2 and ignores broker-to-client requests.
`make test` installs it (``make node-deps``: npm into ``.deps/ali-ons``);
MQGATE_ALI_ONS may name another directory holding node_modules/ali-ons.
Without it the test fails and says how to install it: a missing peer is
not a pass.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import create_topic

REPO = Path(__file__).resolve().parents[2]
PREFIX = Path(os.environ.get("MQGATE_ALI_ONS", REPO / ".deps" / "ali-ons"))
SCRIPT = Path(__file__).parent / "node" / "ali_ons_roundtrip.js"



def test_ali_ons_send_and_consume(cluster, names):
    assert shutil.which("node"), "node is not installed: run `make node-deps` (apt nodejs npm)"
    assert (PREFIX / "node_modules" / "ali-ons").is_dir(), f"ali-ons is not installed in {PREFIX}: run `make node-deps`"
    topic, group = names("OnsTopic"), names("ons")
    create_topic(cluster, topic, 4)
    env = dict(os.environ, NODE_PATH=str(PREFIX / "node_modules"))
    proc = subprocess.run(["node", str(SCRIPT), cluster.namesrv, topic, group, "6"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [s["status"] for s in result["sent"]] == ["SEND_OK"] * 6
    assert sorted(result["received"]) == [f"ons {i}" for i in range(6)]
