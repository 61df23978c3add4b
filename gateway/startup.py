"""What a person reads when `mqgate` cannot start or stops on an error: one line
and an exit status.

Rules kept here:
- A configuration or usage error (a ``ConfigError``, wherever it was raised)
  is exit status 2; a failure of the running server (a port in use, the data
  directory locked by another process, a disk error) is status 1.
- The line names the port, path or key and says what to do. The traceback is
  for ``--log-level DEBUG`` only (then printed before the line).
- trio's exception groups are looked through: the leaf that explains itself
  best is reported (a configuration error first, then a known runtime one).
"""

from __future__ import annotations

import errno
import re

from core.store import StoreError, StoreLockedError

from .config import ConfigError, ServeConfig

EXIT_RUNTIME = 1
EXIT_CONFIG = 2
_DEBUG_HINT = "run with --log-level DEBUG for the traceback"


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``'s (nested) groups, in order; ``[exc]`` for a plain one."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in leaves(sub)]
    return [exc]


def _port_owners(cfg: ServeConfig) -> dict[int, str]:
    owners = {}
    mqtt = cfg.mqtt
    for port, what in ((mqtt.get("wssPort"), "MQTT over WebSocket over TLS, [mqtt] wssPort"),
                       (mqtt.get("tlsPort"), "MQTT over TLS, [mqtt] tlsPort"),
                       (cfg.ws_port, "MQTT over WebSocket, --ws-port or [mqtt] wsPort"),
                       (cfg.mqtt_port, "MQTT over TCP, --mqtt-port or [mqtt] port"),
                       (cfg.broker_port, "broker remoting, --broker-port or [broker] listenPort"),
                       (cfg.namesrv_port, "name server, --namesrv-port or [namesrv] listenPort"),
                       (cfg.http_port, "HTTP API and /metrics, --http-port or [http] port"),
                       (cfg.grpc_port, "RocketMQ 5 gRPC, --grpc-port or [proxy] grpcPort")):
        if isinstance(port, int) and port:
            owners[port] = what
    return owners


def _socket_line(leaf: OSError, cfg: ServeConfig) -> str | None:
    owners = _port_owners(cfg)
    port = next((int(n) for n in re.findall(r"\b\d{1,5}\b", str(leaf)) if int(n) in owners), None)
    where = f"port {port} on {cfg.host} ({owners[port]})" if port is not None else f"a port on {cfg.host}"
    if leaf.errno == errno.EADDRINUSE:
        return f"{where} is already in use; stop the program using it or choose another port"
    if leaf.errno == errno.EACCES:
        return f"{where}: permission denied (ports below 1024 need privileges); choose a port >= 1024"
    if leaf.errno == errno.EADDRNOTAVAIL:
        return f"{where}: address {cfg.host} is not one of this machine's; check --host or host"
    return None


def explain(exc: BaseException, cfg: ServeConfig | None) -> tuple[str, int]:
    """(one line without the ``mqgate:`` prefix, exit status) for ``exc``."""
    found = leaves(exc)
    for leaf in found:
        if isinstance(leaf, ConfigError):
            return str(leaf), EXIT_CONFIG
    for leaf in found:
        if isinstance(leaf, StoreLockedError):
            return (f"{leaf}: another mqgate is running on this data directory; stop it or choose "
                    f"another --data-dir"), EXIT_RUNTIME
        if isinstance(leaf, OSError) and cfg is not None:
            line = _socket_line(leaf, cfg)
            if line:
                return line, EXIT_RUNTIME
        if isinstance(leaf, StoreError):
            return f"store: {leaf}", EXIT_RUNTIME
    leaf = found[0]
    if isinstance(leaf, OSError) and leaf.filename:
        return f"{leaf.filename}: {leaf.strerror} ({_DEBUG_HINT})", EXIT_RUNTIME
    text = str(leaf).splitlines()[0] if str(leaf) else ""
    return f"{type(leaf).__name__}: {text} ({_DEBUG_HINT})", EXIT_RUNTIME
