"""gateway/http: the one HTTP server (ASGI on trio): ``/metrics``, the admin API, the dashboard.

Rooms: may import ``gateway`` and ``core`` (public names). What other parts use::

    settings = HttpSettings.from_dict(cfg.http, data_dir=cfg.data_dir, port=cfg.http_port)
    port = await nursery.start(partial(run_http, gw, settings))   # bound port, or None
    passwd_admin_main(argv)     # mqgate passwd --admin FILE USER [--role read-only] [-b PW] [-D]
    http_admin_main(argv)       # mqgate admin clients|sessions|retained|subscriptions ...

Modules: ``settings`` (the ``[http]`` table), ``users`` (users file, roles,
tokens), ``metrics`` (the Prometheus collector), ``ops`` (what the API
reads and does on a gateway), ``app`` (routes, auth, JSON errors),
``server`` (Hypercorn on trio), ``cli`` (the admin verbs), ``events_api``,
``events_settings`` and ``events_cli`` (the event API on its own port, its
``[events]`` table, ``mqgate admin events``); the package
``dashboard`` (server-rendered pages under ``/dashboard``). Each states its
rules in its docstring; docs/OPERATIONS.md is the user's guide.
"""

from gateway.http.cli import HTTP_ADMIN_AREAS, http_admin_main, is_http_verb
from gateway.http.metrics import BrokerView
from gateway.http.server import run_http
from gateway.http.settings import DEFAULT_HTTP_PORT, HTTP_KEYS, HttpSettings
from gateway.http.users import Users, passwd_admin_main, read_users_file

__all__ = ["BrokerView", "DEFAULT_HTTP_PORT", "HTTP_ADMIN_AREAS", "HTTP_KEYS", "HttpSettings", "Users", "http_admin_main",
           "is_http_verb", "passwd_admin_main", "read_users_file", "run_http"]
