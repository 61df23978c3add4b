"""SCRAM (RFC 5802, RFC 7677) for MQTT 5 enhanced authentication: the
secrets a password file stores, and the server side of one exchange.

Rules kept here:

* The methods are ``SCRAM-SHA-256`` and ``SCRAM-SHA-512`` (the names MQTT 5
  clients put in the Authentication Method property). No channel binding
  (``-PLUS``): a client asking for it (gs2 flag ``p``) fails the exchange.
* A stored secret is what RFC 5802 says a server keeps: salt, iteration
  count, StoredKey and ServerKey, never the password. Its text form is
  PostgreSQL's ``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>``
  (base64), so secrets made by other tools can be pasted in.
* An exchange is two steps: ``first(client-first) -> server-first`` and
  ``final(client-final) -> server-final``. Any failure raises
  ``ScramFailed`` whose message is the RFC's error name (``invalid-proof``,
  ``other-error``...), never a piece of the client's messages: callers may
  log it.
* An unknown user is not told apart from a wrong password: the exchange
  goes on with a fake salt (derived from the username under a key made at
  start-up, so it is the same on every try) and fails at the proof
  (RFC 5802 section 5.1).
* The maths (HMACs, no PBKDF2 on the server: the client does the iterations)
  is the ``scramp`` library's, as used by pg8000; it is cheap enough to run
  on the event loop.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import scramp
from scramp.utils import ScramException

METHODS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 4096  # RFC 7677's minimum, and scramp's
_DIGEST_SIZE = {"SCRAM-SHA-256": 32, "SCRAM-SHA-512": 64}
_MECHANISMS = {name: scramp.ScramMechanism(name) for name in METHODS}


class ScramFailed(Exception):
    """The exchange failed; ``str(exc)`` is the RFC 5802 server-error name."""


@dataclass(frozen=True)
class ScramSecret:
    method: str
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    @classmethod
    def make(cls, method: str, password: str, *, iterations: int = DEFAULT_ITERATIONS) -> ScramSecret:
        salt, stored_key, server_key, i = _MECHANISMS[method].make_auth_info(password, iteration_count=iterations)
        return cls(method, i, salt, stored_key, server_key)

    @classmethod
    def parse(cls, text: str) -> ScramSecret:
        """From ``METHOD$ITERATIONS:SALT$STOREDKEY:SERVERKEY``; ValueError if wrong."""
        method, _, rest = text.partition("$")
        if method not in METHODS:
            raise ValueError(f"unknown SCRAM method {method!r} (known: {', '.join(METHODS)})")
        head, _, keys = rest.partition("$")
        iterations, _, salt = head.partition(":")
        stored, _, server = keys.partition(":")
        try:
            n = int(iterations)
            salt_b, stored_b, server_b = (base64.b64decode(x, validate=True) for x in (salt, stored, server))
        except (ValueError, binascii.Error):
            raise ValueError(f"expected {method}$<iterations>:<salt>$<StoredKey>:<ServerKey> (base64)") from None
        size = _DIGEST_SIZE[method]
        if not 4096 <= n <= 10_000_000 or len(salt_b) < 12 or len(stored_b) != size or len(server_b) != size:
            raise ValueError(f"{method}: iterations 4096..10000000, a salt of 12 bytes or more "
                             f"and keys of {size} bytes expected")
        return cls(method, n, salt_b, stored_b, server_b)

    def __str__(self) -> str:
        b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
        return f"{self.method}${self.iterations}:{b64(self.salt)}${b64(self.stored_key)}:{b64(self.server_key)}"


class ScramExchange:
    """The server side of one exchange (see the module docstring)."""

    __slots__ = ("method", "username", "_server", "_lookup", "_fake_key")

    def __init__(self, method: str, lookup: Callable[[str], ScramSecret | None], fake_key: bytes) -> None:
        self.method = method
        self.username: str | None = None  # known after first()
        self._lookup = lookup
        self._fake_key = fake_key
        self._server = _MECHANISMS[method].make_server(self._auth_info)

    def _auth_info(self, username: str):
        self.username = username
        secret = self._lookup(username)
        if secret is None or secret.method != self.method:
            size = _DIGEST_SIZE[self.method]
            salt = hmac.new(self._fake_key, f"{self.method}\0{username}".encode(), hashlib.sha256).digest()[:16]
            return salt, secrets.token_bytes(size), secrets.token_bytes(size), DEFAULT_ITERATIONS
        return secret.salt, secret.stored_key, secret.server_key, secret.iterations

    def first(self, client_first: bytes | None) -> bytes:
        """client-first-message -> server-first-message."""
        try:
            self._server.set_client_first(_text(client_first))
            return self._server.get_server_first().encode("utf-8")
        except ScramException as e:
            raise ScramFailed(_error_name(e)) from None

    def final(self, client_final: bytes | None) -> bytes:
        """client-final-message -> server-final-message (the server's signature)."""
        try:
            self._server.set_client_final(_text(client_final))
            return self._server.get_server_final().encode("utf-8")
        except ScramException as e:
            raise ScramFailed(_error_name(e)) from None


def _text(data: bytes | None) -> str:
    if not data:
        raise ScramException("no SCRAM message", scramp.utils.ServerError.OTHER_ERROR)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramException("not UTF-8", scramp.utils.ServerError.INVALID_ENCODING) from None


def _error_name(e: ScramException) -> str:
    return e.server_error.value if e.server_error is not None else "other-error"
