"""Assemble one process: name server, broker (store, timers, remoting) and MQTT gateway.

The roles: ``serve`` runs everything whose port is not 0; ``namesrv`` only
the name server; ``broker`` the broker with its remoting listener and no
MQTT edge.

Rules kept here:
- Every part is started with ``nursery.start``: when the "ready" line is
  logged, every listener is bound and the store has recovered.
- SIGINT or SIGTERM cancels the one nursery. Listeners stop accepting; the
  broker's shielded shutdown persists offsets and topics, flushes the log
  and removes the ``abort`` marker (a clean shutdown). A second signal
  during shutdown is ignored; the shutdown itself is bounded in time.
- The embedded name server, when on, is always one of the broker's name
  servers, before any given with ``--namesrv`` or ``namesrvAddr``.
"""

from __future__ import annotations

import logging
import signal
from functools import partial

import trio

from core.broker import Broker, configs_from_dict
from core.broker.config import ConfigError as BrokerConfigError
from core.namesrv import run_namesrv
from core.processors.runner import run_broker_remoting
from core.timers import TimerConfig, TimerMessageService

from .config import ConfigError, ServeConfig

log = logging.getLogger("mqgate")

# [broker] keys that configure the timer wheel (RocketMQ 5 names)
_TIMER_KEYS = {
    "timerWheelEnable": "enabled",
    "timerPrecisionMs": "precision_ms",
    "timerMaxDelaySec": "max_delay_s",
    "timerRollWindowSlot": "roll_window_slots",
}


def split_timer_config(table: dict) -> tuple[dict, TimerConfig]:
    """Take the timer keys out of a [broker] table; the rest is the broker's."""
    rest = dict(table)
    values = {field: rest.pop(key) for key, field in _TIMER_KEYS.items() if key in rest}
    try:
        return rest, TimerConfig(**values)
    except TypeError as e:  # pragma: no cover - keys are fixed above
        raise ConfigError(str(e)) from None


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


async def _stop_on_signal(cancel_scope: trio.CancelScope, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            log.info("%s received: stopping", signal.Signals(signum).name)
            cancel_scope.cancel()
            return


async def serve(cfg: ServeConfig, role: str = "serve", *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run the parts of ``role`` until cancelled; ``started`` reports the bound ports."""
    ports: dict[str, int] = {}
    async with trio.open_nursery() as nursery:
        namesrv_addrs = list(cfg.namesrv_addrs)
        if cfg.namesrv_port and role in ("serve", "namesrv"):
            ports["namesrv"] = await nursery.start(run_namesrv, cfg.host, cfg.namesrv_port)
            log.info("name server listening on %s:%d", cfg.host, ports["namesrv"])
            local = "127.0.0.1" if cfg.host in ("0.0.0.0", "::", "") else cfg.host
            namesrv_addrs.insert(0, f"{local}:{ports['namesrv']}")
        if role in ("serve", "broker"):
            broker_cfg, store_cfg, timer_cfg = broker_configs(cfg)
            for addr in broker_cfg.namesrv_addr.split(";"):  # [broker] namesrvAddr counts too
                if addr and addr not in namesrv_addrs:
                    namesrv_addrs.append(addr)
            broker = await nursery.start(Broker(broker_cfg, store_cfg).run)
            report = broker.recovery_report
            log.info("store at %s opened (%s)", cfg.data_dir, report)
            timers = TimerMessageService(broker, timer_cfg)
            broker.add_put_hook(timers.put_hook)
            await nursery.start(timers.run)
            broker.timers = timers
            if cfg.broker_port:
                ports["broker"] = await nursery.start(run_broker_remoting, broker, cfg.host, cfg.broker_port, namesrv_addrs)
                log.info("broker remoting listening on %s:%d (name servers %s)", cfg.host, ports["broker"],
                         ";".join(namesrv_addrs) or "none")
            if role == "serve" and (cfg.mqtt_port or cfg.ws_port):
                from .app import run_mqtt_gateway

                bound = await nursery.start(partial(run_mqtt_gateway, broker, cfg.mqtt, host=cfg.host,
                                                    mqtt_port=cfg.mqtt_port, ws_port=cfg.ws_port))
                for name, port in (bound or {}).items():
                    ports[f"mqtt-{name}"] = port
                    log.info("MQTT %s listening on %s:%d", name, cfg.host, port)
        log.info("ready: %s", " ".join(f"{k}={v}" for k, v in ports.items()) or "nothing to serve")
        task_status.started(ports)
        await trio.sleep_forever()


async def _main(cfg: ServeConfig, role: str) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(_stop_on_signal, nursery.cancel_scope)
        await nursery.start(serve, cfg, role)
        # serve runs until the signal task cancels the nursery


def run_server(cfg: ServeConfig, role: str = "serve") -> int:
    if role in ("serve", "broker"):
        broker_configs(cfg)  # a bad key is a ConfigError here, before anything starts
    try:
        trio.run(_main, cfg, role)
    except KeyboardInterrupt:  # a signal that arrived before the receiver was installed
        pass
    log.info("stopped cleanly")
    return 0
