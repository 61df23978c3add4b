"""MQTT 5 enhanced authentication with SCRAM-SHA-256/512 (issue 14), over
real sockets with a raw MQTT 5 client. The client side of SCRAM is written
here from RFC 5802 with hashlib, not with the library the server uses, so
the two sides are checked against the RFC and not against each other."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os

import argon2
import pytest

from gateway.auth import Authenticator, PasswordFileError, passwd_main, read_password_file
from gateway.mqtt import Auth, ConnAck, Connect, Disconnect, PingResp, PubAck, Publish, ReasonCode
from gateway.scram import ScramSecret

R = ReasonCode
CHEAP = argon2.PasswordHasher.from_parameters(argon2.profiles.CHEAPEST)
METHODS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


class ScramClient:
    """The client side of RFC 5802 (no channel binding: gs2 header ``n,,``)."""

    def __init__(self, method: str, user: str, password: str) -> None:
        self.hash = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[method]
        self.password = password.encode()
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.bare = f"n={user},r={self.nonce}"
        self.server_signature = b""

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash).digest()

    def first(self) -> bytes:
        return ("n,," + self.bare).encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(kv.split("=", 1) for kv in server_first.decode().split(","))
        assert attrs["r"].startswith(self.nonce) and len(attrs["r"]) > len(self.nonce)
        salted = hashlib.pbkdf2_hmac(self.hash, self.password, base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, self._hmac(stored_key, auth_message)))
        self.server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check_server_final(self, server_final: bytes) -> None:
        assert server_final == b"v=" + base64.b64encode(self.server_signature)


def passwd(*argv) -> int:
    return passwd_main([str(a) for a in argv], hasher=CHEAP)


@pytest.fixture
def pwfile(tmp_path):
    path = tmp_path / "passwd"
    assert passwd(path, "alice", "-b", "wonder-land-7", "--scram") == 0
    assert passwd(path, "bob", "-b", "plain-only") == 0  # argon2 only: no SCRAM secrets
    return path


@pytest.fixture
def scram_gateway(gateway_factory, pwfile):
    return lambda: gateway_factory({"sysInterval": 0, "passwordFile": str(pwfile)})


async def scram_connect(client_cls, port, method, user, password, *, client_id="dev1", **kw):
    """CONNECT with SCRAM up to the server's answer to client-final: (client, scram, last packet)."""
    import trio

    stream = await trio.open_tcp_stream("127.0.0.1", port)
    client = client_cls(stream, 5)
    scram = ScramClient(method, user, password)
    await client.send(Connect(protocol_version=5, client_id=client_id, clean_start=True,
                              authentication_method=method, authentication_data=scram.first(), **kw))
    challenge = await client.recv()
    if not isinstance(challenge, Auth):
        return client, scram, challenge
    assert challenge.reason_code == R.CONTINUE_AUTHENTICATION and challenge.authentication_method == method
    await client.send(Auth(reason_code=R.CONTINUE_AUTHENTICATION, authentication_method=method,
                           authentication_data=scram.final(challenge.authentication_data)))
    return client, scram, await client.recv()


# ---- the password file and mqgate passwd --scram ----------------------------------------------

def test_passwd_scram_stores_both_methods_beside_the_argon2_hash(pwfile):
    users = read_password_file(pwfile)
    alice = users["alice"].split()
    assert alice[0].startswith("$argon2id$") and [t.split("$")[0] for t in alice[1:]] == METHODS
    assert CHEAP.verify(alice[0], "wonder-land-7")
    secret = ScramSecret.parse(alice[1])
    assert secret.iterations == 4096 and len(secret.stored_key) == 32 and str(secret) == alice[1]
    assert len(ScramSecret.parse(alice[2]).server_key) == 64
    assert users["bob"].startswith("$argon2id$") and " " not in users["bob"]  # the old form, unchanged
    # A new password without --scram drops the old secrets (they would prove the old password).
    assert passwd(pwfile, "alice", "-b", "new-one") == 0
    assert " " not in read_password_file(pwfile)["alice"]
    assert passwd(pwfile, "carol", "-b", "pw-carol-1", "--scram", "--iterations", "8192") == 0
    assert ScramSecret.parse(read_password_file(pwfile)["carol"].split()[1]).iterations == 8192
    assert passwd(pwfile, "dave", "-b", "x", "--scram", "--iterations", "100") == 1


