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
* With etcd (``--etcd`` or ``[broker] etcdEndpoints``) each client id has
  one owner node at a time, held in etcd (``gateway.owners``); the node's
  lease is revoked after the drain. Without, the order of the meta records
  decides (docs/CLUSTER.md says what each mode guarantees).
* The HTTP server (``[http]``, ``--http-port``) serves /metrics, the admin
  API and the dashboard about this node's clients, without the broker's
  series (the broker serves its own /metrics).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from functools import partial

import trio

from core.client import open_client_api, parse_namesrv

from .app import make_mqtt_gateway
from .broker_node import _start_http
from .cluster import ClusterSync
from .config import ConfigError, ServeConfig
from .nodes import new_node_id
from .owners import ETCD_TIMEOUT, ClientOwners, owner_prefix
from .remote_backend import RemoteBackend
from .serve import _stop_on_signal, check_http_config, check_mqtt_config
from .settings import GatewaySettings

log = logging.getLogger("mqgate")


async def serve_gateway_node(cfg: ServeConfig, namesrv: list[str], *, node_id: str | None = None,
                             etcd: list[str] = (), stop: trio.Event | None = None,
                             task_status=trio.TASK_STATUS_IGNORED) -> None:
    node_id = node_id or new_node_id()
    session = GatewaySettings.from_dict(cfg.mqtt).session  # checked again by make_mqtt_gateway
    async with open_client_api() as api, AsyncExitStack() as stack:
        owners = None
        if etcd:
            from core.ha import EtcdClient

            client = await stack.enter_async_context(EtcdClient(list(etcd), timeout=ETCD_TIMEOUT))
            prefix = owner_prefix(str(cfg.broker.get("etcdKeyPrefix", "/mqgate")),
                                  str(cfg.broker.get("brokerClusterName", "DefaultCluster")))
            owners = ClientOwners(client, prefix, node_id, ttl=session.owner_lease_ttl)
        backend = RemoteBackend(api, namesrv, node_id=node_id,
                                default_queue_nums=int(cfg.broker.get("defaultTopicQueueNums", 4)))
        async with trio.open_nursery() as outer:
            await outer.start(backend.run)
            async with trio.open_nursery() as nursery:
                cluster = ClusterSync(backend, node_id, owners, release_wait=session.release_wait,
                                      compaction=session.compaction)
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
                if owners is not None:
                    await owners.close()
                nursery.cancel_scope.cancel()
            outer.cancel_scope.cancel()


async def _main(cfg: ServeConfig, namesrv: list[str], etcd: list[str]) -> None:
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(_stop_on_signal, stop)
        await serve_gateway_node(cfg, namesrv, etcd=etcd, stop=stop)
        nursery.cancel_scope.cancel()


def run_gateway_node(cfg: ServeConfig, namesrv: str | None, etcd: str | None = None) -> int:
    text = namesrv or cfg.broker.get("namesrvAddr") or ""
    if not text.strip(" ;"):
        raise ConfigError("mqgate gateway needs name servers: --namesrv host:port[;host:port]")
    try:
        addrs = parse_namesrv(text)
    except ValueError as e:
        raise ConfigError(f"--namesrv {text!r}: {e}") from None
    etcd_text = etcd if etcd is not None else str(cfg.broker.get("etcdEndpoints") or "")
    endpoints = [e.strip() for e in etcd_text.replace(",", ";").split(";") if e.strip()]
    bad = [e for e in endpoints if not e.startswith(("http://", "https://"))]
    if bad:
        raise ConfigError(f"--etcd {etcd_text!r}: {bad[0]!r} is not an etcd client URL (http://host:port)")
    check_mqtt_config(cfg)
    if cfg.http_port != 0:
        check_http_config(cfg)
    try:
        trio.run(partial(_main, cfg, addrs, endpoints))
    except KeyboardInterrupt:
        pass
    log.info("stopped cleanly")
    return 0
