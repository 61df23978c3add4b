"""``mqgate gateway --namesrv ADDRS``: an MQTT gateway node with no store of its own.

The MQTT edge of ``mqgate serve`` (listeners, auth, ACL, limits, ``$SYS``)
over ``gateway.remote_backend.RemoteBackend`` (the brokers the name servers
route to) and ``gateway.cluster.ClusterSync`` (the other nodes' sessions).

Rules kept here:

* The "ready" line is logged once the home broker is found, the meta
  records are replayed and every listener is bound; it names the node id.
* SIGINT or SIGTERM drains the node (``MQTTGateway.drain``: no new
  CONNECT, MQTT 5 clients get DISCONNECT 0x9C "Use another server" with
  ``[mqtt] serverReference`` when set, sessions are saved for any node to
  resume), then stops and sends the queue offsets still to be committed; a
  second signal is ignored.
* The HTTP server (``[http]``, ``--http-port``) serves /metrics, the admin
  API and the dashboard about this node's clients, without the broker's
  series (the broker serves its own /metrics).
"""

from __future__ import annotations

import logging
from functools import partial

import trio

from core.client import open_client_api, parse_namesrv

from .app import make_mqtt_gateway
from .broker_node import _start_http
from .cluster import ClusterSync
from .config import ConfigError, ServeConfig
from .nodes import new_node_id
from .remote_backend import RemoteBackend
from .serve import _stop_on_signal, check_http_config, check_mqtt_config

log = logging.getLogger("mqgate")


async def serve_gateway_node(cfg: ServeConfig, namesrv: list[str], *, node_id: str | None = None,
                             stop: trio.Event | None = None, task_status=trio.TASK_STATUS_IGNORED) -> None:
    node_id = node_id or new_node_id()
    async with open_client_api() as api:
        backend = RemoteBackend(api, namesrv, node_id=node_id,
                                default_queue_nums=int(cfg.broker.get("defaultTopicQueueNums", 4)))
        async with trio.open_nursery() as outer:
            await outer.start(backend.run)
            async with trio.open_nursery() as nursery:
                cluster = ClusterSync(backend, node_id)
                gw, specs = make_mqtt_gateway(backend, cfg.mqtt, host=cfg.host, mqtt_port=cfg.mqtt_port,
                                              ws_port=cfg.ws_port, cluster=cluster)
                ports = await nursery.start(gw.run, specs)
                ports = {f"mqtt-{k}": v for k, v in (ports or {}).items()}
                if cfg.http_port != 0:  # /metrics, admin API and dashboard about this node (no broker series)
                    await _start_http(nursery, cfg, gw, None, ports)
                log.info("gateway node %s on broker %s at %s", node_id, backend.home_name, backend.home_addr)
                log.info("ready: %s", " ".join(f"{k}={v}" for k, v in ports.items()))
                task_status.started(ports)
                await (stop.wait() if stop is not None else trio.sleep_forever())
                await gw.drain()
                nursery.cancel_scope.cancel()
            outer.cancel_scope.cancel()


async def _main(cfg: ServeConfig, namesrv: list[str]) -> None:
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(_stop_on_signal, stop)
        await serve_gateway_node(cfg, namesrv, stop=stop)
        nursery.cancel_scope.cancel()


def run_gateway_node(cfg: ServeConfig, namesrv: str | None) -> int:
    text = namesrv or cfg.broker.get("namesrvAddr") or ""
    if not text.strip(" ;"):
        raise ConfigError("mqgate gateway needs name servers: --namesrv host:port[;host:port]")
    try:
        addrs = parse_namesrv(text)
    except ValueError as e:
        raise ConfigError(f"--namesrv {text!r}: {e}") from None
    check_mqtt_config(cfg)
    if cfg.http_port != 0:
        check_http_config(cfg)
    try:
        trio.run(partial(_main, cfg, addrs))
    except KeyboardInterrupt:
        pass
    log.info("stopped cleanly")
    return 0
