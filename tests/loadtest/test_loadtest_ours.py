"""Tiny versions of every load scenario against our own server (`mqgate serve`).

The same calls `make bench` makes, at a size that runs in seconds. Only the
accounting is asserted (nothing lost, duplicated or out of order where the
protocol promises it), never a timing.
"""

import pytest

from loadtest import RECORD_KEYS, assert_exact_delivery, run_scenario


def _run(broker, name, **kw):
    kw.setdefault("timeout", 60)
    kw.setdefault("drain", 5.0)
    rec = run_scenario(name, broker.host, broker.port, broker=broker.name, broker_pid=broker.pid, **kw)
    assert set(rec) == set(RECORD_KEYS) and rec["error"] is None, rec["error"]
    return rec


def test_fan_in_qos0_to_a_wildcard_subscriber(ours):
    rec = _run(ours, "fan-in", publishers=4, count=200, qos=0)
    assert rec["duplicated"] == 0 and rec["out_of_order"] == 0
    assert rec["delivered"] + rec["lost"] == rec["sent"] == 800


def test_fan_in_qos1_loses_nothing(ours):
    rec = _run(ours, "fan-in", publishers=4, count=200, qos=1)
    assert_exact_delivery(rec)
    assert rec["delivered"] == 800


def test_fan_out_qos0(ours):
    rec = _run(ours, "fan-out", subscribers=3, count=200, qos=0)
    assert rec["duplicated"] == 0 and rec["delivered"] + rec["lost"] == rec["expected"] == 600


def test_p2p_pairs(ours):
    assert_exact_delivery(_run(ours, "p2p", publishers=2, count=100, qos=1))


def test_shared_subscription(ours):
    rec = _run(ours, "shared", publishers=2, subscribers=2, count=100, qos=1)
    assert_exact_delivery(rec, allow_out_of_order=True)


@pytest.mark.parametrize("qos", [1, 2])
def test_qos_levels(ours, qos):
    assert_exact_delivery(_run(ours, "qos", publishers=1, count=200, qos=qos))


def test_large_payloads(ours):
    assert_exact_delivery(_run(ours, "payload", publishers=1, count=20, qos=1, payload=100_000))


def test_persistent_session_gets_what_was_sent_while_away(ours):
    assert_exact_delivery(_run(ours, "persistent", publishers=1, count=100, qos=1))


def test_storm_of_idle_connections(ours):
    rec = _run(ours, "storm", connections=100, count=0, workers=2)
    assert rec["connections"] == 100 and rec["connects_per_s"] > 0
    assert rec["rss_per_1000_mib"] is not None


def test_fixed_rate_latency(ours):
    rec = _run(ours, "latency", publishers=1, count=100, rate=200, qos=1)
    assert_exact_delivery(rec)
    assert rec["latency_ms"]["count"] == 100


@pytest.mark.parametrize("qos", [1, 2])
def test_paho_clients(ours, qos):
    assert_exact_delivery(_run(ours, "fan-in", publishers=2, count=100, qos=qos, mode="paho"))
