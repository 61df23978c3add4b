"""Assemble one process: name server, broker (store, timers, remoting) and MQTT gateway.

The roles: ``serve`` runs everything whose port is not 0; ``namesrv`` only
the name server; ``broker`` the broker with its remoting listener and no
MQTT edge.

Rules kept here:
- Every part is started with ``nursery.start``: when the "ready" line is
  logged, every listener is bound and the store has recovered.
- SIGINT or SIGTERM stops the MQTT edge and the broker first: listeners stop
  accepting; the broker's shielded shutdown persists offsets and topics,
  flushes the log and removes the ``abort`` marker (a clean shutdown); then
  the embedded name server stops. A second signal during shutdown is
  ignored; the shutdown itself is bounded in time.
- A server process (``run_server``, not an in-process ``serve``) tunes the
  garbage collector: one full collection before anything starts
  (`collect_before_start`), and once it is ready (`settle_gc`) what
  start-up made is frozen out of collections, and collections run every
  `GC_THRESHOLD` allocations of containers rather than CPython's 700.
  Nothing is collected once a listener is open: a client may be there.
- SIGHUP reloads the MQTT password file, the ACL file, the HTTP users file
  and the ``[log]`` levels (``gateway.reloading``); connections stay.
- The embedded name server, when on, is always one of the broker's name
  servers, before any given with ``--namesrv`` or ``namesrvAddr``.
"""

from __future__ import annotations

import gc
import logging
import signal
from functools import partial
from typing import Any

import trio

from core import TimerConfig
from core.broker import ConfigError as BrokerConfigError
from core.broker import configs_from_dict
from core.namesrv import run_namesrv
from core.store import MAX_DELAY_FIELD_MS, PRECISIONS_MS, ROLL_WINDOW_MARGIN_SLOTS

from .config import ConfigError, ServeConfig
from .listeners import listener_specs_from_dict
from .reloading import Reloader

log = logging.getLogger("mqgate")

# [broker] keys that configure the timer wheel (RocketMQ 5 names)
_TIMER_KEYS = {
    "timerWheelEnable": "enabled",
    "timerPrecisionMs": "precision_ms",
    "timerMaxDelaySec": "max_delay_s",
    "timerRollWindowSlot": "roll_window_slots",
}
# The timer log keeps a unit's delay as a signed 32-bit count of ms.
TIMER_MAX_DELAY_LIMIT_S = MAX_DELAY_FIELD_MS // 1000  # 2147483 s, 24.8 days
# TimerWheelStore keeps some slots out of the roll window; the TOML file
# cannot change the slot count, so its default bounds the key.
TIMER_ROLL_WINDOW_LIMIT = TimerConfig().slots_total - ROLL_WINDOW_MARGIN_SLOTS
# Container allocations between two young-generation collections (CPython's
# default is 700): a read of a few hundred PUBLISHes keeps several objects per
# message alive until its batch is stored, and each collection in between
# walks them all again (docs/PERFORMANCE.md).
GC_THRESHOLD = 50_000


