"""``[http]`` and the users file: checked before start, one line when wrong;
``mqgate passwd --admin``; the default port already taken."""

from __future__ import annotations

import socket
import ssl
import subprocess
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from gateway.config import ConfigError, build_serve_config
from gateway.http import HttpSettings, Users, passwd_admin_main, read_users_file, run_http
from gateway.http.server import bind
from gateway.http.users import UsersFileError
from gateway.serve import check_http_config


def test_passwd_admin_adds_roles_changes_and_deletes_users(tmp_path, capsys):
    f = tmp_path / "users"
    assert passwd_admin_main(["--admin", str(f), "alice", "-b", "a"]) == 0
    assert passwd_admin_main(["--admin", str(f), "bob", "--role", "read-only", "-b", "b"]) == 0
    assert {u: r for u, (r, _h) in read_users_file(f).items()} == {"alice": "admin", "bob": "read-only"}
    assert f.stat().st_mode & 0o777 == 0o600
    assert passwd_admin_main(["--admin", str(f), "bob", "-D"]) == 0
    assert list(read_users_file(f)) == ["alice"]
    assert passwd_admin_main(["--admin", str(f), "bob", "-D"]) == 1
    assert "not found" in capsys.readouterr().err
    assert passwd_admin_main(["--admin", str(f), "x:y", "-b", "p"]) == 1
    assert passwd_admin_main(["--admin", str(f), "c", "--role", "root", "-b", "p"]) == 2


async def test_users_verify_roles_and_tokens_end_with_the_user(tmp_path):
    f = tmp_path / "users"
    passwd_admin_main(["--admin", str(f), "alice", "-b", "a"])
    users = Users(f, token_ttl=60)
    user = await users.verify("alice", "a")
    assert user is not None and user.admin
    assert await users.verify("alice", "wrong") is None
    token = users.issue_token(user)
    assert users.check_token(token) == user
    passwd_admin_main(["--admin", str(f), "alice", "-b", "new"])  # a new password ends old tokens
    assert users.check_token(token) is None
    assert await users.verify("alice", "new") is not None


def test_a_bad_users_file_names_its_line(tmp_path):
    f = tmp_path / "users"
    f.write_text("alice:superuser:$argon2id$x\n")
    with pytest.raises(UsersFileError, match=r"users:1: role 'superuser'"):
        read_users_file(f)
    cfg = build_serve_config({"http": {"usersFile": str(f)}}, {})
    with pytest.raises(ConfigError, match=r"^\[http\] usersFile: .*users:1: role"):
        check_http_config(cfg)


@pytest.mark.parametrize("table, message", [
    ({"prot": 1}, "[http] unknown key 'prot'"),
    ({"port": "x"}, "[http] port must be a port number"),
    ({"metricsAuth": "yes"}, "[http] metricsAuth must be bool"),
    ({"tokenTtl": 0}, "[http] tokenTtl must be > 0"),
    ({"keyFile": "k.pem"}, "[http] keyFile is set without certFile"),
    ({"certFile": "/no/such.pem"}, "[http] certFile: /no/such.pem is not a readable file"),
])
def test_config_errors_name_the_key(table, message, tmp_path):
    with pytest.raises(ConfigError) as e:
        check_http_config(build_serve_config({"http": table, "dataDir": str(tmp_path)}, {}))
    assert str(e.value).startswith(message)


def test_defaults_and_flag_override(tmp_path):
    cfg = build_serve_config({"dataDir": str(tmp_path)}, {})
    s = HttpSettings.from_dict(cfg.http, data_dir=cfg.data_dir, port=cfg.http_port)
    assert (s.port, s.host, s.users_file, s.metrics_auth) == (18083, "127.0.0.1", tmp_path / "http_users", False)
    cfg = build_serve_config({"http": {"port": 9000}}, {"http_port": 0})
    assert cfg.http_port == 0


async def test_the_default_port_taken_is_a_warning_and_a_configured_one_an_error(tmp_path, caplog):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = HttpSettings(port=port, users_file=Path(tmp_path / "users"))
        async with trio.open_nursery() as nursery:
            assert await nursery.start(partial(run_http, None, settings, explicit_port=False)) is None
        assert "is in use" in caplog.text
        with pytest.raises(OSError, match=f"HTTP port {port} on 127.0.0.1"):
            await run_http(None, settings)


async def test_two_servers_starting_at_once_on_the_default_port_one_serves_the_other_warns(tmp_path, caplog):
    # Both bind before either listens (two gateway nodes started together): the
    # second must learn the port is taken in run_http, not crash in hypercorn.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    first = bind("127.0.0.1", port)
    try:
        settings = HttpSettings(port=port, users_file=Path(tmp_path / "users"))
        async with trio.open_nursery() as nursery:
            assert await nursery.start(partial(run_http, None, settings, explicit_port=False)) is None
        assert "is in use" in caplog.text
    finally:
        first.close()


def _self_signed(d: Path) -> tuple[Path, Path]:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "k.pem", "-out", "c.pem",
                    "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   cwd=d, check=True, capture_output=True)
    return d / "c.pem", d / "k.pem"


async def test_with_a_certificate_the_api_and_its_tokens_are_served_over_https_only(tmp_path):
    cert, key = _self_signed(tmp_path)
    users_file = tmp_path / "users"
    passwd_admin_main(["--admin", str(users_file), "alice", "-b", "a"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = HttpSettings.from_dict({"certFile": str(cert), "keyFile": str(key), "usersFile": str(users_file)},
                                      data_dir=tmp_path, port=port)
    async with trio.open_nursery() as nursery:
        assert await nursery.start(run_http, None, settings) == port
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(cert))) as client:
            r = await client.post(f"https://127.0.0.1:{port}/api/v1/login", json={"username": "alice", "password": "a"})
            assert r.status_code == 200 and r.json()["role"] == "admin"
            r = await client.post(f"https://127.0.0.1:{port}/api/v1/login", content=b"x" * 70_000)
            assert r.status_code == 413
        async with httpx.AsyncClient() as plain:
            with pytest.raises(httpx.HTTPError):
                await plain.post(f"http://127.0.0.1:{port}/api/v1/login", json={"username": "alice", "password": "a"})
        nursery.cancel_scope.cancel()


def test_the_grafana_dashboard_uses_only_series_that_operations_md_documents():
    import json
    import re

    docs = Path(__file__).resolve().parents[3] / "docs"
    documented = set(re.findall(r"`((?:mqgate|process)_[a-z_]+)`", (docs / "OPERATIONS.md").read_text()))
    dashboard = json.loads((docs / "grafana" / "mqgate.json").read_text())
    used = {name for p in dashboard["panels"] for t in p["targets"]
            for name in re.findall(r"\b((?:mqgate|process)_[a-z_]+)", t["expr"])}
    base = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    assert used and base - documented == set()
