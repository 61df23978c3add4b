"""The one HTTP server of a gateway process: Starlette under Hypercorn's trio worker.

Rules kept here (ARCHITECTURE decision 12):
- It runs in the gateway's nursery (started with ``nursery.start``: bound
  before the "ready" line) and stops with it; it never blocks the MQTT side.
- The socket is bound here, then handed to Hypercorn (``fd://``), so a bind
  failure is ours to explain: the default port (not configured) already in
  use is a warning and the process runs without HTTP; a configured port in
  use stops the start like any other listener's.
- HTTPS when ``certFile`` is set (TLS 1.2+, Hypercorn's context). Over plain
  HTTP, credentials and tokens travel in clear: a warning says so when the
  address is reachable from other machines.
- Hypercorn's own log lines go to ``mqgate.http.server`` (its start banner dropped); no access log.
- The dashboard (``/dashboard``, gateway/http/dashboard) is served with the
  API; its rate sampler runs in this nursery. Other HTTP parts (the event
  API) join with ``extra_routes``.
- A broker alone (``mqgate broker``, master or slave: no gateway) serves
  ``/metrics`` with the broker's series and login; the MQTT API answers 404
  with one line saying where it is, and there is no dashboard.
"""

from __future__ import annotations

import errno
import logging
import socket

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from gateway.auth import is_loopback
from gateway.http import connection_guard
from gateway.http.app import AdminApi, make_app
from gateway.http.dashboard import Dashboard, DashboardReads, RateSampler
from gateway.http.metrics import BrokerView, make_registry
from gateway.http.ops import GatewayOps
from gateway.http.settings import HttpSettings
from gateway.http.users import Users

log = logging.getLogger("mqgate.http")


class _NoBanner(logging.Filter):
    """Hypercorn's "Running on ... (CTRL + C to quit)": our own line says where it listens."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Running on")


_hypercorn_log = logging.getLogger("mqgate.http.server")
_hypercorn_log.addFilter(_NoBanner())


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port``. It listens at once: with
    SO_REUSEADDR two processes may both bind a port nobody listens on yet,
    and the second would learn the port is taken only at hypercorn's
    ``listen``, outside ``run_http``'s fallback for a taken default port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return sock


def hypercorn_config(sock: socket.socket, cert_file: str = "", key_file: str = "") -> Config:
    """Hypercorn's settings for a socket we bound: our log, no access log, HTTPS with ``cert_file``."""
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.errorlog = _hypercorn_log
    config.graceful_timeout = 1.0
    if cert_file:
        config.certfile = cert_file
        config.keyfile = key_file or cert_file
    return config


async def serve_app(app, config: Config, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Hypercorn's trio worker serving ``app`` until cancelled (``started`` once it accepts)."""
    connection_guard.install()  # a fuzzed request must not end the process
    await hypercorn_serve(app, config, task_status=task_status)


async def run_http(gw, settings: HttpSettings, *, broker: BrokerView | None = None, explicit_port: bool = True,
                   users: Users | None = None, extra_routes: list | tuple = (), events=None,
                   namesrv: list[str] = (),
                   task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``/metrics`` and the admin API over ``gw`` (and ``broker``'s series)
    until cancelled; ``started(bound port)``, or ``started(None)`` when the
    default port is taken. ``events`` (a running ``core.events.EventService``)
    adds the dashboard's event-rules page; ``namesrv`` (the name servers) its
    admin actions: create a topic, reset a group's offset, trace a message."""
    try:
        sock = bind(settings.host, settings.port)
    except OSError as e:
        if explicit_port or e.errno != errno.EADDRINUSE:
            raise OSError(e.errno, f"HTTP port {settings.port} on {settings.host}: {e.strerror}") from None
        log.warning("HTTP port %d on %s is in use (another mqgate?): no /metrics and no admin API in this "
                    "process; set [http] port (0 = off) to choose", settings.port, settings.host)
        task_status.started(None)
        return
    port = sock.getsockname()[1]
    users = users or Users(settings.users_file, token_ttl=settings.token_ttl)
    ops = GatewayOps(gw)
    api = AdminApi(ops, users, make_registry(gw, broker), metrics_auth=settings.metrics_auth)
    sampler = None
    routes = list(extra_routes)
    if gw is not None:  # a broker alone (gw None) serves /metrics only: no MQTT API, no dashboard
        reads = DashboardReads(gw, broker)
        sampler = RateSampler(reads.counters)
        routes[:0] = Dashboard(ops, reads, users, sampler, secure_cookie=settings.tls,
                               events=events, namesrv=list(namesrv)).routes()
    config = hypercorn_config(sock, settings.cert_file, settings.key_file)
    scheme = "https" if settings.tls else "http"
    if not settings.tls and not is_loopback(settings.host):
        log.warning("HTTP API on %s without [http] certFile: passwords and tokens travel in clear",
                    settings.host)
    if not len(users):
        log.info("no HTTP users in %s: the admin API refuses every request until one is added "
                 "(mqgate passwd --admin %s USER)", users.path, users.path)
    async with trio.open_nursery() as nursery:
        if sampler is not None:
            await nursery.start(sampler.run)
        await nursery.start(serve_app, make_app(api, routes), config)
        log.info("HTTP (%s) listening on %s://%s:%d", "/metrics, /api/v1, /dashboard" if gw is not None else "/metrics",
                 scheme, settings.host, port)
        task_status.started(port)