def _timer_int(key: str, value: Any, low: int, high: int | None, allowed: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise ConfigError(f"[broker] {key} must be an integer {allowed}, not {value!r}")
    return value


def _check_timer_value(key: str, value: Any) -> Any:
    """The value of one timer key, or a ConfigError naming key, value and range.

    TOML gives real booleans and integers: a string such as ``"10"`` is
    refused, not converted (the timer path compares it with numbers).
    """
    if key == "timerWheelEnable":
        if not isinstance(value, bool):
            raise ConfigError(f"[broker] timerWheelEnable must be true or false, not {value!r}")
        return value
    if key == "timerPrecisionMs":
        return _timer_int(key, value, PRECISIONS_MS[0], None,
                          f">= {PRECISIONS_MS[0]} (ms: 100, 200, 500 or 1000; others round down to one of these)")
    if key == "timerMaxDelaySec":
        return _timer_int(key, value, 1, TIMER_MAX_DELAY_LIMIT_S,
                          f"in 1..{TIMER_MAX_DELAY_LIMIT_S} (seconds; the timer log stores a delay as a signed "
                          f"32-bit ms count, so at most 24.8 days)")
    assert key == "timerRollWindowSlot"
    return _timer_int(key, value, 1, TIMER_ROLL_WINDOW_LIMIT,
                      f"in 1..{TIMER_ROLL_WINDOW_LIMIT} (slots; the wheel has {TimerConfig().slots_total} "
                      f"and keeps {ROLL_WINDOW_MARGIN_SLOTS} of them out of the window)")


def split_timer_config(table: dict) -> tuple[dict, TimerConfig]:
    """Take the timer keys out of a [broker] table; the rest is the broker's.

    Every value is checked here, before anything starts: a bad one is a
    `ConfigError` at start, never a failure of the first timer send.
    """
    rest = dict(table)
    values = {field: _check_timer_value(key, rest.pop(key)) for key, field in _TIMER_KEYS.items() if key in rest}
    return rest, TimerConfig(**values)


def broker_configs(cfg: ServeConfig):
    table, timer_cfg = split_timer_config(cfg.broker)
    table.setdefault("storePathRootDir", str(cfg.data_dir))
    table["flushDiskType"] = cfg.flush_disk_type
    table["listenPort"] = cfg.broker_port
    if cfg.host not in ("0.0.0.0", "::", ""):
        table.setdefault("brokerIP1", cfg.host)
    try:
        broker_cfg, store_cfg = configs_from_dict(table)
    except BrokerConfigError as e:
        raise ConfigError(f"[broker] {e}") from None
    return broker_cfg, store_cfg, timer_cfg


async def _reload_on_hangup(reloader: Reloader, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """SIGHUP: password file, ACL, HTTP users and log levels read again (``gateway.reloading``);
    nothing else changes and no connection is dropped."""
    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        task_status.started()
        async for _signum in signals:
            log.info("SIGHUP received: reloading")
            # on the event loop, not a thread: the parts' state is read there without locks
            # (the files are small, and a SIGHUP is rare)
            reloader.reload()


def _log_levels_reload(cfg: ServeConfig):
    def reload() -> None:
        from .config import load_file
        from .logs import LogSettings, apply_levels

        table = load_file(cfg.config_file).get("log", {}) if cfg.config_file else {}
        apply_levels(LogSettings.from_dict(table, level_flag=cfg.log_level_flag))
    return reload


async def _stop_on_signal(stop: trio.Event, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            log.info("%s received: stopping", signal.Signals(signum).name)
            stop.set()
            return


async def serve(cfg: ServeConfig, role: str = "serve", *, stop: trio.Event | None = None,
                reloader: Reloader | None = None, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run the parts of ``role`` until ``stop`` is set (or until cancelled);
    ``started`` reports the bound ports.

    Stopping is ordered: the MQTT edge and the broker first (the broker
    unregisters from the name servers and shuts its store down cleanly), the
    embedded name server last.
    """
    ports: dict[str, int] = {}
    async with trio.open_nursery() as names:
        namesrv_addrs = list(cfg.namesrv_addrs)
        if cfg.namesrv_port and role in ("serve", "namesrv"):
            ports["namesrv"] = await names.start(run_namesrv, cfg.host, cfg.namesrv_port)
            log.info("name server listening on %s:%d", cfg.host, ports["namesrv"])
            local = "127.0.0.1" if cfg.host in ("0.0.0.0", "::", "") else cfg.host
            namesrv_addrs.insert(0, f"{local}:{ports['namesrv']}")
        async with trio.open_nursery() as nursery:
            if role in ("serve", "broker"):
                await _start_broker(nursery, cfg, role, namesrv_addrs, ports, reloader)
            if not ports:
                log.warning("nothing to serve: every listener is off (port 0); see docs/CONFIG.md for the ports")
            log.info("ready: %s", " ".join(f"{k}={v}" for k, v in ports.items()) or "nothing to serve")
            task_status.started(ports)
            await (stop.wait() if stop is not None else trio.sleep_forever())
            nursery.cancel_scope.cancel()
        names.cancel_scope.cancel()


async def _start_broker(nursery: trio.Nursery, cfg: ServeConfig, role: str, namesrv_addrs: list[str],
                        ports: dict[str, int], reloader: Reloader | None = None) -> None:
    from .broker_node import run_broker_node

    broker_cfg, _store_cfg, _timer_cfg = broker_configs(cfg)
    for addr in broker_cfg.namesrv_addr.split(";"):  # [broker] namesrvAddr counts too
        if addr and addr not in namesrv_addrs:
            namesrv_addrs.append(addr)
    await nursery.start(partial(run_broker_node, cfg, role, namesrv_addrs, ports, broker_configs, reloader=reloader))


async def _main(cfg: ServeConfig, role: str) -> None:
    stop = trio.Event()
    reloader = Reloader()
    reloader.add("log levels", _log_levels_reload(cfg))
    async with trio.open_nursery() as nursery:
        await nursery.start(_stop_on_signal, stop)
        await nursery.start(_reload_on_hangup, reloader)
        async with trio.open_nursery() as server:
            await server.start(partial(serve, cfg, role, stop=stop, reloader=reloader))
            settle_gc()
        nursery.cancel_scope.cancel()


def collect_before_start() -> None:
    """Before anything starts: free the garbage the imports and the
    configuration made, and freeze the rest (modules, classes: about 58,000
    objects) out of the collector's sight. This full collection takes
    25-30 ms; done here, no client waits for it."""
    gc.collect()
    gc.freeze()


def settle_gc() -> None:
    """Once the server is up: move what start-up made (the broker's tables,
    the gateway, the listeners: objects that live as long as the process)
    out of the collector's sight, so that a full collection walks only what
    came later; and collect the young generation every `GC_THRESHOLD`
    container allocations. Called by the server process only: an
    in-process ``serve`` (the tests) leaves its host's collector alone.
    Reference counting frees everything that is not in a cycle as before;
    cycles wait a little longer to be freed.

    No collection here: the listeners are open, and a client that connected
    at once waited for it (a full collection at this point took 30-43 ms of
    the event loop, the first messages of a load started with the server
    took that much longer; L0/L1's worst latency in about one run in
    three). At this point one found nothing to free (0 unreachable objects,
    ``serve`` with every part on); what start-up might leave in a cycle is
    frozen with the rest, once."""
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, gen1, gen2)


def check_mqtt_config(cfg: ServeConfig) -> None:
    """The whole ``[mqtt]`` table, its files (password, ACL, certificates) included:
    a ConfigError here, before any port is bound, not from inside the running gateway."""
    from .settings import GatewaySettings

    try:
        GatewaySettings.from_dict(cfg.mqtt)
        for spec in listener_specs_from_dict(cfg.mqtt, host=cfg.host, port=cfg.mqtt_port, ws_port=cfg.ws_port):
            if spec.tls is not None:
                spec.tls.server_context()
    except ConfigError as e:
        raise ConfigError(str(e) if str(e).startswith("[mqtt]") else f"[mqtt] {e}") from None


def check_http_config(cfg: ServeConfig) -> None:
    """The ``[http]`` table and its users file: a ConfigError before any port is bound."""
    from .http import HttpSettings, read_users_file
    from .http.users import UsersFileError

    settings = HttpSettings.from_dict(cfg.http, data_dir=cfg.data_dir, port=cfg.http_port)
    try:
        read_users_file(settings.users_file)
    except UsersFileError as e:
        raise ConfigError(f"[http] usersFile: {e}") from None


def proxy_security(cfg: ServeConfig):
    """``[proxy]`` certFile/keyFile and aclFile read and checked: (TLS (key, chain) PEM
    bytes or None, `PlainAcl` or None); a ConfigError naming the key otherwise."""
    import ssl

    from core.processors import PlainAcl

    cert, key, acl_file = (cfg.proxy.get(k) or "" for k in ("certFile", "keyFile", "aclFile"))
    tls = acl = None
    if bool(cert) != bool(key):
        raise ConfigError("[proxy] certFile and keyFile go together: set both for TLS on the gRPC port, or neither")
    if cert:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
            tls = (open(key, "rb").read(), open(cert, "rb").read())
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"[proxy] certFile {cert} / keyFile {key}: {e}") from None
    if acl_file:
        try:
            acl = PlainAcl.from_file(acl_file)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"[proxy] aclFile {acl_file}: {type(e).__name__}: {e}") from None
    return tls, acl


def run_server(cfg: ServeConfig, role: str = "serve") -> int:
    if role in ("serve", "broker"):
        broker_configs(cfg)  # a bad key is a ConfigError here, before anything starts
        proxy_security(cfg)
    if role == "serve":
        check_mqtt_config(cfg)
        check_http_config(cfg)
        from .http.events_settings import EventsSettings

        EventsSettings.from_dict(cfg.events, port=cfg.events_port)
    elif role == "broker" and cfg.http_port:
        check_http_config(cfg)
    collect_before_start()
    try:
        trio.run(_main, cfg, role)
    except KeyboardInterrupt:  # a signal that arrived before the receiver was installed
        pass
    log.info("stopped cleanly")
    return 0
