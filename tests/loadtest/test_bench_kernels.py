"""`python -m loadtest.bench_kernels` runs every step, in both builds, and
prints one JSON object whose steps add up to its total."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

STEPS = ("decode", "to_message", "uniq_key", "encode", "outbound", "template")


@pytest.mark.parametrize("pure", [False, True])
def test_each_step_is_timed_in_the_build_asked_for(pure):
    env = dict(os.environ)
    env.pop("MQGATE_PURE_PYTHON", None)
    if pure:
        env["MQGATE_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-m", "loadtest.bench_kernels", "--count", "300", "--repeat", "1"],
                         capture_output=True, text=True, timeout=120, env=env, check=True)
    result = json.loads(out.stdout)
    assert result["count"] == 300
    assert result["kernels"].startswith("pure Python") == pure
    ns = result["ns_per_message"]
    assert set(ns) == {*STEPS, "total"}
    assert all(ns[s] > 0 for s in STEPS)
    assert abs(sum(ns[s] for s in STEPS) - ns["total"]) < 1
