"""Tiny versions of every scenario against a real Mosquitto (and amqtt).

Only the accounting is asserted, never a timing. The same calls work against
any broker: see ``loadtest.run_scenario``.
"""

import json

import pytest

from loadtest import RECORD_KEYS, assert_exact_delivery, run_scenario


def _run(broker, name, **kw):
    kw.setdefault("timeout", 30)
    rec = run_scenario(name, broker.host, broker.port, broker=broker.name,
                       broker_pid=broker.pid, **kw)
    assert set(rec) == set(RECORD_KEYS)
    json.loads(json.dumps(rec))  # one JSON line
    return rec


def test_fan_in_qos1_delivers_everything_once(mosquitto):
    rec = _run(mosquitto, "fan-in", publishers=3, count=300, qos=1)
    assert_exact_delivery(rec)
    assert rec["sent"] == 900 and rec["delivered"] == 900
    assert [r["sent"] for r in rec["per_publisher"]] == [300, 300, 300]
    assert rec["latency_ms"]["count"] == 900
    assert rec["broker_cpu_s"] is not None and rec["broker_rss_peak_mib"] > 0
    assert rec["generator_cpu_s"] > 0


def test_fan_in_qos0_counts_add_up(mosquitto):
    rec = _run(mosquitto, "fan-in", publishers=2, count=500, qos=0)
    assert rec["ok"] and rec["sent"] == 1000
    assert rec["duplicated"] == 0
    assert rec["delivered"] + rec["lost"] == rec["sent"]


def test_fan_out_every_subscriber_gets_every_message(mosquitto):
    rec = _run(mosquitto, "fan-out", subscribers=3, count=200, qos=1)
    assert_exact_delivery(rec)
    assert rec["delivered"] == 600


def test_p2p_pairs(mosquitto):
    rec = _run(mosquitto, "p2p", publishers=2, count=200, qos=1)
    assert_exact_delivery(rec)
    assert rec["expected"] == 400


def test_shared_subscription_splits_without_loss(mosquitto):
    rec = _run(mosquitto, "shared", publishers=2, subscribers=2, count=200, qos=1,
               drain=0.5)
    assert rec["params"]["protocol"] == 5
    assert_exact_delivery(rec, allow_out_of_order=True)


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_qos_levels(mosquitto, qos):
    rec = _run(mosquitto, "qos", publishers=1, count=200, qos=qos)
    assert_exact_delivery(rec)  # loopback, one subscriber, small: nothing drops


def test_payload_size(mosquitto):
    rec = _run(mosquitto, "payload", publishers=1, count=50, qos=1, payload=100_000)
    assert_exact_delivery(rec)


def test_persistent_session_gets_what_was_sent_while_away(mosquitto):
    rec = _run(mosquitto, "persistent", publishers=1, count=100, qos=1)
    assert_exact_delivery(rec)


def test_storm_counts_connections(mosquitto):
    rec = _run(mosquitto, "storm", connections=100, count=0, workers=2)
    assert rec["ok"]
    assert rec["connections"] == 100
    assert rec["connects_per_s"] > 0
    assert rec["rss_per_1000_mib"] is not None


def test_fixed_rate_latency(mosquitto):
    rec = _run(mosquitto, "latency", publishers=1, count=100, rate=500, qos=0)
    assert_exact_delivery(rec)
    lat = rec["latency_ms"]
    assert lat["count"] == 100
    assert lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]


@pytest.mark.parametrize("qos", [1, 2])
def test_paho_mode(mosquitto, qos):
    rec = _run(mosquitto, "fan-in", publishers=2, count=100, qos=qos, mode="paho")
    assert_exact_delivery(rec)


def test_paho_mode_mqtt5_shared(mosquitto):
    rec = _run(mosquitto, "shared", publishers=1, subscribers=2, count=100, qos=1,
               mode="paho", drain=0.5)
    assert_exact_delivery(rec, allow_out_of_order=True)


def test_amqtt_fan_in_qos1(amqtt):
    rec = _run(amqtt, "fan-in", publishers=2, count=100, qos=1)
    assert_exact_delivery(rec)


def test_amqtt_fan_out_qos0(amqtt):
    rec = _run(amqtt, "fan-out", subscribers=2, count=100, qos=0)
    assert rec["ok"] and rec["duplicated"] == 0
    assert rec["delivered"] + rec["lost"] == rec["expected"] == 200


def test_a_storm_past_one_source_address_spreads_its_connections(mosquitto, monkeypatch):
    """Past ~28,000 connections one source address runs out of ports; a storm
    that large connects from 127.0.0.2-65 (here the threshold is lowered)."""
    from loadtest import runner, worker
    from loadtest.scenarios import ClientSpec

    cfg = worker.RunConfig(host=mosquitto.host, port=mosquitto.port, qos=0, payload=0, inflight=1, version=4,
                           mode="raw", deadline_ns=0, drain=0, bucket=0.1, spread_sources=True)
    socks = worker._connect_batch([ClientSpec("idle", f"spread-{i}") for i in range(32)], cfg)
    try:
        sources = {s.getsockname()[0] for s in socks}
        assert len(sources) > 1 and all(a.startswith("127.0.0.") and 2 <= int(a.rsplit(".", 1)[1]) <= 65
                                        for a in sources)
    finally:
        for s in socks:
            s.close()
    monkeypatch.setattr(runner, "SOURCE_LIMIT", 50)
    rec = _run(mosquitto, "storm", connections=100, count=0, workers=2)
    assert rec["ok"] and rec["connections"] == 100


def test_a_storm_larger_than_the_brokers_file_limit_says_so_before_it_starts(mosquitto):
    from loadtest.procstat import open_files_limit

    limit = open_files_limit(mosquitto.pid)
    assert limit, "Mosquitto's limit on open files is readable"
    rec = _run(mosquitto, "storm", connections=limit, count=0, workers=2)
    assert not rec["ok"] and rec["connections"] is None
    assert f"may open {limit} files" in rec["error"] and f"storm of {limit} connections" in rec["error"]
