"""`mqgate serve|namesrv|broker` as a user runs them: real processes, real ports."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from serve_process import ServeProcess, free_port

NO_MQTT = ("--mqtt-port", "0", "--ws-port", "0")


def cluster_info(namesrv_port: int) -> str:
    """GET_BROKER_CLUSTER_INFO from a name server, over a real connection."""
    import trio

    from core.remoting import RemotingCommand, RequestCode
    from core.remoting.client import open_remoting_client

    async def ask():
        async with open_remoting_client() as client:
            resp = await client.invoke(f"127.0.0.1:{namesrv_port}", RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            return resp.body.decode()

    return trio.run(ask)


def test_serve_logs_endpoints_and_stops_cleanly_on_sigterm(tmp_path):
    ns, br = free_port(), free_port()
    data = tmp_path / "data"
    srv = ServeProcess(data, *NO_MQTT, "--namesrv-port", str(ns), "--broker-port", str(br)).start()
    try:
        assert srv.ports == {"namesrv": ns, "broker": br}
        assert (data / "abort").exists()  # running: a crash now would be detected
    finally:
        code = srv.stop(signal.SIGTERM)
    out = srv.output()
    assert code == 0, out
    assert f"name server listening on 127.0.0.1:{ns}" in out
    assert f"broker remoting listening on 127.0.0.1:{br}" in out
    assert "stopped cleanly" in out
    assert not (data / "abort").exists()  # clean shutdown marked
    assert (data / "commitlog").is_dir() and (data / "config" / "topics.json").exists()


def test_sigint_and_restart_on_the_same_data(tmp_path):
    data = tmp_path / "data"
    for _ in range(2):
        srv = ServeProcess(data, *NO_MQTT, "--namesrv-port", "0", "--broker-port", str(free_port())).start()
        assert srv.stop(signal.SIGINT) == 0
        assert "opened (after a clean shutdown, " in srv.output()


def test_a_killed_server_is_recovered_as_an_abnormal_exit(tmp_path):
    data = tmp_path / "data"
    srv = ServeProcess(data, *NO_MQTT, "--namesrv-port", "0", "--broker-port", str(free_port())).start()
    srv.proc.kill()
    srv.proc.wait()
    again = ServeProcess(data, *NO_MQTT, "--namesrv-port", "0", "--broker-port", str(free_port())).start()
    try:
        assert "opened (after a crash, " in again.output()
    finally:
        assert again.stop() == 0


def _held_port_after_a_free_one():
    """A listening socket on port p + 1 where p is free, for the test below."""
    import socket

    while True:
        held = socket.socket()
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1] - 1
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port))
        except OSError:
            held.close()
            continue
        held.listen()
        return held, port


def test_a_taken_listen_port_plus_one_moves_the_ha_port_with_a_warning(tmp_path):
    held, br = _held_port_after_a_free_one()  # another program holds the default HA port (listen port + 1)
    with held:
        srv = ServeProcess(tmp_path / "data", *NO_MQTT, "--namesrv-port", "0", "--broker-port", str(br)).start()
        try:
            assert srv.ports["broker"] == br
            assert f"HA port {br + 1} (listen port + 1) is in use" in srv.output()
        finally:
            assert srv.stop() == 0


def test_namesrv_role_runs_only_the_name_server(tmp_path):
    ns = free_port()
    srv = ServeProcess(tmp_path / "data", "--namesrv-port", str(ns), role="namesrv").start()
    try:
        assert srv.ports == {"namesrv": ns}
    finally:
        assert srv.stop() == 0


def test_broker_role_registers_with_a_separate_name_server(tmp_path):
    ns = free_port()
    with ServeProcess(tmp_path / "ns", "--namesrv-port", str(ns), role="namesrv") as names:
        br = free_port()
        broker = ServeProcess(tmp_path / "b", "--broker-port", str(br), "--namesrv", f"127.0.0.1:{ns}", role="broker").start()
        try:
            assert broker.ports == {"broker": br}
            assert f"name servers 127.0.0.1:{ns}" in broker.output()
            assert f"127.0.0.1:{br}" in cluster_info(ns)  # the name server knows the broker
        finally:
            assert broker.stop() == 0


@pytest.mark.parametrize("args, words", [
    (["--config", "/nonexistent.toml"], "does not exist"),
    (["--mqtt-port", "70000"], "port number"),
])
def test_bad_configuration_is_refused_with_a_reason(tmp_path, args, words):
    r = subprocess.run([sys.executable, "-m", "gateway", "serve", "--data-dir", str(tmp_path), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and words in r.stderr


def test_unknown_broker_key_is_refused(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[broker]\nbrokerNmae = 'x'\n")
    r = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--data-dir", str(tmp_path),
                        *NO_MQTT, "--namesrv-port", "0", "--broker-port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "brokerNmae" in r.stderr and "brokerName" in r.stderr


def test_broker_table_namesrv_addr_is_used(tmp_path):
    ns = free_port()
    with ServeProcess(tmp_path / "ns", "--namesrv-port", str(ns), role="namesrv"):
        cfg = tmp_path / "b.toml"
        cfg.write_text(f'[broker]\nnamesrvAddr = "127.0.0.1:{ns}"\n')
        br = free_port()
        broker = ServeProcess(tmp_path / "b", "--config", str(cfg), "--broker-port", str(br), role="broker").start()
        try:
            assert f"127.0.0.1:{br}" in cluster_info(ns)
        finally:
            assert broker.stop() == 0


@pytest.mark.parametrize("line, words", [
    ('timerMaxDelaySec = "10"', ["[broker] timerMaxDelaySec", "1..2147483", "'10'"]),
    ("timerMaxDelaySec = 3000000", ["[broker] timerMaxDelaySec", "1..2147483", "3000000"]),
    ('timerRollWindowSlot = "x"', ["[broker] timerRollWindowSlot", "'x'"]),
    ('timerWheelEnable = "false"', ["[broker] timerWheelEnable", "true or false"]),
    ("timerPrecisionMs = 10", ["[broker] timerPrecisionMs", "100, 200, 500 or 1000"]),
])
def test_bad_timer_key_is_refused_at_start(tmp_path, line, words):
    """A bad timer value stops `serve` before anything listens, never at the first timer send."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[broker]\n{line}\n")
    data = tmp_path / "data"
    r = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--data-dir", str(data),
                        *NO_MQTT, "--namesrv-port", "0", "--broker-port", str(free_port())],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert all(w in r.stderr for w in words), r.stderr
    assert "ready:" not in r.stderr and not data.exists()  # refused before the store was opened