@pytest.mark.parametrize("line, why", [
    ("a:$argon2id$x SCRAM-SHA-1$4096:c2FsdHNhbHRzYWx0$AA==:AA==\n", "unknown SCRAM method"),
    ("a:$argon2id$x SCRAM-SHA-256$4096:c2FsdA==$AA==:AA==\n", "keys of 32 bytes"),
    ("a:$argon2id$x SCRAM-SHA-256$many:x$y:z\n", "expected SCRAM-SHA-256"),
    ("a:$argon2id$x $argon2id$y\n", "two argon2"),
])
def test_a_bad_scram_entry_names_its_line(tmp_path, line, why):
    path = tmp_path / "passwd"
    path.write_text("# users\n" + line)
    with pytest.raises(PasswordFileError, match=f":2: .*{why}"):
        read_password_file(path)


async def test_plain_password_login_still_works_for_a_scram_user(pwfile):
    auth = Authenticator(pwfile, allow_anonymous=False)
    assert await auth.check("alice", b"wonder-land-7")
    assert not await auth.check("alice", b"wrong")
    assert await auth.check("bob", b"plain-only")


# ---- the exchange over MQTT 5 ---------------------------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
async def test_scram_connect_succeeds_and_the_server_proves_itself(scram_gateway, client_cls, method):
    async with scram_gateway() as (broker, gw, port):
        client, scram, ack = await scram_connect(client_cls, port, method, "alice", "wonder-land-7")
        assert isinstance(ack, ConnAck) and ack.reason_code == 0, ack
        assert ack.authentication_method == method
        scram.check_server_final(ack.authentication_data)
        assert gw.router.sessions["dev1"].conn.username == "alice"
        assert gw.router.sessions["dev1"].conn.auth is None  # nothing of the exchange is kept
        await client.subscribe("scram/t", qos=1)
        await client.publish("scram/t", b"hello", qos=0)
        assert (await client.expect(Publish)).payload == b"hello"
        await client.disconnect()


async def test_the_connect_username_if_given_must_be_the_scram_one(scram_gateway, client_cls):
    async with scram_gateway() as (broker, gw, port):
        _, _, ack = await scram_connect(client_cls, port, METHODS[0], "alice", "wonder-land-7", username="alice")
        assert ack.reason_code == 0
        _, _, ack = await scram_connect(client_cls, port, METHODS[0], "alice", "wonder-land-7",
                                        client_id="dev2", username="bob")
        assert isinstance(ack, ConnAck) and ack.reason_code == R.NOT_AUTHORIZED


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("nobody", "x"), ("bob", "plain-only")])
async def test_a_failed_exchange_is_not_authorized(scram_gateway, client_cls, user, password):
    # A wrong password, an unknown user, a user without SCRAM secrets: the same
    # answers (an unknown user gets a fake salt and fails at the proof).
    async with scram_gateway() as (broker, gw, port):
        client, _, ack = await scram_connect(client_cls, port, METHODS[0], user, password)
        assert isinstance(ack, ConnAck) and ack.reason_code == R.NOT_AUTHORIZED, ack
        assert ack.reason_string == "SCRAM-SHA-256 authentication failed"  # the same for all three
        assert await client.recv() is None  # then closed
        assert gw.stats.auth_failures == 1
        # The gateway keeps serving others.
        _, _, ack = await scram_connect(client_cls, port, METHODS[1], "alice", "wonder-land-7", client_id="ok")
        assert ack.reason_code == 0


async def test_a_garbled_client_first_is_not_authorized(scram_gateway, client_cls):
    async with scram_gateway() as (broker, gw, port):
        for data in (b"not scram", None, b"\xff\xfe", b"p=tls-unique,,n=alice,r=abc"):
            _, ack = await client_cls.connect(port, "g", expect=None, authentication_method=METHODS[0],
                                              authentication_data=data)
            assert isinstance(ack, ConnAck) and ack.reason_code == R.NOT_AUTHORIZED, (data, ack)


@pytest.mark.parametrize("method", ["SCRAM-SHA-1", "KERBEROS", "scram-sha-256"])
async def test_an_unknown_method_is_a_bad_authentication_method(scram_gateway, client_cls, method):
    async with scram_gateway() as (broker, gw, port):
        _, ack = await client_cls.connect(port, "m", expect=None, authentication_method=method,
                                          authentication_data=b"n,,n=alice,r=abc")
        assert isinstance(ack, ConnAck) and ack.reason_code == R.BAD_AUTHENTICATION_METHOD
        assert ack.reason_string == f"authentication method {method!r} is not offered " \
                                    "(offered: SCRAM-SHA-256, SCRAM-SHA-512)"


