"""Password file, `mqgate passwd`, and the authentication rules."""

import os
import stat

import argon2
import pytest

from gateway.auth import (Authenticator, PasswordFileError, passwd_main, read_password_file,
                          write_password_file)
from gateway.config import ConfigError
from gateway.listeners import CertIdentity

# Cheap argon2 parameters keep the tests fast; the format is the same.
CHEAP = argon2.PasswordHasher.from_parameters(argon2.profiles.CHEAPEST)


def passwd(*argv):
    return passwd_main([str(a) for a in argv], hasher=CHEAP)


def test_passwd_create_update_delete_and_file_format(tmp_path):
    path = tmp_path / "sub" / "passwd"
    path.parent.mkdir()
    assert passwd(path, "alice", "-b", "s3cret") == 0
    assert passwd(path, "bob", "-b", "hunter2") == 0
    lines = path.read_text().splitlines()
    assert [line.split(":", 1)[0] for line in lines] == ["alice", "bob"]
    assert all(line.split(":", 1)[1].startswith("$argon2id$") for line in lines)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    users = read_password_file(path)
    assert argon2.PasswordHasher().verify(users["alice"], "s3cret")

    assert passwd(path, "alice", "-b", "changed") == 0
    users2 = read_password_file(path)
    assert users2["alice"] != users["alice"] and users2["bob"] == users["bob"]
    assert argon2.PasswordHasher().verify(users2["alice"], "changed")

    assert passwd(path, "alice", "-D") == 0
    assert list(read_password_file(path)) == ["bob"]
    assert passwd(path, "alice", "-D") == 1  # no such user
    assert [p.name for p in path.parent.iterdir()] == ["passwd"]  # no temp files left


def test_passwd_prompts_twice(tmp_path, monkeypatch):
    path = tmp_path / "passwd"
    answers = iter(["pw1", "pw1", "pw2", "other"])
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answers))
    assert passwd(path, "u") == 0
    assert argon2.PasswordHasher().verify(read_password_file(path)["u"], "pw1")
    assert passwd(path, "u") == 1  # mismatch: file unchanged
    assert argon2.PasswordHasher().verify(read_password_file(path)["u"], "pw1")


@pytest.mark.parametrize("argv", [["a:b", "-b", "x"], ["u", "-b", ""], ["u", "-b", "x", "-D"], []])
def test_passwd_refuses_bad_input(tmp_path, argv, capsys):
    assert passwd(tmp_path / "f", *argv) != 0


@pytest.mark.parametrize("text, line", [
    ("alice\n", ":1:"), ("# c\n\nbob:plain\n", ":3:"), ("a:$argon2id$x\na:$argon2id$y\n", ":2:"),
])
def test_bad_password_file_names_the_line(tmp_path, text, line):
    path = tmp_path / "passwd"
    path.write_text(text)
    with pytest.raises(PasswordFileError, match=line):
        read_password_file(path)


@pytest.fixture
def pwfile(tmp_path):
    path = tmp_path / "passwd"
    write_password_file(path, {"alice": CHEAP.hash("s3cret"), "bob": CHEAP.hash("pw")})
    return path


async def test_anonymous_and_no_password_file():
    auth = Authenticator()
    assert await auth.check(None, None)
    assert (await auth.authenticate("anyone", b"x")).username == "anyone"
    closed = Authenticator(allow_anonymous=False)
    assert not await closed.check(None, None)
    assert not await closed.check("anyone", b"x")


async def test_password_file_rules(pwfile):
    auth = Authenticator(pwfile, allow_anonymous=True)
    ok = await auth.authenticate("alice", b"s3cret")
    assert ok.ok and ok.username == "alice" and ok.method == "password"
    assert await auth.check("alice", "s3cret")  # str is taken as UTF-8
    assert not await auth.check("alice", b"wrong")
    assert not await auth.check("alice", None)
    assert not await auth.check("mallory", b"s3cret")
    assert await auth.check(None, None)  # anonymous is separate
    assert not await Authenticator(pwfile, allow_anonymous=False).check(None, None)


async def test_success_is_cached_failures_are_not(pwfile):
    auth = Authenticator(pwfile)
    calls = []
    real = auth._verify
    auth._verify = lambda stored, pw: calls.append(pw) or real(stored, pw)
    for _ in range(3):
        assert await auth.check("alice", b"s3cret")
    assert calls == [b"s3cret"]
    for _ in range(2):
        assert not await auth.check("alice", b"nope")
    assert calls == [b"s3cret", b"nope", b"nope"]


async def test_certificate_identity_as_username(pwfile):
    ident = CertIdentity(common_name="dev1", subject="CN=dev1,O=Acme")
    auth = Authenticator(pwfile, allow_anonymous=False, use_identity_as_username=True)
    result = await auth.authenticate(None, None, ident)
    assert result.ok and result.username == "dev1" and result.method == "certificate"
    assert not await auth.check(None, None, CertIdentity(common_name=None, subject="O=Acme"))
    # not configured: the certificate alone proves nothing
    assert not await Authenticator(pwfile, allow_anonymous=False).check(None, None, ident)


async def test_hot_reload_on_file_change_and_reload(pwfile, caplog):
    auth = Authenticator(pwfile)
    assert await auth.check("alice", b"s3cret")
    assert passwd(pwfile, "alice", "-b", "new") == 0
    assert not await auth.check("alice", b"s3cret")  # the cached success is for the old hash
    assert await auth.check("alice", b"new")
    assert passwd(pwfile, "carol", "-b", "c") == 0
    assert await auth.check("carol", b"c")
    pwfile.write_text("broken line\n")
    assert auth.reload() is False  # logged, the old users stay
    assert await auth.check("carol", b"c")
    assert "not reloaded" in caplog.text


def test_from_dict(pwfile, tmp_path):
    auth = Authenticator.from_dict({"passwordFile": str(pwfile), "allowAnonymous": False,
                                    "maxConnections": 5})
    assert auth.password_file == pwfile and not auth.allow_anonymous
    assert Authenticator.from_dict({}).allow_anonymous
    with pytest.raises(ConfigError, match="allowAnonymous"):
        Authenticator.from_dict({"allowAnonymous": "yes"})
    with pytest.raises(ConfigError, match="passwordFile"):
        Authenticator.from_dict({"passwordFile": str(tmp_path / "missing")})


def test_a_password_file_turns_anonymous_off_unless_said_otherwise(pwfile):
    # a user who configures passwords expects them to be needed, on 127.0.0.1 too
    assert not Authenticator.from_dict({"passwordFile": str(pwfile)}).allow_anonymous
    assert Authenticator.from_dict({"passwordFile": str(pwfile), "allowAnonymous": True}).allow_anonymous
    assert Authenticator.from_dict({}).allow_anonymous
    assert not Authenticator.from_dict({}, hosts=("0.0.0.0",)).allow_anonymous
