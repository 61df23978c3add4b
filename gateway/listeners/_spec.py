"""What a listener is (``ListenerSpec``) and what a connection carries
(``ConnectionInfo``); the ``[mqtt]`` keys that describe the listeners."""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gateway.config import ConfigError

Transport = Literal["tcp", "tls", "ws", "wss"]
TRANSPORTS = ("tcp", "tls", "ws", "wss")

DEFAULT_PORTS = {"tcp": 1883, "tls": 8883, "ws": 8083, "wss": 8084}
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
DEFAULT_WS_PATH = "/mqtt"
# Offered by the client, picked by us in this order. "mqtt" is the name MQTT
# 3.1.1 and 5.0 define; "mqttv3.1" is what MQTT 3.1 clients (and old
# browser libraries) send, and Mosquitto accepts it too.
DEFAULT_WS_SUBPROTOCOLS = ("mqtt", "mqttv3.1")


@dataclass(frozen=True, kw_only=True)
class TlsConfig:
    """Server certificate and key, and the CA that signs client certificates.

    ``cafile`` set: clients may present a certificate (verified against it);
    ``require_certificate``: they must. Without ``cafile`` no client
    certificate is asked for."""

    certfile: str
    keyfile: str | None = None
    cafile: str | None = None
    require_certificate: bool = False

    def __post_init__(self) -> None:
        if self.require_certificate and not self.cafile:
            raise ConfigError("requireCertificate needs caFile (the CA of the client certificates)")

    def server_context(self) -> ssl.SSLContext:
        """A fresh server context; raises ConfigError for unreadable files."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        for key, path in (("certFile", self.certfile), ("keyFile", self.keyfile), ("caFile", self.cafile)):
            if path and not os.path.isfile(path):
                raise ConfigError(f"{key} {path} cannot be loaded: no such file")
        try:
            ctx.load_cert_chain(self.certfile, self.keyfile)
            if self.cafile:
                ctx.load_verify_locations(cafile=self.cafile)
        except (OSError, ssl.SSLError) as e:
            files = ", ".join(f for f in (self.certfile, self.keyfile, self.cafile) if f)
            raise ConfigError(f"TLS certificate/key/CA ({files}) cannot be loaded: {e}") from None
        if self.cafile:
            ctx.verify_mode = ssl.CERT_REQUIRED if self.require_certificate else ssl.CERT_OPTIONAL
        else:
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


@dataclass(frozen=True, kw_only=True)
class ListenerSpec:
    """One listening endpoint.

    ``port`` 0 means the listener is off (the configuration's way to disable
    it). ``ephemeral=True`` binds a port the OS chooses instead, whatever
    ``port`` says; ``serve_listeners`` reports the bound ports. Tests use it.
    """

    transport: Transport
    port: int = 0
    host: str = "127.0.0.1"
    ephemeral: bool = False
    name: str = ""  # key in the started() mapping; defaults to the transport
    tls: TlsConfig | None = None
    ws_path: str = DEFAULT_WS_PATH
    ws_subprotocols: tuple[str, ...] = DEFAULT_WS_SUBPROTOCOLS
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    backlog: int | None = None

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ConfigError(f"listener transport must be one of {TRANSPORTS}, not {self.transport!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ConfigError(f"{self.transport} port must be 0..65535, not {self.port!r}")
        if self.transport in ("tls", "wss") and self.tls is None:
            raise ConfigError(f"the {self.transport} listener needs a TlsConfig (certFile)")
        if not self.ws_path.startswith("/"):
            raise ConfigError(f"wsPath must start with '/', not {self.ws_path!r}")
        if not self.handshake_timeout > 0:
            raise ConfigError(f"handshakeTimeout must be > 0, not {self.handshake_timeout!r}")
        if not self.name:
            object.__setattr__(self, "name", self.transport)

    @property
    def enabled(self) -> bool:
        return self.ephemeral or self.port != 0

    @property
    def is_tls(self) -> bool:
        return self.transport in ("tls", "wss")

    @property
    def is_websocket(self) -> bool:
        return self.transport in ("ws", "wss")


@dataclass(frozen=True)
class CertIdentity:
    """The verified client certificate's subject.

    ``subject`` is the RFC 4514 string (most specific part first, as
    ``openssl x509 -subject -nameopt RFC2253`` and Mosquitto's
    ``use_subject_as_username`` print it), e.g. ``CN=dev1,O=Acme,C=DE``."""

    common_name: str | None
    subject: str


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    transport: Transport
    listener: str  # ListenerSpec.name
    peer: tuple[str, int]  # (address, port)
    local_port: int
    connection_id: int  # unique in the process, increasing
    certificate: CertIdentity | None = None  # TLS with a verified client certificate
    ws_subprotocol: str | None = None  # WebSocket: the subprotocol agreed


@dataclass
class ListenerStats:
    """Counters over all listeners of one ``serve_listeners`` (for $SYS)."""

    accepted: int = 0  # sockets accepted, refused ones included
    active: int = 0  # connections now handed to the handler or in handshake
    refused: int = 0  # closed at once because maxConnections was reached
    handshake_failures: int = 0  # TLS or WebSocket handshake failed or timed out
    handler_errors: int = 0  # the handler raised (a bug or a broken peer)


# --- the [mqtt] table --------------------------------------------------------

LISTENER_KEYS = frozenset({
    "port", "wsPort", "tlsPort", "wssPort", "wsPath", "certFile", "keyFile", "caFile",
    "requireCertificate", "handshakeTimeout",
})


def listener_specs_from_dict(table: Mapping[str, Any], *, host: str = "127.0.0.1",
                             port: int | None = None, ws_port: int | None = None) -> list[ListenerSpec]:
    """The listeners the ``[mqtt]`` table asks for (other keys are ignored).

    ``port``/``ws_port`` (already taken out of the table by ``gateway.config``)
    win over the table's ``port``/``wsPort``. TLS and WSS listeners start
    only when ``certFile`` is set; their ports default to 8883 and 8084. A
    ``tlsPort``/``wssPort`` set in the table without ``certFile`` is an error.
    """
    def get(key: str, default: Any, kind: type | tuple[type, ...]) -> Any:
        value = table.get(key, default)
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            raise ConfigError(f"[mqtt] {key} must be {getattr(kind, '__name__', 'a number')}, "
                              f"not {value!r}")
        return value

    ports = {
        "tcp": port if port is not None else get("port", DEFAULT_PORTS["tcp"], int),
        "ws": ws_port if ws_port is not None else get("wsPort", DEFAULT_PORTS["ws"], int),
        "tls": get("tlsPort", DEFAULT_PORTS["tls"], int),
        "wss": get("wssPort", DEFAULT_PORTS["wss"], int),
    }
    certfile = get("certFile", "", str)
    for key in ("tlsPort", "wssPort"):
        if table.get(key) and not certfile:  # asked for explicitly: never silently off
            raise ConfigError(f"[mqtt] {key} = {table[key]} needs certFile (the server certificate, PEM); "
                              f"set certFile, or {key} = 0")
    tls = None
    if certfile:
        tls = TlsConfig(certfile=certfile, keyfile=get("keyFile", "", str) or None,
                        cafile=get("caFile", "", str) or None,
                        require_certificate=get("requireCertificate", False, bool))
    common = dict(host=host, ws_path=get("wsPath", DEFAULT_WS_PATH, str),
                  handshake_timeout=float(get("handshakeTimeout", DEFAULT_HANDSHAKE_TIMEOUT,
                                              (int, float))))
    specs = []
    for transport in TRANSPORTS:
        if ports[transport] == 0 or (transport in ("tls", "wss") and tls is None):
            continue
        specs.append(ListenerSpec(transport=transport, port=ports[transport],  # type: ignore[arg-type]
                                  tls=tls if transport in ("tls", "wss") else None, **common))
    return specs
