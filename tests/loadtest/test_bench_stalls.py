"""`loadtest.bench_stalls`: a short latency run against ``mqgate serve`` with
the server's recorder, and the classifier of slow messages."""

import json
import subprocess
import sys

from loadtest.bench_stalls import summarize


def test_a_short_run_accounts_for_every_message_and_every_slow_one():
    out = subprocess.run([sys.executable, "-m", "loadtest.bench_stalls", "--qos", "1", "--count", "300",
                          "--warmup", "50", "--rate", "500"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["received"] == result["expected"] == 300
    assert sum(result["slow_by_cause"].values()) == result["slow"]
    assert result["latency_ms"]["p50"] <= result["latency_ms"]["p99"] <= result["latency_ms"]["max"]
    assert set(result["collections"]) == {"gen0", "gen1", "gen2"}
    assert 1 <= result["ticks_per_message"] < 50 and 1 <= result["steps_per_message"] < 100  # each message took some


def test_a_slow_message_is_put_down_to_what_the_server_did_meanwhile():
    ms = 1_000_000  # ns
    sent = [10 * ms, 20 * ms, 30 * ms, 40 * ms]
    arrived = [10 * ms + ms // 10, 22 * ms, 32 * ms, 42 * ms]  # the first is fast
    rec = {"settled_at": 0.0,
           "gcs": [(0.0205, 0.001, 0, 0.001, True)],  # (start s, wall s, generation, cpu s, main thread)
           "flushes": [(0.0305, 0.003, "full", 0.002)],  # (start s, wall s, kind, thread cpu s)
           "busy": [(0.0405, 0.0004, "gateway.listeners._serve._connection", 0.0004)],
           "blocked": []}
    result = summarize(rec, sent, arrived, slow_ms=0.5)
    assert result["slow"] == 3
    assert result["slow_by_cause"] == {"gc": 1, "flush": 1, "busy:_connection": 1}
    assert result["collections"] == {"gen0": 1, "gen1": 0, "gen2": 0}
    # a message that overlapped nothing the server recorded
    result = summarize({**rec, "gcs": [], "flushes": [], "busy": []}, sent, arrived, slow_ms=0.5)
    assert result["slow_by_cause"] == {"none": 3}
