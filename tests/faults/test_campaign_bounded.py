"""The bounded fault campaign of `make test` (the full one is `make faults`, docs/RELIABILITY.md).

Two kill rounds under mixed load, a 20,000-frame fuzz burst on every
listener, slowloris and ACL bypass attempts: each against a real `mqgate
serve` and real clients (paho-mqtt, the C++ client, the 5.x gRPC client).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import fuzz  # noqa: E402
import hostile  # noqa: E402
import kills  # noqa: E402
from campaign_server import CampaignServer  # noqa: E402

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def kill_result(tmp_path_factory):
    return kills.run(tmp_path_factory.mktemp("kills"), kills.KillParams(rounds=2, load_min=1.0, load_max=2.0, seed=3,
                                                                        drain_timeout=30, tx_settle=1))


def test_kill_rounds_lose_no_acknowledged_message(kill_result):
    r = kill_result
    assert len(r["rounds"]) == 2
    assert all(rnd["undelivered_after_drain"] == 0 for rnd in r["rounds"]), r["rounds"]
    for q in ("qos1", "qos2"):
        assert r["mqtt"][q]["acked"] > 0 and r["mqtt"][q]["lost"] == 0, r["mqtt"]
        assert r["mqtt"][q]["order_violations"] == 0, r["mqtt"]
    assert r["native"]["acked"] > 0 and r["native"]["lost"] == 0 and r["native"]["order_violations"] == 0, r["native"]
    assert r["timers"]["acked"] > 0 and r["timers"]["lost"] == 0, r["timers"]
    assert r["timers"]["duplicates_with_other_uniq_key"] == 0, r["timers"]
    t = r["transactions"]
    assert t["halves"] > 0 and t["lost"] == 0 and t["rolled_back_but_visible"] == 0, t
    assert r["tracebacks"] == []


def test_kill_rounds_deliver_qos2_exactly_once(kill_result):
    # with paho's own resend-PUBLISH-after-PUBREL bug corrected (mqtt_load._PahoClient)
    assert kill_result["mqtt"]["qos2"]["duplicates"] == 0, kill_result["mqtt"]["qos2"]


def test_fuzz_burst_and_hostile_clients(tmp_path):
    hostile.raise_nofile()
    server = CampaignServer(tmp_path / "fuzz", http=True, ha=True)
    server.start()
    try:
        f = fuzz.run(server, 20_000, seed=5, log=lambda m: None)
    finally:
        code = server.proc.proc.poll() if server.proc and server.proc.proc else None
        server.stop()
    assert f["server_alive"], f"server ended with {code}; its log ends:\n{server.log()[-4000:]}"
    assert f["tracebacks"] == [], f["tracebacks"]
    assert f["frames_total"] >= 20_000 and set(f["frames"]) == {"mqtt", "ws", "remoting", "http", "ha"}
    assert f["canary"]["failures"] == 0 and f["canary"]["round_trips"] > 0, f["canary"]

    acl = tmp_path / "acl"
    acl.write_text(hostile.ACL_FILE)
    server = CampaignServer(tmp_path / "hostile", mqtt_extra=f'connectTimeout = 2.0\naclFile = "{acl}"')
    server.start()
    try:
        s = hostile.slowloris(server, 500, 2.0)
        a = hostile.acl_bypass(server)
        tracebacks = server.tracebacks()
    finally:
        server.stop()
    assert s["opened"] == 500 and s["closed_by_server"] == 500, s
    assert s["canary"]["failures"] == 0, s["canary"]
    assert a["leaks"] == 0, a
    assert tracebacks == []
