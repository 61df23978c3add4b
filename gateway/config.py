"""The one configuration file (TOML) and its command-line overrides.

Layout of the file; every key is optional and documented in README.md::

    dataDir = "./data"          # storePathRootDir

    [broker]                    # RocketMQ BrokerConfig / MessageStoreConfig names
    brokerName = "broker-a"
    flushDiskType = "ASYNC_FLUSH"
    listenPort = 10911          # native remoting port; 0 disables it

    [namesrv]
    listenPort = 9876           # 0 disables the embedded name server

    [mqtt]                      # listeners, security and limits of the MQTT edge
    port = 1883
    wsPort = 8083

    [http]                      # /metrics and the admin API (gateway.http.settings)
    port = 18083

    [events]                    # event rules: the event API's port (gateway.http.events_settings)
    port = 0                    # 0 (the default) = no event API

    [proxy]                     # RocketMQ 5 gRPC MessagingService (core.proxy)
    grpcPort = 8081             # 0 disables it

    [log]                       # levels per logger, format, file (gateway.logs)
    level = "INFO"

Rules kept here:
- A key the file does not know is an error naming the key and its table,
  never silently ignored (a typo must not leave a default in force).
- Command-line flags override the file; the file overrides defaults.
- Port 0 means "this listener is off".
- Relative paths in the file (``PATH_KEYS``) are relative to the file's
  folder; relative paths given as flags are relative to the working directory.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """The configuration file or a flag is wrong; the message says where."""


DEFAULT_MQTT_PORT = 1883
DEFAULT_WS_PORT = 8083
DEFAULT_TLS_PORT = 8883
DEFAULT_NAMESRV_PORT = 9876
DEFAULT_BROKER_PORT = 10911


@dataclass
class ServeConfig:
    """What `mqgate serve` runs: tables are passed on to their rooms as dicts."""

    data_dir: Path = Path("./data")
    host: str = "127.0.0.1"
    mqtt_port: int = DEFAULT_MQTT_PORT
    ws_port: int = DEFAULT_WS_PORT
    namesrv_port: int = DEFAULT_NAMESRV_PORT
    broker_port: int = DEFAULT_BROKER_PORT
    flush: str = "async"  # "async" | "sync"
    broker: dict[str, Any] = field(default_factory=dict)
    namesrv: dict[str, Any] = field(default_factory=dict)
    mqtt: dict[str, Any] = field(default_factory=dict)
    http_port: int | None = None  # None: the default (18083), which may be taken (then a warning, no HTTP)
    http: dict[str, Any] = field(default_factory=dict)
    grpc_port: int | None = None  # None: the default (8081), which may be taken (then a warning, no gRPC)
    events_port: int = 0  # the event API (gateway.http.events_api); 0 = off
    events: dict[str, Any] = field(default_factory=dict)
    log: dict[str, Any] = field(default_factory=dict)
    config_file: Path | None = None  # read again on SIGHUP (the [log] levels)
    log_level_flag: str | None = None  # --log-level, which wins over [log] level, also on SIGHUP
    namesrv_addrs: list[str] = field(default_factory=list)

    @property
    def flush_disk_type(self) -> str:
        return "SYNC_FLUSH" if self.flush == "sync" else "ASYNC_FLUSH"


TABLES = ("broker", "namesrv", "mqtt", "http", "events", "proxy", "log")
PROXY_KEYS = {"grpcPort": "RocketMQ 5 gRPC port (default 8081; 0 = off)"}
_TOP_KEYS = {"dataDir", "host", "namesrvAddr", *TABLES}


def load_file(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"configuration file {path}: {e}") from None
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"configuration file {path}: unknown top-level key(s) {sorted(unknown)}; "
                          f"known: {sorted(_TOP_KEYS)}")
    for table in TABLES:
        if table in data and not isinstance(data[table], dict):
            raise ConfigError(f"configuration file {path}: [{table}] must be a table")
    return resolve_paths(data, Path(path).resolve().parent)


# Keys whose value is a file or folder: relative values are taken from the
# configuration file's folder (like nginx and Mosquitto's include_dir), so
# the file means the same whatever the working directory of the process.
PATH_KEYS = {None: ("dataDir",), "broker": ("storePathRootDir",),
             "mqtt": ("certFile", "keyFile", "caFile", "passwordFile", "aclFile"),
             "http": ("usersFile", "certFile", "keyFile"), "log": ("file",)}


def resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """``data`` with every relative path of ``PATH_KEYS`` made absolute under ``base``.

    Empty strings ("none") and values that are not strings are left alone;
    the owners of the keys refuse the latter with their own message."""
    data = dict(data)
    for table, keys in PATH_KEYS.items():
        section = data if table is None else data.get(table)
        if not isinstance(section, dict):
            continue
        section = dict(section)
        for key in keys:
            value = section.get(key)
            if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
                section[key] = str(base / value)
            elif isinstance(value, str) and value.startswith("~"):
                section[key] = str(Path(value).expanduser())
        if table is None:
            data = section
        else:
            data[table] = section
    return data


def _port(value: Any, what: str) -> int:
    if not isinstance(value, int) or not 0 <= value <= 65535:
        raise ConfigError(f"{what} must be a port number 0..65535, not {value!r}")
    return value


def build_serve_config(file_data: dict[str, Any] | None, flags: dict[str, Any]) -> ServeConfig:
    """Merge defaults, the file, then flags (flags given as None are absent)."""
    cfg = ServeConfig()
    data = file_data or {}
    if "dataDir" in data:
        cfg.data_dir = Path(data["dataDir"])
    if "host" in data:
        cfg.host = str(data["host"])
    cfg.broker = dict(data.get("broker", {}))
    cfg.namesrv = dict(data.get("namesrv", {}))
    cfg.mqtt = dict(data.get("mqtt", {}))
    cfg.http = dict(data.get("http", {}))
    cfg.events = dict(data.get("events", {}))
    cfg.log = dict(data.get("log", {}))
    addrs = data.get("namesrvAddr")
    if isinstance(addrs, str):
        cfg.namesrv_addrs = [a for a in addrs.split(";") if a]
    # Ports and flush live inside their tables in the file.
    cfg.broker_port = _port(cfg.broker.pop("listenPort", cfg.broker_port), "[broker] listenPort")
    cfg.namesrv_port = _port(cfg.namesrv.pop("listenPort", cfg.namesrv_port), "[namesrv] listenPort")
    if cfg.namesrv:
        key = sorted(cfg.namesrv)[0]
        raise ConfigError(f"[namesrv] unknown key {key!r}; the only key of [namesrv] is 'listenPort'")
    cfg.mqtt_port = _port(cfg.mqtt.pop("port", cfg.mqtt_port), "[mqtt] port")
    cfg.ws_port = _port(cfg.mqtt.pop("wsPort", cfg.ws_port), "[mqtt] wsPort")
    if "port" in cfg.http:
        cfg.http_port = _port(cfg.http.pop("port"), "[http] port")
    if "port" in cfg.events:
        cfg.events_port = _port(cfg.events.pop("port"), "[events] port")
    proxy = dict(data.get("proxy", {}))
    if "grpcPort" in proxy:
        cfg.grpc_port = _port(proxy.pop("grpcPort"), "[proxy] grpcPort")
    if proxy:
        key = sorted(proxy)[0]
        raise ConfigError(f"[proxy] unknown key {key!r}; the only key of [proxy] is 'grpcPort'")
    fdt = cfg.broker.pop("flushDiskType", None)
    if fdt is not None:
        if fdt not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise ConfigError(f"[broker] flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, not {fdt!r}")
        cfg.flush = "sync" if fdt == "SYNC_FLUSH" else "async"

    if flags.get("data_dir") is not None:
        cfg.data_dir = Path(flags["data_dir"])
    if flags.get("host") is not None:
        cfg.host = flags["host"]
    for name in ("mqtt_port", "ws_port", "namesrv_port", "broker_port", "http_port", "grpc_port", "events_port"):
        if flags.get(name) is not None:
            setattr(cfg, name, _port(flags[name], "--" + name.replace("_", "-")))
    if flags.get("flush") is not None:
        cfg.flush = flags["flush"]
    if flags.get("namesrv") is not None:
        cfg.namesrv_addrs = [a for a in flags["namesrv"].split(";") if a]
    return cfg
