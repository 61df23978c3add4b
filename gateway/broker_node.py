"""One broker process's parts, run for its current replication role.

`run_broker_node` is what ``serve`` and ``broker`` start for the broker side:
store, timers, remoting (with the HA requests), the HA link, and, on a
master under ``serve``, the MQTT gateway.  A role change (an operator's
``mqgate admin ha promote``, or the etcd controller) stops every part and
starts them again in the new role over the same data directory: a slave
promoted to master opens its store, records its epoch, serves the HA port,
and its MQTT gateway restores sessions, retained messages and wills from the
replicated records; a master deposed becomes a slave of the new one, its log
cut first where the new master's history differs.

Rules kept:
- The ports stay the same across runs (the first run's bound ports are
  reused), so clients and the name server see one address per broker.
- A slave runs no MQTT listener (devices connect to the master), no timer,
  delay-level or transaction check-back delivery: it writes nothing.
- A role change is answered before the parts stop (a short grace), and the
  store is always shut down cleanly between runs.
"""

from __future__ import annotations

import errno
import logging
from functools import partial

import trio

from core import TimerMessageService
from core.broker import Broker
from core.ha import HANode, SlaveMetadataSync, ha_routes
from core.processors import BrokerRemoting
from core.remoting import RemotingClient, Route
from core.store import truncate_log

from .listeners import listener_specs_from_dict

log = logging.getLogger("mqgate")

ANSWER_GRACE_S = 0.2


