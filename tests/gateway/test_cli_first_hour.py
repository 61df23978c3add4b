"""The command line as a new user meets it in the first hour: `--version`,
start-up errors, listeners. Real `python -m gateway` processes."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from serve_process import ServeProcess, free_port

ROOT = Path(__file__).resolve().parents[2]


def run_mqgate(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=timeout)


def test_version_is_the_package_metadata_version():
    r = run_mqgate("--version")
    assert r.returncode == 0, r.stderr
    kernels = len(re.findall(r'^    "[a-z_/]+\.py",$', (ROOT / "setup.py").read_text(), re.M))  # setup.py's KERNELS
    assert r.stdout.strip() == f"mqgate {version('mqgate')} (kernels: compiled ({kernels} modules))"
    pure = subprocess.run([sys.executable, "-m", "gateway", "--version"], capture_output=True, text=True,
                          env={**os.environ, "MQGATE_PURE_PYTHON": "1"}, timeout=60)
    assert pure.stdout.strip() == f"mqgate {version('mqgate')} (kernels: pure Python (MQGATE_PURE_PYTHON))"


# ---- listeners: each one on or off by itself ----------------------------------------------

def make_self_signed(d: Path) -> tuple[Path, Path]:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", "server.key", "-out", "server.crt", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   cwd=d, check=True, capture_output=True)
    return d / "server.crt", d / "server.key"


def paho_round_trip(port: int, *, ca: Path | None = None, transport: str = "tcp",
                    auth: tuple[str, str] | None = None) -> bytes:
    """Subscribe, publish QoS 1 to ourselves, return the payload received."""
    import queue

    import paho.mqtt.client as mqtt

    got: queue.Queue = queue.Queue()
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="first-hour", transport=transport)
    if ca is not None:
        c.tls_set(ca_certs=str(ca))
    if auth is not None:
        c.username_pw_set(*auth)
    c.on_message = lambda _c, _u, msg: got.put(msg.payload)
    c.connect("127.0.0.1", port, keepalive=30)
    c.loop_start()
    try:
        c.subscribe("fh/t", qos=1)[1]
        time.sleep(0.2)  # the SUBACK; a QoS 1 publish after it is delivered
        c.publish("fh/t", b"hello", qos=1).wait_for_publish(10)
        return got.get(timeout=10)
    finally:
        c.disconnect()
        c.loop_stop()


NO_NATIVE = ("--namesrv-port", "0", "--broker-port", "0")


def test_a_tls_only_server_starts_its_tls_listener(tmp_path):
    cert, key = make_self_signed(tmp_path)
    tls = free_port()
    cfg = tmp_path / "tls.toml"
    cfg.write_text(f'[mqtt]\nport = 0\nwsPort = 0\nwssPort = 0\ntlsPort = {tls}\ncertFile = "{cert}"\nkeyFile = "{key}"\n'
                   f"sysInterval = 0\n")
    with ServeProcess(tmp_path / "data", "--config", str(cfg), *NO_NATIVE) as srv:
        assert srv.ports == {"mqtt-tls": tls}
        assert paho_round_trip(tls, ca=cert) == b"hello"


def test_a_websocket_only_server_starts_its_websocket_listener(tmp_path):
    ws = free_port()
    with ServeProcess(tmp_path / "data", "--mqtt-port", "0", "--ws-port", str(ws), *NO_NATIVE) as srv:
        assert srv.ports == {"mqtt-ws": ws}
        assert paho_round_trip(ws, transport="websockets") == b"hello"


def test_tls_port_without_a_certificate_is_a_configuration_error(tmp_path):
    cfg = tmp_path / "tls.toml"
    cfg.write_text("[mqtt]\nport = 0\ntlsPort = 8883\n")
    r = run_mqgate("serve", "--config", str(cfg), "--data-dir", str(tmp_path / "data"), *NO_NATIVE)
    assert r.returncode == 2
    assert "tlsPort" in r.stderr and "certFile" in r.stderr


# ---- paths in the configuration file ------------------------------------------------------

def test_relative_paths_in_the_file_are_relative_to_its_folder(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    elsewhere = tmp_path / "elsewhere"  # the working directory: nothing of the server's is here
    elsewhere.mkdir()
    make_self_signed(conf)
    assert run_mqgate("passwd", str(conf / "users.txt"), "alice", "-b", "secret").returncode == 0
    (conf / "acl.txt").write_text("user alice\ntopic readwrite fh/#\n")
    tls = free_port()
    (conf / "mqgate.toml").write_text(
        f'dataDir = "data"\n[mqtt]\nport = 0\nwsPort = 0\nwssPort = 0\ntlsPort = {tls}\nsysInterval = 0\n'
        f'certFile = "server.crt"\nkeyFile = "server.key"\npasswordFile = "users.txt"\naclFile = "acl.txt"\n'
        f'allowAnonymous = false\n')
    srv = ServeProcess(conf / "data", "--config", "../conf/mqgate.toml", *NO_NATIVE, cwd=elsewhere,
                       data_dir_flag=False)
    with srv:
        assert srv.ports == {"mqtt-tls": tls}
        assert paho_round_trip(tls, ca=conf / "server.crt", auth=("alice", "secret")) == b"hello"
    assert (conf / "data" / "commitlog").is_dir()
    assert list(elsewhere.iterdir()) == []


# ---- start-up errors: one line, exit 2 for configuration, 1 for the running server ---------

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|WARNING) ")


def error_lines(stderr: str) -> list[str]:
    """stderr without the INFO/WARNING log lines of a normal start."""
    return [line for line in stderr.splitlines() if line.strip() and not LOG_LINE.match(line)]


@pytest.mark.parametrize("toml, words", [
    ("[mqtt]\nmaxConection = 5\n", ["[mqtt]", "maxConection", "did you mean 'maxConnections'"]),
    ("[namesrv]\nlistenPrt = 9\n", ["[namesrv]", "listenPrt"]),
    ('[mqtt]\ncertFile = "/nonexistent/server.crt"\n', ["[mqtt]", "/nonexistent/server.crt"]),
    ('[mqtt]\naclFile = "/nonexistent/acl.txt"\n', ["aclFile", "/nonexistent/acl.txt"]),
    ('[mqtt]\npasswordFile = "/nonexistent/pw"\n', ["passwordFile", "/nonexistent/pw"]),
    ("[mqtt]\nmaxKeepalive = 'x'\n", ["[mqtt]", "maxKeepalive"]),
    ("[broker]\nbrokerNmae = 'x'\n", ["brokerNmae", "brokerName", "docs/CONFIG.md"]),
    ("[mqtt\n", ["c.toml"]),
])
def test_configuration_errors_are_one_line_before_any_port_is_bound(tmp_path, toml, words):
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    ns = free_port()  # the name server would be the first thing bound
    r = run_mqgate("serve", "--config", str(cfg), "--data-dir", str(tmp_path / "data"), "--namesrv-port", str(ns),
                   "--broker-port", "0", "--mqtt-port", "0", "--ws-port", "0")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr  # no log line either: nothing started
    assert lines[0].startswith("mqgate: ")
    for w in words:
        assert w in lines[0]
    assert not (tmp_path / "data").exists()


def test_a_port_in_use_is_one_line_naming_the_port_and_exit_1(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_mqgate("serve", "--data-dir", str(tmp_path / "data"), "--mqtt-port", str(port), "--ws-port", "0",
                       *NO_NATIVE)
        assert r.returncode == 1, r.stderr
        (line,) = error_lines(r.stderr)
        assert line.startswith("mqgate: ") and f"port {port}" in line and "in use" in line
        assert "--mqtt-port" in line
        r = run_mqgate("serve", "--data-dir", str(tmp_path / "data2"), "--namesrv-port", str(port),
                       "--broker-port", "0", "--mqtt-port", "0", "--ws-port", "0")
        assert r.returncode == 1, r.stderr
        (line,) = error_lines(r.stderr)
        assert f"port {port}" in line and "name server" in line


def test_a_locked_data_directory_is_one_line_and_exit_1(tmp_path):
    data = tmp_path / "data"
    no_mqtt = ("--mqtt-port", "0", "--ws-port", "0")
    with ServeProcess(data, *no_mqtt, "--namesrv-port", str(free_port()), "--broker-port", "0"):
        r = run_mqgate("serve", "--data-dir", str(data), *no_mqtt, *NO_NATIVE)
        assert r.returncode == 1, r.stderr
        (line,) = error_lines(r.stderr)
        assert str(data) in line and "another" in line
        r = run_mqgate("serve", "--data-dir", str(data), *no_mqtt, *NO_NATIVE, "--log-level", "DEBUG")
        assert r.returncode == 1
        assert "Traceback" in r.stderr and r.stderr.splitlines()[-1] == line


# ---- anonymous access: Mosquitto 2's default -----------------------------------------------

def paho_connack(port: int, *, protocol: int | None = None) -> tuple[bool, str]:
    """(accepted, reason) of an anonymous CONNECT."""
    import queue

    import paho.mqtt.client as mqtt

    got: queue.Queue = queue.Queue()
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="anon",
                    protocol=protocol if protocol is not None else mqtt.MQTTv311)
    c.on_connect = lambda _c, _u, _f, rc, _p: got.put((not rc.is_failure, str(rc)))
    c.connect("127.0.0.1", port, keepalive=30)
    c.loop_start()
    try:
        return got.get(timeout=10)
    finally:
        c.disconnect()
        c.loop_stop()


def test_anonymous_clients_are_refused_on_a_non_loopback_listener_by_default(tmp_path):
    port = free_port()
    with ServeProcess(tmp_path / "data", "--host", "0.0.0.0", "--mqtt-port", str(port), "--ws-port", "0",
                      *NO_NATIVE) as srv:
        ok, reason = paho_connack(port)
        assert not ok and "authorized" in reason.lower(), reason
        out = srv.output()
    assert "anonymous MQTT clients are refused on 0.0.0.0" in out and "allowAnonymous = true" in out
    assert "no MQTT client can connect" in out


def test_allow_anonymous_true_accepts_them_on_any_listener_with_a_warning(tmp_path):
    port = free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text("[mqtt]\nallowAnonymous = true\n")
    with ServeProcess(tmp_path / "data", "--config", str(cfg), "--host", "0.0.0.0", "--mqtt-port", str(port),
                      "--ws-port", "0", *NO_NATIVE) as srv:
        assert paho_connack(port) == (True, "Success")
        out = srv.output()
    assert "WARNING" in out and "anonymous MQTT clients are accepted on 0.0.0.0" in out


def test_anonymous_clients_are_accepted_on_loopback_by_default(tmp_path):
    port = free_port()
    with ServeProcess(tmp_path / "data", "--mqtt-port", str(port), "--ws-port", "0", *NO_NATIVE) as srv:
        assert paho_connack(port) == (True, "Success")
        assert "anonymous MQTT" not in srv.output()


def test_telemetry_without_the_spark_extra_is_one_line():
    """`mqgate telemetry` without pyarrow (the Spark extra) printed an ImportError traceback."""
    code = ("import sys; sys.modules['pyarrow'] = None\n"  # as if the extra were not installed
            "from gateway.__main__ import main; sys.exit(main(['telemetry', '--data-dir', 'd', '--out', 'o']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == ["mqgate telemetry: pyarrow not installed: it needs the Spark extra, "
                                     "pip install 'mqgate[spark]' (make run installs it)"]
