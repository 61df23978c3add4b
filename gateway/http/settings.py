"""The ``[http]`` table: where the HTTP server listens and who may use it.

Rules kept here:
- A key the table does not know is a ``ConfigError`` naming it (like every
  other table); values of the wrong type too, before any port is bound.
- ``port = 0`` turns the HTTP server off. The default port (18083, like
  EMQX's dashboard) is on 127.0.0.1 whatever the MQTT ``host`` is: the admin
  API is reachable from other machines only when ``[http] host`` says so.
- ``usersFile`` defaults to ``<dataDir>/http_users``; the file need not exist
  (then every authenticated request is refused, saying how to add a user).
- ``certFile`` turns HTTPS on (``keyFile``: its key, "" = inside certFile).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from gateway.config import ConfigError

DEFAULT_HTTP_PORT = 18083
HTTP_KEYS = frozenset({"port", "host", "usersFile", "certFile", "keyFile", "metricsAuth", "tokenTtl"})
USERS_FILE_NAME = "http_users"


@dataclass(frozen=True)
class HttpSettings:
    port: int = DEFAULT_HTTP_PORT
    host: str = "127.0.0.1"
    users_file: Path = Path("./data") / USERS_FILE_NAME
    cert_file: str = ""
    key_file: str = ""
    metrics_auth: bool = False  # /metrics asks for credentials too
    token_ttl: float = 3600.0  # seconds a login token lives

    @property
    def tls(self) -> bool:
        return bool(self.cert_file)

    @classmethod
    def from_dict(cls, table: Mapping[str, Any], *, data_dir: Path, port: int | None = None) -> HttpSettings:
        """From the ``[http]`` table (``port`` taken out by ``gateway.config``, given here)."""
        unknown = set(table) - HTTP_KEYS
        if unknown:
            raise ConfigError(f"[http] unknown key {sorted(unknown)[0]!r}; known: {sorted(HTTP_KEYS)}")

        def get(key: str, default: Any, kind: type | tuple) -> Any:
            value = table.get(key, default)
            if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
                name = kind.__name__ if isinstance(kind, type) else "a number"
                raise ConfigError(f"[http] {key} must be {name}, not {value!r}")
            return value

        ttl = get("tokenTtl", 3600, (int, float))
        if ttl <= 0:
            raise ConfigError(f"[http] tokenTtl must be > 0 seconds, not {ttl!r}")
        cert = get("certFile", "", str)
        key = get("keyFile", "", str)
        if key and not cert:
            raise ConfigError("[http] keyFile is set without certFile")
        for what, path in (("certFile", cert), ("keyFile", key)):
            if path and not Path(path).is_file():
                raise ConfigError(f"[http] {what}: {path} is not a readable file")
        users = get("usersFile", "", str)
        return cls(port=DEFAULT_HTTP_PORT if port is None else port, host=get("host", "127.0.0.1", str),
                   users_file=Path(users) if users else Path(data_dir) / USERS_FILE_NAME,
                   cert_file=cert, key_file=key, metrics_auth=get("metricsAuth", False, bool),
                   token_ttl=float(ttl))