async def run_broker_node(cfg, role: str, namesrv_addrs: list[str], ports: dict[str, int], broker_configs,
                          *, reloader=None, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """``reloader`` (``gateway.reloading.Reloader``, optional): the gateway's files
    that SIGHUP reads again are registered there while the gateway runs."""
    broker_cfg, store_cfg, timer_cfg = broker_configs(cfg)
    node = HANode(broker_cfg, store_cfg.store_path_root_dir)
    broker_port = cfg.broker_port
    started = False
    async with trio.open_nursery() as outer:
        node.rc = RemotingClient(outer)
        if broker_cfg.etcd_endpoints:
            from core.ha import Controller

            node.controller = Controller(node, broker_cfg)
            await outer.start(node.controller.run)
        else:
            await node.find_newer_master(namesrv_addrs)
        while True:
            if node.cut_to is not None:
                cut = await trio.to_thread.run_sync(truncate_log, store_cfg.store_path_root_dir,
                                                    store_cfg.mapped_file_size_commit_log, node.cut_to)
                log.warning("commit log cut at offset %d (%d bytes the new master never had)", node.cut_to, cut)
                node.cut_to = None
            async with trio.open_nursery() as nursery:
                broker_port = await _start_parts(nursery, node, cfg, role, namesrv_addrs, ports, broker_port,
                                                 store_cfg, timer_cfg, reloader)
                if not started:
                    started = True
                    task_status.started()
                change = await node.wait_change()
                await trio.sleep(ANSWER_GRACE_S)
                nursery.cancel_scope.cancel()
            node.stopped()
            node.apply(change)


async def _start_grpc(nursery: trio.Nursery, broker, cfg, ports: dict[str, int], transactions=None) -> None:
    """RocketMQ 5's gRPC MessagingService (``core.proxy``) on a master: the default
    port (8081) may be taken by another server (then a warning, no gRPC); a
    port given in the file or a flag must be free."""
    from core.proxy import DEFAULT_GRPC_PORT, run_grpc

    port = DEFAULT_GRPC_PORT if cfg.grpc_port is None else cfg.grpc_port
    try:
        bound = await nursery.start(partial(run_grpc, broker, cfg.host, port, transactions=transactions))
    except OSError as e:
        if cfg.grpc_port is not None or e.errno != errno.EADDRINUSE:
            raise
        log.warning("gRPC port %d on %s is in use (another mqgate or RocketMQ proxy?): no 5.x clients in this "
                    "process; set [proxy] grpcPort (0 = off) to choose", port, cfg.host)
        return
    ports["grpc"] = bound
    log.info("RocketMQ 5 gRPC listening on %s:%d", cfg.host, bound)
    if cfg.host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("RocketMQ 5 gRPC on %s:%d takes requests from anyone who reaches it (no TLS, no access keys "
                    "yet): keep it on a trusted network, or set [proxy] grpcPort = 0", cfg.host, bound)


def _broker_view(broker, node: HANode, remoting):
    from .http import BrokerView

    return BrokerView(broker, ha_status=node.status,
                      transactions=remoting.transactions.stats if remoting is not None else None,
                      replication_latency=lambda: node.service.latency if node.service else None,
                      clients=remoting.ctx.clients if remoting is not None else None)


async def _start_http(nursery: trio.Nursery, cfg, gw, view, ports: dict[str, int], reloader=None,
                      events=None, namesrv_addrs: list[str] = ()) -> None:
    """The one HTTP server: over the MQTT gateway ``gw`` and the broker (and the event
    rules' ``events`` service: the dashboard's event-rules page; the name servers: its
    admin actions), or (``gw`` None, a broker alone) the broker's /metrics."""
    from .http import HttpSettings, Users, run_http

    http = HttpSettings.from_dict(cfg.http, data_dir=cfg.data_dir, port=cfg.http_port)
    users = Users(http.users_file, token_ttl=http.token_ttl)
    port = await nursery.start(partial(run_http, gw, http, broker=view, users=users,
                                       explicit_port=cfg.http_port is not None, events=events,
                                       namesrv=list(namesrv_addrs)))
    if reloader is not None and port is not None:
        reloader.add("HTTP users file", users.reload)
    if port is not None:
        ports["http"] = port


async def _start_events(nursery: trio.Nursery, cfg, broker, namesrv_addrs: list[str], gw, ports: dict[str, int]):
    """Event rules (``core.events``) on a master under ``serve``: their deliveries are consumer
    groups over the remoting port; MQTT targets publish through ``gw`` (None: no MQTT listener,
    such targets fail with that reason). The event API when ``[events] port`` is set. The
    running service, or None when there is no name server."""
    from core.events import EventService

    from .http import HttpSettings, Users
    from .http.events_api import run_events_http
    from .http.events_settings import EventsSettings

    settings = EventsSettings.from_dict(cfg.events, port=cfg.events_port)
    service = EventService(broker, namesrv_addrs, mqtt_publish=gw.publish_from_server if gw else None,
                           bus_queues=settings.bus_queues, counts_interval=settings.counts_interval,
                           orderly_suspend_ms=settings.orderly_retry_ms)
    if not service.namesrv:
        log.warning("event rules need a name server (their deliveries are consumer groups): none is set, "
                    "so no event rules run in this process")
        return None
    await nursery.start(service.run)
    if settings.port:
        http = HttpSettings.from_dict(cfg.http, data_dir=cfg.data_dir, port=cfg.http_port)
        users = Users(http.users_file, token_ttl=http.token_ttl)
        ports["events"] = await nursery.start(partial(run_events_http, service, users, settings.host, settings.port,
                                                      cert_file=http.cert_file, key_file=http.key_file))
    return service


async def _start_parts(nursery: trio.Nursery, node: HANode, cfg, role: str, namesrv_addrs: list[str],
                       ports: dict[str, int], broker_port: int, store_cfg, timer_cfg, reloader=None) -> int:
    run_cfg = node.run_config()
    broker = await nursery.start(Broker(run_cfg, store_cfg).run)
    log.info("store at %s opened (%s)", cfg.data_dir, broker.recovery_report)
    timers = TimerMessageService(broker, timer_cfg)
    timers.install()  # timers are accepted (parked) from the first send
    broker.timers = timers
    ha_addr = await node.start_master(nursery, broker, cfg.host) if node.is_master else ""
    if broker_port:
        remoting = BrokerRemoting(broker, cfg.host, broker_port, namesrv_addrs, ha_server_addr=ha_addr,
                                  extra_routes=ha_routes(node, Route))
        broker_port = ports["broker"] = await nursery.start(remoting.run)
        node.registrar = remoting.registrar
        node.own_addr = remoting.addr
        log.info("broker remoting listening on %s:%d (name servers %s)", cfg.host, broker_port,
                 ";".join(namesrv_addrs) or "none")
    if node.is_master and cfg.grpc_port != 0:
        await _start_grpc(nursery, broker, cfg, ports, remoting.transactions if broker_port else None)
    view = _broker_view(broker, node, remoting if broker_port else None)
    if role == "broker" and cfg.http_port:  # a broker alone: /metrics only, when a port is set
        await _start_http(nursery, cfg, None, view, ports, reloader)
    if not node.is_master:
        await node.start_slave(nursery, broker)
        if broker_port:  # topics, offsets, groups and delay offsets follow the master's (4.x SlaveSynchronize)
            node.metadata = SlaveMetadataSync(broker, node.rc, node.master_addr, schedule=remoting.schedule,
                                              wake=remoting.registrar.master_changed)
            await nursery.start(node.metadata.run)
        return broker_port
    gw = None
    # any MQTT listener counts (TCP, WebSocket, TLS or WSS): each is on or off by itself
    if role == "serve" and listener_specs_from_dict(cfg.mqtt, host=cfg.host, port=cfg.mqtt_port, ws_port=cfg.ws_port):
        from .app import make_mqtt_gateway  # logs each MQTT endpoint it listens on

        gw, specs = make_mqtt_gateway(broker, cfg.mqtt, host=cfg.host, mqtt_port=cfg.mqtt_port, ws_port=cfg.ws_port)
        bound = await nursery.start(gw.run, specs)
        for name, port in (bound or {}).items():
            ports[f"mqtt-{name}"] = port
        if reloader is not None:
            reloader.add("MQTT password file", gw.settings.authenticator.reload)
            reloader.add("ACL file", gw.settings.acl.reload)
    events = None
    if role == "serve" and broker_port:
        events = await _start_events(nursery, cfg, broker, namesrv_addrs, gw, ports)
    if gw is not None and cfg.http_port != 0:
        await _start_http(nursery, cfg, gw, view, ports, reloader, events=events, namesrv_addrs=namesrv_addrs)
    # firing starts once the gateway has restored its sessions and hooks: a timer due during a
    # restart must reach persistent sessions and the retained index like one due later
    await nursery.start(timers.run)
    return broker_port
