"""Who may connect: anonymous access, a password file, TLS client certificates.

The password file is like ``mosquitto_passwd``'s but with argon2id hashes, one
user a line, ``#`` comments and blank lines ignored::

    alice:$argon2id$v=19$m=65536,t=3,p=4$<salt>$<hash>

A user may also have SCRAM secrets for MQTT 5 enhanced authentication
(``mqgate passwd --scram``), space-separated after the hash, at most one per
method (``gateway/scram.py`` has their form); a line may hold SCRAM secrets
only, and then that user cannot log in with a plain CONNECT password::

    bob:$argon2id$... SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey> SCRAM-SHA-512$4096:...

It is written only by ``mqgate passwd`` (``passwd_main``): a new file, then
fsync and rename, mode 0600, so a reader never sees half a file.

Rules kept here (``Authenticator.authenticate``, first match wins):

1. ``use_identity_as_username`` and a verified TLS client certificate with a
   common name: accepted, the username is the certificate's CN (the MQTT
   username and password, if any, are ignored, like Mosquitto).
2. No username: accepted iff ``allow_anonymous``. Its default is Mosquitto
   2's: on when every listener binds a loopback address (127.0.0.1, ::1,
   localhost) and no ``passwordFile`` is set, off otherwise (0.0.0.0
   included; a password file means clients must authenticate);
   ``allowAnonymous = true`` turns it on anywhere (logged as a warning at
   start when the listeners are not loopback-only).
3. A password file is configured: the user must be in it and the password
   must verify; an unknown user or a wrong or missing password is refused.
4. No password file: accepted iff ``allow_anonymous`` (the username is then
   only a name for the ACL's ``%u``, not a proof).

A CONNECT with an MQTT 5 Authentication Method skips these rules: the
SCRAM exchange (``scram_exchange``, driven by gateway/connecting.py) decides,
with the SCRAM secrets of the same file; without a password file no method
is offered.

Verification is slow on purpose (argon2id, ~50 ms of CPU): it runs in a
worker thread (``trio.to_thread``, at most ``verify_threads`` at once) so it
never stalls the event loop, and a *successful* verification is remembered
in memory, keyed by (username, stored hash), as an HMAC of the password under
a key made at start-up; a reconnect storm of known devices then costs one
HMAC each. A changed hash in the file (reload) makes the old entry useless.
Failures are never cached: each wrong guess costs the guesser a full argon2.

The file is re-read when it changes (checked with one ``stat`` per
authentication) or when ``reload()`` is called (SIGHUP). A file that fails
to parse on reload leaves the previous users in force and is logged.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import argon2
import trio
from scramp.utils import ScramException

from gateway.config import ConfigError
from gateway.listeners import CertIdentity
from gateway.scram import DEFAULT_ITERATIONS, METHODS as SCRAM_METHODS, ScramExchange, ScramSecret

log = logging.getLogger("mqgate.gateway")

SECURITY_KEYS = frozenset({"allowAnonymous", "passwordFile", "aclFile", "useIdentityAsUsername"})
_CACHE_SIZE = 100_000


class PasswordFileError(ValueError):
    """The password file is wrong; the message names the file and line."""


@dataclass(frozen=True)
class AuthResult:
    ok: bool
    username: str | None  # the name the ACL sees as %u (None: anonymous)
    method: str  # "anonymous", "password", "certificate", "refused"


def hash_password(password: str | bytes, *, hasher: argon2.PasswordHasher | None = None) -> str:
    return (hasher or argon2.PasswordHasher()).hash(password)


@dataclass(frozen=True)
class PasswordEntry:
    """One user's line: its argon2 hash (None: SCRAM only) and SCRAM secrets by method."""

    argon2: str | None
    scram: Mapping[str, ScramSecret]

    @classmethod
    def parse(cls, stored: str) -> PasswordEntry:
        """From what follows ``user:``; ValueError saying what is wrong."""
        argon, scram = None, {}
        for token in stored.split():
            if token.startswith("$argon2"):
                if argon is not None:
                    raise ValueError("two argon2 hashes")
                argon = token
            elif not token.startswith("SCRAM-"):
                raise ValueError("expected 'username:$argon2id$...' (and SCRAM secrets after it)")
            else:
                secret = ScramSecret.parse(token)
                if secret.method in scram:
                    raise ValueError(f"two {secret.method} secrets")
                scram[secret.method] = secret
        if argon is None and not scram:
            raise ValueError("expected 'username:$argon2id$...' (and SCRAM secrets after it)")
        return cls(argon, scram)