async def test_without_a_password_file_scram_is_not_offered(gateway_factory, client_cls):
    async with gateway_factory({"sysInterval": 0}) as (broker, gw, port):
        _, ack = await client_cls.connect(port, "m", expect=None, authentication_method=METHODS[0],
                                          authentication_data=b"n,,n=alice,r=abc")
        assert ack.reason_code == R.BAD_AUTHENTICATION_METHOD
        assert "needs [mqtt] passwordFile" in ack.reason_string


async def test_a_31_client_cannot_send_auth(scram_gateway, client_cls):
    async with scram_gateway() as (broker, gw, port):
        client, _ = await client_cls.connect(port, "old", version=4, username="bob", password=b"plain-only")
        await client.send_raw(b"\xf0\x00")  # AUTH does not exist in 3.1.1: malformed, closed
        assert await client.recv() is None


async def test_auth_out_of_turn_is_a_protocol_error(scram_gateway, client_cls):
    async with scram_gateway() as (broker, gw, port):
        # Before answering the server-first: a re-authenticate, or any other packet.
        for early in (Auth(reason_code=R.RE_AUTHENTICATE, authentication_method=METHODS[0]),
                      Publish(topic="a", payload=b"x")):
            stream_client, _ = await client_cls.connect(port, "w", expect=None, authentication_method=METHODS[0],
                                                        authentication_data=b"n,,n=alice,r=abcdef")
            await stream_client.send(early)
            ack = await stream_client.recv()
            assert isinstance(ack, ConnAck) and ack.reason_code == R.PROTOCOL_ERROR, (early, ack)
        # A CONNECT with a method, then AUTH 0x18 twice in a row.
        client, _ = await client_cls.connect(port, "w2", expect=None, authentication_method=METHODS[0],
                                             authentication_data=b"n,,n=alice,r=abcdef")
        assert isinstance(_, Auth)
        cont = Auth(reason_code=R.CONTINUE_AUTHENTICATION, authentication_method=METHODS[0], authentication_data=b"x")
        await client.send(cont)
        ack = await client.recv()
        assert isinstance(ack, ConnAck) and ack.reason_code == R.NOT_AUTHORIZED  # a garbled client-final
        # After a plain CONNACK: AUTH at all (no method in CONNECT).
        client, _ = await client_cls.connect(port, "w3", username="bob", password=b"plain-only")
        await client.send(Auth(reason_code=R.RE_AUTHENTICATE, authentication_method=METHODS[0]))
        assert (await client.expect(Disconnect)).reason_code == R.PROTOCOL_ERROR
        # After a SCRAM CONNACK: a continue the server did not ask for, and a different method.
        for bad in (cont, Auth(reason_code=R.RE_AUTHENTICATE, authentication_method=METHODS[1])):
            client, _, ack = await scram_connect(client_cls, port, METHODS[0], "alice", "wonder-land-7")
            assert ack.reason_code == 0
            await client.send(bad)
            assert (await client.expect(Disconnect)).reason_code == R.PROTOCOL_ERROR
        assert gw.stats.protocol_errors == 5


# ---- re-authentication ----------------------------------------------------------------------------

async def reauth(client, method, user, password):
    scram = ScramClient(method, user, password)
    await client.send(Auth(reason_code=R.RE_AUTHENTICATE, authentication_method=method,
                           authentication_data=scram.first()))
    challenge = await client.recv()
    if not isinstance(challenge, Auth):
        return scram, challenge
    await client.send(Auth(reason_code=R.CONTINUE_AUTHENTICATION, authentication_method=method,
                           authentication_data=scram.final(challenge.authentication_data)))
    return scram, await client.recv()


@pytest.mark.parametrize("method", METHODS)
async def test_reauthentication_on_a_live_connection(scram_gateway, client_cls, method):
    async with scram_gateway() as (broker, gw, port):
        client, _, ack = await scram_connect(client_cls, port, method, "alice", "wonder-land-7")
        assert ack.reason_code == 0
        await client.subscribe("re/t", qos=0)
        for _ in range(2):
            scram, done = await reauth(client, method, "alice", "wonder-land-7")
            assert isinstance(done, Auth) and done.reason_code == R.SUCCESS, done
            scram.check_server_final(done.authentication_data)
        await client.publish("re/t", b"still here")
        assert (await client.expect(Publish)).payload == b"still here"
        # The connection keeps working during an exchange: a QoS 1 publish between
        # the AUTH 0x19 and the client-final is acknowledged meanwhile.
        scram = ScramClient(method, "alice", "wonder-land-7")
        await client.send(Auth(reason_code=R.RE_AUTHENTICATE, authentication_method=method,
                               authentication_data=scram.first()),
                          Publish(topic="re/q", payload=b"q", qos=1, packet_id=77))
        challenge = await client.expect(Auth)
        assert (await client.expect(PubAck)).packet_id == 77
        await client.send(Auth(reason_code=R.CONTINUE_AUTHENTICATION, authentication_method=method,
                               authentication_data=scram.final(challenge.authentication_data)))
        scram.check_server_final((await client.expect(Auth)).authentication_data)
        await client.ping()
        await client.expect(PingResp)
        await client.disconnect()


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("carol", "pw-carol-1")])
async def test_a_failed_reauthentication_disconnects_with_not_authorized(scram_gateway, client_cls, pwfile,
                                                                         user, password):
    assert passwd(pwfile, "carol", "-b", "pw-carol-1", "--scram") == 0  # a good password, another user
    async with scram_gateway() as (broker, gw, port):
        client, _, ack = await scram_connect(client_cls, port, METHODS[0], "alice", "wonder-land-7")
        assert ack.reason_code == 0
        _, answer = await reauth(client, METHODS[0], user, password)
        assert isinstance(answer, Disconnect) and answer.reason_code == R.NOT_AUTHORIZED, answer
        assert await client.recv() is None