def test_delayed_messages_due_during_a_restart_reach_sessions_and_the_retained_index(tmp_path):
    """A `$delayed` publish that comes due while the server is down fires at the
    next start, after the gateway has restored its sessions and hooks: the
    persistent session gets it and it is retained under its real topic
    (Mosquitto clients, a real `mqgate serve`)."""
    data = tmp_path / "data"
    mqtt = free_port()
    args = ("--mqtt-port", str(mqtt), "--ws-port", "0", "--namesrv-port", "0", "--broker-port", "0")

    def client(tool: str, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([tool, "-h", "127.0.0.1", "-p", str(mqtt), *argv], capture_output=True, timeout=30)

    srv = ServeProcess(data, *args).start()
    try:
        client("mosquitto_sub", "-c", "-i", "keep", "-q", "1", "-t", "r/#", "-W", "1")  # subscribes, leaves
        assert client("mosquitto_pub", "-q", "1", "-r", "-t", "$delayed/2/r/late", "-m", "x").returncode == 0
    finally:
        assert srv.stop(signal.SIGTERM) == 0
    time.sleep(3)  # due while the server is down
    srv = ServeProcess(data, *args).start()
    try:
        got = client("mosquitto_sub", "-c", "-i", "keep", "-q", "1", "-t", "r/#", "-C", "1", "-W", "10", "-v")
        assert got.stdout.decode().split() == ["r/late", "x"], got
        retained = client("mosquitto_sub", "-t", "r/late", "-C", "1", "-W", "10", "-v")
        assert retained.stdout.decode().split() == ["r/late", "x"], retained
    finally:
        srv.stop(signal.SIGTERM)
