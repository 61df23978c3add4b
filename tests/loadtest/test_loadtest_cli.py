"""The command line and its outputs: JSON lines, report.html, PNG charts;
loopback only; bounded runs; a clear failure when our server does not start."""

import json
import socket
import subprocess
import sys

import pytest

from loadtest import NotLoopback, bench, brokers, report, require_loopback, run_scenario


def _cli(*args, timeout=90):
    return subprocess.run([sys.executable, "-m", "loadtest", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_run_with_compare_writes_jsonl_html_and_pngs(tmp_path, mosquitto):
    assert brokers.available("amqtt"), "amqtt is not installed: run `make install-dev`"
    out = tmp_path / "out"
    proc = _cli("run", "fan-in", "--host", "127.0.0.1", "--port", str(mosquitto.port),
                "--name", "target", "--broker-pid", str(mosquitto.pid),
                "--compare", "mosquitto,amqtt", "--publishers", "2", "--count", "100",
                "--qos", "1", "--timeout", "30", "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["broker"] for r in lines] == ["target", "mosquitto", "amqtt"]
    assert all(r["schema"] == "mqgate-loadtest/1" and r["lost"] == 0 for r in lines)
    assert report.read_jsonl(out / "results.jsonl") == lines
    ratios = report.read_jsonl(out / "ratios.jsonl")
    assert {r["other"] for r in ratios} == {"mosquitto", "amqtt"}
    assert all(r["delivered_rate"] > 0 for r in ratios)
    assert "target / amqtt" in proc.stderr
    html = (out / "report.html").read_text()
    for png in ("fan-in-throughput.png", "fan-in-latency.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png in html


def test_rabbitmq_is_started_on_free_ports_measured_and_cleaned_up(tmp_path):
    """RabbitMQ's MQTT plugin as a compared broker: its own node, config and
    Erlang port mapper in a temp dir; the Erlang VM is what gets measured."""
    assert brokers.available("rabbitmq"), "rabbitmq-server is not installed: run `make install-dev`"
    out = tmp_path / "out"
    proc = _cli("run", "fan-in", "--compare", "rabbitmq", "--publishers", "2", "--count", "200",
                "--qos", "1", "--timeout", "60", "--out", str(out), "--no-progress", timeout=180)
    assert proc.returncode == 0, proc.stderr
    (rec,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert rec["broker"] == "rabbitmq" and rec["lost"] == 0 and rec["delivered"] == 400
    assert rec["broker_cpu_s"] and rec["broker_cpu_s"] > 0  # the VM, not its start script
    left = subprocess.run(["pgrep", "-f", "mqgate-bench-"], capture_output=True, text=True).stdout
    assert not left.strip(), f"RabbitMQ processes left behind: {left}"


def test_payload_sweep_gives_one_record_per_size(tmp_path, mosquitto):
    proc = _cli("run", "payload", "--port", str(mosquitto.port), "--sizes", "20,2000",
                "--count", "20", "--qos", "1", "--out", str(tmp_path), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    labels = [json.loads(line)["label"] for line in proc.stdout.splitlines()]
    assert labels == ["payload-20", "payload-2000"]


def test_report_is_rebuilt_from_jsonl(tmp_path, mosquitto):
    rec = run_scenario("qos", mosquitto.host, mosquitto.port, broker="m", count=20, qos=2)
    report.write_jsonl([rec], tmp_path / "results.jsonl")
    proc = _cli("report", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "qos-latency.png").exists()


def test_the_readme_table_has_a_row_per_scenario_and_ratios_to_the_reference(tmp_path, mosquitto):
    """Two 'brokers' (the same Mosquitto measured twice under two names): a
    throughput row, a latency row and a storm row, each with its ratio."""
    recs = []
    for name in ("a", "b"):
        recs.append(run_scenario("fan-in", mosquitto.host, mosquitto.port, broker=name, label="S1",
                                 publishers=2, count=50, qos=0))
        recs.append(run_scenario("latency", mosquitto.host, mosquitto.port, broker=name, label="L0",
                                 count=50, rate=500, qos=0))
        recs.append(run_scenario("storm", mosquitto.host, mosquitto.port, broker=name, label="S5",
                                 connections=20, count=0, broker_pid=mosquitto.pid))
    report.write_jsonl(recs, tmp_path / "results.jsonl")
    assert _cli("report", str(tmp_path)).returncode == 0
    lines = (tmp_path / "table.md").read_text().splitlines()
    assert lines[0] == "| scenario | a | b | a / b |"
    rows = {line.split(" | ")[0].lstrip("| ").split()[0]: line.split(" | ") for line in lines[2:]}
    assert set(rows) == {"S1", "L0", "S5"}
    assert "msgs/s, lost 0" in rows["S1"][1] and rows["S1"][3].rstrip(" |").endswith("x")
    assert "p99" in rows["L0"][1] and rows["L0"][3].rstrip(" |").endswith("x p99")
    a5, b5 = (r for r in recs if r["label"] == "S5")
    assert f"{a5['rss_per_1000_mib']:.2f} MiB/1000" in rows["S5"][1]
    if b5["rss_per_1000_mib"]:  # a second storm on the same Mosquitto may reuse its memory (0 MiB: no ratio)
        assert rows["S5"][3].startswith(f"{a5['rss_per_1000_mib'] / b5['rss_per_1000_mib']:.2f}x memory")
    else:
        assert rows["S5"][3].rstrip(" |") == "-"
    a1, b1 = (r for r in recs if r["label"] == "S1")
    assert rows["S1"][3].rstrip(" |") == f"{a1['delivered_rate'] / b1['delivered_rate']:.2f}x"


@pytest.mark.parametrize("host", ["8.8.8.8", "10.0.0.1", "192.168.1.1"])
def test_non_loopback_hosts_are_refused(host):
    with pytest.raises(NotLoopback):
        require_loopback(host)
    proc = _cli("run", "fan-in", "--host", host, "--port", "1883")
    assert proc.returncode == 2
    assert "loopback" in proc.stderr


def test_loopback_hosts_are_accepted():
    require_loopback("127.0.0.1")
    require_loopback("localhost")


def test_run_against_a_silent_server_stops_at_the_deadline():
    # accepts TCP but never answers CONNECT: the run must end by itself
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        rec = run_scenario("fan-in", "127.0.0.1", srv.getsockname()[1], publishers=1,
                           count=10, timeout=3)
    assert not rec["ok"]
    assert rec["error"]


def test_bench_says_clearly_when_our_server_does_not_start(tmp_path, monkeypatch):
    monkeypatch.setitem(brokers._COMMANDS, "ours",
                        lambda port, tmp, opts: [sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(bench.BenchError, match="our server did not start"):
        bench.run(["ours", "mosquitto"], tmp_path)


def test_bench_standard_set_is_scaled():
    set_ = {sid: s for sid, s, _sync in bench.standard(scale=0.01)}
    assert list(set_) == ["S1", "S2", "S3", "S4", "S5", "L0", "L1"]
    assert set_["S1"].count == 200 and set_["S5"].connections == 50
    assert [sid for sid, _s, sync in bench.standard() if sync] == ["S2"]
