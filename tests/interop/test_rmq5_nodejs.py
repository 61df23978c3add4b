"""The npm `rocketmq-client-nodejs` (1.0.8, RocketMQ 5.x over gRPC) against a real `mqgate serve`.

`make test` installs it (``make node-deps``: npm into
``.deps/rocketmq-client-nodejs``); MQGATE_RMQ5_NODE may name another
directory holding node_modules/rocketmq-client-nodejs. Without it the test
fails and says how to install it: a missing peer is not a pass.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from serve_process import ServeProcess, free_port

REPO = Path(__file__).resolve().parents[2]
PREFIX = Path(os.environ.get("MQGATE_RMQ5_NODE", REPO / ".deps" / "rocketmq-client-nodejs"))
SCRIPT = Path(__file__).parent / "node" / "rmq5_roundtrip.js"


def test_nodejs_5x_producer_and_simple_consumer(tmp_path):
    assert shutil.which("node"), "node is not installed: run `make node-deps` (apt nodejs npm)"
    assert (PREFIX / "node_modules" / "rocketmq-client-nodejs").is_dir(), \
        f"rocketmq-client-nodejs is not installed in {PREFIX}: run `make node-deps`"
    port = free_port()
    suffix = uuid.uuid4().hex[:8]
    with ServeProcess(tmp_path / "data", "--namesrv-port", "0", "--broker-port", "0", "--mqtt-port", "0",
                      "--ws-port", "0", "--grpc-port", str(port)) as server:
        # HOME: the client writes its log under ~/logs/rocketmq
        env = dict(os.environ, NODE_PATH=str(PREFIX / "node_modules"), HOME=str(tmp_path))
        proc = subprocess.run(["node", str(SCRIPT), f"127.0.0.1:{port}", f"node5_{suffix}", f"node5_g_{suffix}"],
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{proc.stderr[-3000:]}\nserver log:\n{server.output()[-3000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    got = {m["body"]: m for m in out["got"]}
    assert sorted(m["id"] for m in out["got"]) == sorted(out["sent"])
    normal = got["from node"]
    assert (normal["tag"], normal["keys"], normal["properties"], normal["attempt"]) == ("TagN", ["k1"], {"color": "blue"}, 1)
    assert got["fifo from node"]["group"] == "g1"
    # received with a 2 s invisible time and not acked: it comes back, second attempt
    assert [(m["body"], m["attempt"]) for m in out["first"]] == [("not acked", 1)]
    assert [(m["body"], m["attempt"]) for m in out["again"]] == [("not acked", 2)]
