"""`[proxy] grpcPort` and `--grpc-port`: the file, the flag, bad values, and a port that is taken."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.config import ConfigError, build_serve_config, load_file
from serve_process import ServeProcess, free_port


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "mqgate.toml"
    p.write_text(text)
    return p


def test_default_is_none_meaning_8081_and_the_file_then_the_flag_set_it(tmp_path):
    assert build_serve_config(None, {}).grpc_port is None
    data = load_file(write(tmp_path, "[proxy]\ngrpcPort = 18081\n"))
    assert build_serve_config(data, {}).grpc_port == 18081
    assert build_serve_config(data, {"grpc_port": 0}).grpc_port == 0


@pytest.mark.parametrize("text, words", [
    ("[proxy]\ngrpcPort = 70000", "[proxy] grpcPort must be a port number"),
    ("[proxy]\ngrpcPort = '8081'", "[proxy] grpcPort must be a port number"),
    ("[proxy]\ngrpcport = 1", "[proxy] unknown key 'grpcport'"),
    ("proxy = 1", "[proxy] must be a table"),
])
def test_bad_values_say_key_and_value(tmp_path, text, words):
    with pytest.raises(ConfigError) as e:
        build_serve_config(load_file(write(tmp_path, text)), {})
    assert words in str(e.value)


def test_a_grpc_port_given_and_taken_stops_the_start_with_one_line(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "gateway", "serve", "--data-dir", str(tmp_path / "data"),
                            "--namesrv-port", "0", "--broker-port", "0", "--mqtt-port", "0", "--ws-port", "0",
                            "--http-port", "0", "--grpc-port", str(port)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"mqgate: port {port} on 127.0.0.1 (RocketMQ 5 gRPC, --grpc-port or [proxy] grpcPort) is already in use; "
        f"stop the program using it or choose another port")


def test_the_default_grpc_port_taken_is_a_warning_and_the_rest_runs(tmp_path):
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 8081))  # taken by us, or already by someone else: taken either way
        held.listen()
    except OSError:
        pass
    try:
        broker_port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--data-dir", str(tmp_path / "data"),
                                 "--namesrv-port", "0", "--broker-port", str(broker_port), "--mqtt-port", "0",
                                 "--ws-port", "0", "--http-port", "0"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "ready:" in line or not line:
                break
        proc.terminate()
        proc.wait(30)
    finally:
        held.close()
    text = "".join(lines)
    assert "gRPC port 8081 on 127.0.0.1 is in use" in text and f"ready: broker={broker_port}" in text, text
    assert "grpc=" not in text


def test_the_ready_line_names_the_grpc_port(tmp_path):
    port = free_port()
    with ServeProcess(tmp_path / "data", "--namesrv-port", "0", "--mqtt-port", "0", "--ws-port", "0",
                      "--broker-port", "0", "--grpc-port", str(port)) as s:
        assert s.ports == {"grpc": port}
        assert f"RocketMQ 5 gRPC listening on 127.0.0.1:{port}" in s.output()


@pytest.mark.parametrize("text, words", [
    ('[proxy]\ncertFile = "a.crt"', "[proxy] certFile and keyFile go together"),
    ('[proxy]\ncertFile = "missing.crt"\nkeyFile = "missing.key"', "[proxy] certFile"),
    ('[proxy]\naclFile = "missing.toml"', "[proxy] aclFile"),
    ('[proxy]\naclFile = "bad.toml"', "accessKey and secretKey need at least 6 characters"),
])
def test_tls_and_acl_files_are_checked_at_start(tmp_path, text, words):
    from gateway.serve import proxy_security

    (tmp_path / "bad.toml").write_text('[[accounts]]\naccessKey = "ab"\nsecretKey = "cd"\n')
    cfg = build_serve_config(load_file(write(tmp_path, text)), {})
    with pytest.raises(ConfigError) as e:
        proxy_security(cfg)
    assert words in str(e.value) and "\n" not in str(e.value)
