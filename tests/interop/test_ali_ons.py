"""The Node `ali-ons` client (npm, 3.12.0) against our name server and broker.

ali-ons sends SEND_MESSAGE_V2 (310) with JSON numbers and booleans in
extFields, claims to be JAVA version 121, sets no UNIQ_KEY, parses the
non-standard route JSON with JSON2 and ignores broker-to-client requests.
Skipped unless Node and the package are installed::

    npm install --prefix ~/.cache/mqgate/ali-ons ali-ons@3.12.0

(or set MQGATE_ALI_ONS to a directory holding node_modules/ali-ons).
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import create_topic

PREFIX = Path(os.environ.get("MQGATE_ALI_ONS", Path.home() / ".cache/mqgate/ali-ons"))
SCRIPT = Path(__file__).parent / "node" / "ali_ons_roundtrip.js"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (PREFIX / "node_modules" / "ali-ons").is_dir(),
    reason="node or ali-ons not installed (npm install --prefix ~/.cache/mqgate/ali-ons ali-ons@3.12.0)",
)


def test_ali_ons_send_and_consume(cluster, names):
    topic, group = names("OnsTopic"), names("ons")
    create_topic(cluster, topic, 4)
    env = dict(os.environ, NODE_PATH=str(PREFIX / "node_modules"))
    proc = subprocess.run(["node", str(SCRIPT), cluster.namesrv, topic, group, "6"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [s["status"] for s in result["sent"]] == ["SEND_OK"] * 6
    assert sorted(result["received"]) == [f"ons {i}" for i in range(6)]