async def test_a_password_file_change_applies_to_the_next_exchange(scram_gateway, client_cls, pwfile):
    async with scram_gateway() as (broker, gw, port):
        client, _, ack = await scram_connect(client_cls, port, METHODS[0], "alice", "wonder-land-7")
        assert ack.reason_code == 0
        assert passwd(pwfile, "alice", "-b", "changed-pw", "--scram") == 0
        _, answer = await reauth(client, METHODS[0], "alice", "wonder-land-7")
        assert isinstance(answer, Disconnect) and answer.reason_code == R.NOT_AUTHORIZED
        _, _, ack = await scram_connect(client_cls, port, METHODS[0], "alice", "changed-pw", client_id="dev9")
        assert ack.reason_code == 0


async def test_nothing_of_the_secret_is_logged(scram_gateway, client_cls, caplog):
    caplog.set_level(logging.DEBUG)
    async with scram_gateway() as (broker, gw, port):
        sent = []
        for i, password in enumerate(("wonder-land-7", "wrong-guess-5")):
            client, scram, ack = await scram_connect(client_cls, port, METHODS[0], "alice", password,
                                                     client_id=f"log-{i}")
            sent += [password, scram.nonce, scram.first().decode(), base64.b64encode(scram.server_signature).decode()]
            if ack.reason_code == 0:
                _, answer = await reauth(client, METHODS[0], "alice", "wrong-again-3")
                sent += ["wrong-again-3"]
    text = caplog.text
    assert "exchange failed for user 'alice': invalid-proof" in text
    assert "re-authentication" in text
    for secret in sent:
        assert secret not in text, secret


async def test_the_acl_sees_the_scram_user(gateway_factory, pwfile, tmp_path, client_cls):
    acl = tmp_path / "acl"
    acl.write_text("user alice\ntopic readwrite alice/#\n")
    async with gateway_factory({"sysInterval": 0, "passwordFile": str(pwfile), "aclFile": str(acl)}) as (_, gw, port):
        client, _, ack = await scram_connect(client_cls, port, METHODS[0], "alice", "wonder-land-7")
        assert ack.reason_code == 0
        assert (await client.subscribe("alice/in", "bob/in", qos=1)).reason_codes == (1, R.NOT_AUTHORIZED)


# ---- garbled SCRAM messages never escape as anything but ScramFailed -------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from gateway.scram import ScramExchange, ScramFailed  # noqa: E402

_SECRET = ScramSecret.make("SCRAM-SHA-256", "pw-fuzz-1")
_pieces = st.sampled_from(["n,,", "y,,", "p=tls-unique,,", "n=", "r=", "c=biws", "p=", "s=", "i=", ",", "=", "=2C",
                           "alice", "\x00", "é", "AAAA", "r=abc,", "m=x,"])
_messages = st.one_of(st.binary(max_size=200), st.lists(_pieces, max_size=12).map(lambda p: "".join(p).encode()))


@settings(max_examples=400, deadline=None)
@given(first=st.one_of(_messages, st.just(b"n,,n=alice,r=abc")), final=_messages)
def test_fuzz_garbled_messages_fail_cleanly(first, final):
    exchange = ScramExchange("SCRAM-SHA-256", lambda user: _SECRET, b"k" * 32)
    try:
        server_first = exchange.first(first)
    except ScramFailed as e:
        assert str(e) and "\n" not in str(e)
        return
    assert server_first.startswith(b"r=")
    with pytest.raises(ScramFailed):
        exchange.final(final)