def make_entry(password: str, *, scram: bool = False, iterations: int = DEFAULT_ITERATIONS,
               hasher: argon2.PasswordHasher | None = None) -> str:
    """The stored part of a line: the argon2 hash, and with ``scram`` a
    SCRAM-SHA-256 and a SCRAM-SHA-512 secret after it."""
    parts = [hash_password(password, hasher=hasher)]
    if scram:
        parts += [str(ScramSecret.make(m, password, iterations=iterations)) for m in SCRAM_METHODS]
    return " ".join(parts)


def read_password_file(path: str | Path) -> dict[str, str]:
    """{username: what follows ``user:`` (an argon2 hash, maybe SCRAM secrets after
    it)}; raises PasswordFileError naming the line."""
    return {user: stored for user, (stored, _entry) in _read_entries(path).items()}


def _read_entries(path: str | Path) -> dict[str, tuple[str, PasswordEntry]]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PasswordFileError(f"password file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise PasswordFileError(f"password file {path}: not UTF-8 ({e})") from None
    users: dict[str, tuple[str, PasswordEntry]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, stored = line.partition(":")
        if not sep or not user or not stored.strip():
            raise PasswordFileError(f"{path}:{number}: expected 'username:$argon2id$...'")
        try:
            entry = PasswordEntry.parse(stored)
        except ValueError as e:
            raise PasswordFileError(f"{path}:{number}: {e}") from None
        if user in users:
            raise PasswordFileError(f"{path}:{number}: user {user!r} appears twice")
        users[user] = (stored.strip(), entry)
    return users


def write_password_file(path: str | Path, users: Mapping[str, str]) -> None:
    """Replace the file atomically (temp file, fsync, rename), mode 0600."""
    path = Path(path)
    body = "".join(f"{user}:{stored}\n" for user, stored in users.items())
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def is_loopback(host: str) -> bool:
    """Whether a listener bound to ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # "", "0.0.0.0" parse or not: anything else is reachable from outside
        return False


class Authenticator:
    def __init__(self, password_file: str | Path | None = None, *, allow_anonymous: bool = True,
                 use_identity_as_username: bool = False, verify_threads: int = 2) -> None:
        self.password_file = Path(password_file) if password_file else None
        self.allow_anonymous = allow_anonymous
        self.use_identity_as_username = use_identity_as_username
        self._users: dict[str, PasswordEntry] = {}
        self._stat: tuple[int, int, int] | None = None
        self._hasher = argon2.PasswordHasher()
        self._limiter = trio.CapacityLimiter(verify_threads)
        self._hmac_key = secrets.token_bytes(32)
        self._verified: dict[tuple[str, str], bytes] = {}
        if self.password_file is not None:
            self._users = self._read()  # fail at start-up
            self._stat = self._file_stat()

    @classmethod
    def from_dict(cls, table: Mapping[str, Any], *, hosts: Iterable[str] = ("127.0.0.1",)) -> Authenticator:
        """From the ``[mqtt]`` table: ``allowAnonymous`` (default: true when every
        listener address in ``hosts`` is a loopback one and there is no
        ``passwordFile``, else false),
        ``passwordFile`` (default none), ``useIdentityAsUsername`` (false).
        Other keys are ignored here (``Limits.from_dict`` rejects strangers)."""
        ident = table.get("useIdentityAsUsername", False)
        pw = table.get("passwordFile", "")
        allow = table.get("allowAnonymous", not pw and all(is_loopback(h) for h in hosts))
        for key, value, kind in (("allowAnonymous", allow, bool),
                                 ("useIdentityAsUsername", ident, bool), ("passwordFile", pw, str)):
            if not isinstance(value, kind):
                raise ConfigError(f"[mqtt] {key} must be a {kind.__name__}, not {value!r}")
        try:
            return cls(pw or None, allow_anonymous=allow, use_identity_as_username=ident)
        except PasswordFileError as e:
            raise ConfigError(f"[mqtt] passwordFile: {e}") from None

    def _file_stat(self) -> tuple[int, int, int] | None:
        assert self.password_file is not None
        try:
            st = self.password_file.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _read(self) -> dict[str, PasswordEntry]:
        assert self.password_file is not None
        return {user: entry for user, (_stored, entry) in _read_entries(self.password_file).items()}

    def reload(self) -> bool:
        """Re-read the password file; False (and a log line) if it is bad."""
        if self.password_file is None:
            return True
        stat = self._file_stat()
        try:
            users = self._read()
        except PasswordFileError as e:
            log.error("password file not reloaded, keeping %d users: %s", len(self._users), e)
            self._stat = stat
            return False
        self._users, self._stat = users, stat
        log.info("password file %s loaded: %d users", self.password_file, len(users))
        return True

    def _reload_if_changed(self) -> None:
        if self.password_file is not None and self._file_stat() != self._stat:
            self.reload()

    async def authenticate(self, username: str | None, password: bytes | str | None,
                           cert_identity: CertIdentity | None = None) -> AuthResult:
        if self.use_identity_as_username and cert_identity is not None and cert_identity.common_name:
            return AuthResult(True, cert_identity.common_name, "certificate")
        if username is None:
            return AuthResult(self.allow_anonymous, None,
                              "anonymous" if self.allow_anonymous else "refused")
        if self.password_file is None:
            return AuthResult(self.allow_anonymous, username,
                              "anonymous" if self.allow_anonymous else "refused")
        self._reload_if_changed()
        entry = self._users.get(username)
        stored = entry.argon2 if entry is not None else None
        if stored is None or password is None:
            return AuthResult(False, username, "refused")
        if isinstance(password, str):
            password = password.encode("utf-8")
        key = (username, stored)
        tag = hmac.new(self._hmac_key, password, hashlib.sha256).digest()
        known = self._verified.get(key)
        if known is not None and hmac.compare_digest(known, tag):
            return AuthResult(True, username, "password")
        ok = await trio.to_thread.run_sync(self._verify, stored, password, limiter=self._limiter)
        if ok:
            if len(self._verified) >= _CACHE_SIZE:
                self._verified.pop(next(iter(self._verified)))
            self._verified[key] = tag
        return AuthResult(ok, username, "password" if ok else "refused")

    def scram_exchange(self, method: str) -> ScramExchange | None:
        """A new SCRAM exchange (see gateway/scram.py) for ``method``, or None when
        this server does not offer the method: unknown, or no password file."""
        if method not in SCRAM_METHODS or self.password_file is None:
            return None
        self._reload_if_changed()
        return ScramExchange(method, self._scram_secret_of(method), self._hmac_key)

    def _scram_secret_of(self, method: str) -> Callable[[str], ScramSecret | None]:
        users = self._users  # the exchange sees the file as it was when it began

        def lookup(username: str) -> ScramSecret | None:
            entry = users.get(username)
            return entry.scram.get(method) if entry is not None else None
        return lookup

    async def check(self, username: str | None, password: bytes | str | None,
                    cert_identity: CertIdentity | None = None) -> bool:
        return (await self.authenticate(username, password, cert_identity)).ok

    def _verify(self, stored: str, password: bytes) -> bool:
        try:
            return self._hasher.verify(stored, password)
        except argon2.exceptions.VerificationError:
            return False
        except argon2.exceptions.InvalidHashError:
            log.error("password file %s holds an invalid hash", self.password_file)
            return False


# --- mqgate passwd ---------------------------------------------------------------

def passwd_parser(prog: str, description: str, file_help: str) -> argparse.ArgumentParser:
    """The arguments both ``mqgate passwd`` forms share: FILE USER [-b PASSWORD | -D]."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("file", help=file_help)
    parser.add_argument("user", help="username")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-b", dest="password", metavar="PASSWORD",
                       help="take the password from the command line (batch mode)")
    group.add_argument("-D", dest="delete", action="store_true", help="delete the user")
    return parser


def edit_password_file(args: argparse.Namespace, load: Callable[[], dict[str, Any]],
                       entry: Callable[[str], Any], store: Callable[[dict[str, Any]], None]) -> int:
    """Add, update or delete ``args.user`` in the file ``load`` reads and
    ``store`` writes (``entry`` makes a user's value from the password; without
    -b the password is asked twice). Every refusal is one line on stderr and
    exit status 1; ``load`` raises ValueError for a file it cannot read."""
    path = Path(args.file)
    user: str = args.user
    if not user or ":" in user or user != user.strip() or any(ord(c) < 32 for c in user):
        print(f"mqgate passwd: invalid username {user!r} (no ':', control characters or "
              "surrounding spaces)", file=sys.stderr)
        return 1
    try:
        users = load()
    except ValueError as e:
        print(f"mqgate passwd: {e}", file=sys.stderr)
        return 1
    if args.delete:
        if user not in users:
            print(f"mqgate passwd: user {user!r} not found in {path}", file=sys.stderr)
            return 1
        del users[user]
    else:
        password = args.password
        if password is None:
            try:
                password = getpass.getpass("Password: ")
                again = getpass.getpass("Reenter password: ")
            except (EOFError, KeyboardInterrupt):
                print("mqgate passwd: no password given", file=sys.stderr)
                return 1
            if password != again:
                print("mqgate passwd: passwords do not match", file=sys.stderr)
                return 1
        if not password:
            print("mqgate passwd: empty password", file=sys.stderr)
            return 1
        try:
            users[user] = entry(password)
        except ValueError as e:
            print(f"mqgate passwd: {e}", file=sys.stderr)
            return 1
    try:
        store(users)
    except OSError as e:
        print(f"mqgate passwd: cannot write {path}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


def passwd_main(argv: list[str], *, hasher: argon2.PasswordHasher | None = None) -> int:
    """``mqgate passwd FILE USER [-b PASSWORD] [-D] [--scram [--iterations N]]``:
    add or update USER (the file is created if missing; without -b the
    password is asked twice) or delete USER (-D). With ``--scram`` the line
    also gets SCRAM-SHA-256 and SCRAM-SHA-512 secrets (MQTT 5 enhanced
    authentication); without it an update drops any the user had (they
    would prove the old password). Returns the exit status."""
    parser = passwd_parser("mqgate passwd", "Manage an mqgate password file (argon2id hashes, "
                           "and SCRAM secrets with --scram).", "password file (created if missing)")
    parser.add_argument("--scram", action="store_true",
                        help="also store SCRAM-SHA-256 and SCRAM-SHA-512 secrets (MQTT 5 enhanced authentication)")
    parser.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, metavar="N",
                        help=f"SCRAM iteration count (default {DEFAULT_ITERATIONS}, at least 4096)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if not 4096 <= args.iterations <= 10_000_000:
        print(f"mqgate passwd: --iterations {args.iterations}: must be 4096..10000000", file=sys.stderr)
        return 1
    path = Path(args.file)

    def entry(password: str) -> str:
        try:
            return make_entry(password, scram=args.scram, iterations=args.iterations, hasher=hasher)
        except ScramException as e:  # SASLprep refuses the password (RFC 4013 prohibited characters)
            raise ValueError(f"this password cannot be used with SCRAM: {e}") from None

    return edit_password_file(
        args, lambda: read_password_file(path) if path.exists() else {}, entry,
        lambda users: write_password_file(path, users))
