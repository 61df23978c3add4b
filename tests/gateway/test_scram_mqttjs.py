"""MQTT.js (npm ``mqtt`` 5.x) against the gateway's SCRAM enhanced authentication
(issue 14): the exchange at CONNECT through MQTT.js's ``handleAuth`` hook,
the server's proof in the CONNACK, a re-authentication, a QoS 1 round trip;
and the refusals MQTT.js reports (0x87 wrong password, 0x8C unknown method).

``make node-deps`` installs MQTT.js into ``.deps/mqttjs``; MQGATE_MQTTJS may
name another directory holding node_modules/mqtt. Without it the test fails
and says how to install it: a missing peer is not a pass."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import argon2
import pytest
import trio

from gateway.auth import passwd_main

REPO = Path(__file__).resolve().parents[2]
PREFIX = Path(os.environ.get("MQGATE_MQTTJS", REPO / ".deps" / "mqttjs"))
SCRIPT = Path(__file__).parent / "node" / "mqttjs_scram.js"
CHEAP = argon2.PasswordHasher.from_parameters(argon2.profiles.CHEAPEST)


@pytest.fixture
def pwfile(tmp_path):
    path = tmp_path / "passwd"
    assert passwd_main([str(path), "alice", "-b", "wonder-land-7", "--scram"], hasher=CHEAP) == 0
    return path


async def run_mqttjs(port: int, method: str, user: str, password: str) -> dict:
    assert shutil.which("node"), "node is not installed: run `make node-deps` (apt nodejs npm)"
    assert (PREFIX / "node_modules" / "mqtt").is_dir(), f"MQTT.js is not installed in {PREFIX}: run `make node-deps`"
    env = dict(os.environ, NODE_PATH=str(PREFIX / "node_modules"))
    with trio.fail_after(30):
        proc = await trio.run_process(["node", str(SCRIPT), str(port), method, user, password], env=env,
                                      capture_stdout=True, capture_stderr=True, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


@pytest.mark.parametrize("method", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_mqttjs_scram_connect_reauthenticate_and_round_trip(gateway_factory, pwfile, method):
    async with gateway_factory({"sysInterval": 0, "passwordFile": str(pwfile)}) as (broker, gw, port):
        result = await run_mqttjs(port, method, "alice", "wonder-land-7")
    assert result == {"connack": 0, "serverProved": True, "reauth": 0, "reauthProved": True,
                      "received": "after re-auth", "error": None}


@pytest.mark.parametrize("method, password, code", [
    ("SCRAM-SHA-256", "wrong", 0x87), ("SCRAM-SHA-1", "wonder-land-7", 0x8C)])
async def test_mqttjs_sees_the_refusals(gateway_factory, pwfile, method, password, code):
    async with gateway_factory({"sysInterval": 0, "passwordFile": str(pwfile)}) as (broker, gw, port):
        result = await run_mqttjs(port, method, "alice", password)
    assert result["connack"] is None and result["error"] == code, result
