"""Who may use the HTTP API: the users file, roles, login tokens, ``mqgate passwd --admin``.

The users file is the MQTT password file's sibling, with a role between
name and hash, one user a line, ``#`` comments and blank lines ignored::

    alice:admin:$argon2id$v=19$m=65536,t=3,p=4$<salt>$<hash>
    grafana:read-only:$argon2id$...

Rules kept here:
- Two roles: ``admin`` may read and change (kick, delete); ``read-only``
  may read. Anything else in the file is an error naming the line.
- The file is written only by ``mqgate passwd --admin`` (temp file, fsync,
  rename, mode 0600). It is re-read when it changes (one ``stat`` per
  request) and on ``reload()`` (SIGHUP); a file that fails to parse then
  leaves the previous users in force, logged. A missing file means no users.
- Verification is argon2id in a worker thread (never on the event loop); a
  success is remembered as an HMAC of the password under a key made at
  start, per (user, stored hash), so a script polling with Basic auth costs
  one HMAC a request. Failures are never cached.
- A token (``POST /api/v1/login``) is a random 256-bit string kept in
  memory only, valid ``tokenTtl`` seconds and only while its user keeps the
  same role and hash: removing a user or changing its password ends its
  tokens. A restart ends every token.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import argon2
import trio

from gateway.auth import edit_password_file, hash_password, passwd_parser, write_password_file

log = logging.getLogger("mqgate.http")

ROLES = ("admin", "read-only")
_MAX_TOKENS = 10_000


class UsersFileError(ValueError):
    """The users file is wrong; the message names the file and line."""


@dataclass(frozen=True)
class User:
    name: str
    role: str

    @property
    def admin(self) -> bool:
        return self.role == "admin"


def read_users_file(path: str | Path) -> dict[str, tuple[str, str]]:
    """{name: (role, argon2 hash)}; {} when the file does not exist."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise UsersFileError(f"users file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise UsersFileError(f"users file {path}: not UTF-8 ({e})") from None
    users: dict[str, tuple[str, str]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0] or not parts[2].startswith("$argon2"):
            raise UsersFileError(f"{path}:{number}: expected 'username:role:$argon2id$...'")
        name, role, stored = parts
        if role not in ROLES:
            raise UsersFileError(f"{path}:{number}: role {role!r} is not one of {', '.join(ROLES)}")
        if name in users:
            raise UsersFileError(f"{path}:{number}: user {name!r} appears twice")
        users[name] = (role, stored)
    return users


class Users:
    def __init__(self, path: Path, *, token_ttl: float = 3600.0) -> None:
        self.path = Path(path)
        self.token_ttl = token_ttl
        self._users = read_users_file(self.path)  # a bad file fails at start-up
        self._stat = self._file_stat()
        self._hasher = argon2.PasswordHasher()
        self._limiter = trio.CapacityLimiter(2)
        self._key = secrets.token_bytes(32)
        self._verified: dict[tuple[str, str], bytes] = {}
        self._tokens: dict[str, tuple[str, str, float]] = {}  # token -> (name, stored hash, expires)

    def __len__(self) -> int:
        self._reload_if_changed()
        return len(self._users)

    def _file_stat(self):
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def reload(self) -> bool:
        stat = self._file_stat()
        try:
            users = read_users_file(self.path)
        except UsersFileError as e:
            log.error("HTTP users file not reloaded, keeping %d users: %s", len(self._users), e)
            self._stat = stat
            return False
        self._users, self._stat = users, stat
        log.info("HTTP users file %s loaded: %d users", self.path, len(users))
        return True

    def _reload_if_changed(self) -> None:
        if self._file_stat() != self._stat:
            self.reload()

    async def verify(self, name: str, password: str) -> User | None:
        self._reload_if_changed()
        entry = self._users.get(name)
        if entry is None:
            return None
        role, stored = entry
        tag = hmac.new(self._key, password.encode("utf-8"), hashlib.sha256).digest()
        known = self._verified.get((name, stored))
        if known is not None and hmac.compare_digest(known, tag):
            return User(name, role)
        ok = await trio.to_thread.run_sync(self._verify, stored, password, limiter=self._limiter)
        if not ok:
            return None
        if len(self._verified) >= _MAX_TOKENS:
            self._verified.pop(next(iter(self._verified)))
        self._verified[(name, stored)] = tag
        return User(name, role)

    def _verify(self, stored: str, password: str) -> bool:
        try:
            return self._hasher.verify(stored, password)
        except argon2.exceptions.VerificationError:
            return False
        except argon2.exceptions.InvalidHashError:
            log.error("HTTP users file %s holds an invalid hash", self.path)
            return False

    def issue_token(self, user: User) -> str:
        now = time.monotonic()
        if len(self._tokens) >= _MAX_TOKENS:
            self._tokens = {t: v for t, v in self._tokens.items() if v[2] > now}
            while len(self._tokens) >= _MAX_TOKENS:
                self._tokens.pop(next(iter(self._tokens)))
        token = secrets.token_urlsafe(32)
        self._tokens[token] = (user.name, self._users[user.name][1], now + self.token_ttl)
        return token

    def revoke_token(self, token: str) -> None:
        """Logging out (the dashboard): the token ends now."""
        self._tokens.pop(token, None)

    def check_token(self, token: str) -> User | None:
        self._reload_if_changed()
        entry = self._tokens.get(token)
        if entry is None:
            return None
        name, stored, expires = entry
        current = self._users.get(name)
        if expires <= time.monotonic() or current is None or current[1] != stored:
            del self._tokens[token]
            return None
        return User(name, current[0])


# --- mqgate passwd --admin ---------------------------------------------------------

def passwd_admin_main(argv: list[str]) -> int:
    """``mqgate passwd --admin FILE USER [--role admin|read-only] [-b PASSWORD] [-D]``."""
    parser = passwd_parser(
        "mqgate passwd --admin",
        "Manage the HTTP API's users file (roles admin and read-only, argon2id hashes).",
        "users file (created if missing; the server reads <dataDir>/http_users "
        "unless [http] usersFile says otherwise)")
    parser.add_argument("--admin", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--role", choices=ROLES, default="admin", help="admin (default) or read-only")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    path = Path(args.file)

    def store(users: dict[str, tuple[str, str]]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_password_file(path, {name: f"{role}:{stored}" for name, (role, stored) in users.items()})

    return edit_password_file(args, lambda: read_users_file(path),
                              lambda password: (args.role, hash_password(password)), store)
