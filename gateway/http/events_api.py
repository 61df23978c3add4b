"""The event API: PutEvents and the administration of buses, sources and rules, on its own port.

Routes (``[events] port``; docs/EVENTS.md lists each with its answers)::

    POST   /api/v1/login                                  as on the admin port (tokens of the same users)
    POST   /api/v1/events/buses/{bus}/events              PutEvents: CloudEvents structured, binary or batch
    GET    /api/v1/events/buses                           POST (create) with the bus JSON
    GET    /api/v1/events/buses/{bus}                     DELETE
    GET    /api/v1/events/sources                         POST (create) with the source JSON
    GET    /api/v1/events/sources/{name}                  DELETE
    GET    /api/v1/events/rules[?bus=B]                   POST (create) with the rule JSON
    GET    /api/v1/events/rules/{bus}/{name}              DELETE
    POST   /api/v1/events/rules/{bus}/{name}/enable       .../disable
    POST   /api/v1/events/test                            {"pattern": ..., "event": ...} -> {"matches": bool}

Rules kept here:
- The same users, roles and one-line JSON errors as the admin API
  (``gateway.http.app``): reading needs any role; PutEvents and every change
  need ``admin``.
- PutEvents answers 200 ``{"stored": n, "ids": [...]}`` only once every
  event of the request is stored; an invalid event is a 400 naming its
  index and reason and nothing of the request is stored; a store refusal
  is a 503.
- A definition that cannot be accepted is a 400 whose message starts with
  the bad path; an unknown bus, source or rule a 404; a taken name or a
  bus still in use a 409.
"""

from __future__ import annotations

import json
import logging

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.events import (Conflict, EventError, EventService, NotFound, PatternError, SpecError, StoreRefused,
                         events_from_http)
from gateway.http.app import AdminApi, ApiError, guarded, json_app
from gateway.auth import is_loopback
from gateway.http.ops import GatewayOps
from gateway.http.server import bind, hypercorn_config, serve_app
from gateway.http.users import Users

log = logging.getLogger("mqgate.http")

MAX_EVENTS_BODY = 4 * 1024 * 1024


class EventsApi:
    """The routes over one `EventService`, authenticated like the admin API."""

    def __init__(self, service: EventService, users: Users) -> None:
        self.service = service
        self.auth = AdminApi(GatewayOps(None), users, None)

    async def _body(self, request: Request, *, json_body: bool = True):
        if int(request.headers.get("content-length") or 0) > MAX_EVENTS_BODY:
            raise ApiError(413, f"the body is larger than {MAX_EVENTS_BODY} bytes")
        raw = await request.body()
        if len(raw) > MAX_EVENTS_BODY:
            raise ApiError(413, f"the body is larger than {MAX_EVENTS_BODY} bytes")
        if not json_body:
            return raw
        try:
            return json.loads(raw or b"null")
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the body is not JSON: {e}") from None

    async def _change(self, request: Request, what: str, call, *, quiet: bool = False):
        user = await self.auth.admin(request, what)
        try:
            result = await call()
        except (SpecError, PatternError, EventError) as e:
            raise ApiError(400, str(e)) from None
        except NotFound as e:
            raise ApiError(404, str(e)) from None
        except Conflict as e:
            raise ApiError(409, str(e)) from None
        except StoreRefused as e:
            raise ApiError(503, str(e)) from None
        (log.debug if quiet else log.info)("HTTP: %s: %s", user.name, what)
        return result

    async def _read(self, request: Request, call):
        await self.auth.user(request)
        try:
            return call()
        except NotFound as e:
            raise ApiError(404, str(e)) from None

    # ---- routes ----------------------------------------------------------------------------

    async def put_events(self, request: Request) -> Response:
        bus = request.path_params["bus"]
        raw = await self._body(request, json_body=False)

        async def put():
            self.service.bus(bus)
            return await self.service.put_events(bus, events_from_http(dict(request.headers), raw))
        ids = await self._change(request, f"putting events on {bus}", put, quiet=True)
        return JSONResponse({"stored": len(ids), "ids": ids})

    async def buses(self, request: Request) -> Response:
        s = self.service
        if request.method == "POST":
            spec = await self._body(request)
            bus = await self._change(request, "creating an event bus", lambda: s.create_bus(spec))
            return JSONResponse({"name": bus.name, "topic": bus.topic}, status_code=201)
        return JSONResponse(await self._read(request, lambda: {"items": [
            {"name": b.name, "topic": b.topic, "description": b.description} for b in s.buses.values()]}))

    async def bus(self, request: Request) -> Response:
        s, name = self.service, request.path_params["bus"]
        if request.method == "DELETE":
            await self._change(request, f"deleting event bus {name}", lambda: s.delete_bus(name))
            return JSONResponse({"deleted": name})

        def show():
            b = s.bus(name)
            return {"name": b.name, "topic": b.topic, "description": b.description,
                    "rules": sorted(r.name for r in s.rules.values() if r.bus == name),
                    "sources": sorted(x.name for x in s.sources.values() if x.bus == name)}
        return JSONResponse(await self._read(request, show))

    def _source_json(self, src) -> dict:
        return {"name": src.name, "bus": src.bus, "kind": src.kind, "mqttTopic": src.mqtt_topic, "type": src.type,
                "state": self.service.source_state(src.name), "spec": src.spec}

    async def sources(self, request: Request) -> Response:
        s = self.service
        if request.method == "POST":
            spec = await self._body(request)
            src = await self._change(request, "creating an event source", lambda: s.create_source(spec))
            return JSONResponse(self._source_json(src), status_code=201)
        return JSONResponse(await self._read(request, lambda: {
            "items": [self._source_json(x) for x in s.sources.values()]}))

    async def source(self, request: Request) -> Response:
        s, name = self.service, request.path_params["name"]
        if request.method == "DELETE":
            await self._change(request, f"deleting event source {name}", lambda: s.delete_source(name))
            return JSONResponse({"deleted": name})
        return JSONResponse(await self._read(request, lambda: self._source_json(s.source(name))))

    async def rules(self, request: Request) -> Response:
        s = self.service
        if request.method == "POST":
            spec = await self._body(request)
            rule = await self._change(request, "creating a rule", lambda: s.create_rule(spec))
            return JSONResponse(s.rule_json(rule), status_code=201)
        bus = request.query_params.get("bus")
        return JSONResponse(await self._read(request, lambda: {"items": [
            s.rule_json(r) for r in s.rules.values() if bus is None or r.bus == bus]}))

    async def rule(self, request: Request) -> Response:
        s, bus, name = self.service, request.path_params["bus"], request.path_params["name"]
        if request.method == "DELETE":
            await self._change(request, f"deleting rule {bus}/{name}", lambda: s.delete_rule(bus, name))
            return JSONResponse({"deleted": f"{bus}/{name}"})
        return JSONResponse(await self._read(request, lambda: s.rule_json(s.rule(bus, name))))

    async def rule_switch(self, request: Request) -> Response:
        s, bus, name = self.service, request.path_params["bus"], request.path_params["name"]
        if request.path_params["action"] not in ("enable", "disable"):
            raise ApiError(404, f"no such action {request.path_params['action']!r}: enable or disable")
        enable = request.path_params["action"] == "enable"
        rule = await self._change(request, f"{'enabling' if enable else 'disabling'} rule {bus}/{name}",
                                  lambda: s.set_enabled(bus, name, enable))
        return JSONResponse(s.rule_json(rule))

    async def test(self, request: Request) -> Response:
        await self.auth.user(request)
        body = await self._body(request)
        if not isinstance(body, dict) or "pattern" not in body or "event" not in body:
            raise ApiError(400, "send {\"pattern\": {...}, \"event\": {...}}")
        try:
            return JSONResponse({"matches": self.service.test_pattern(body["pattern"], body["event"])})
        except PatternError as e:
            raise ApiError(400, f"pattern.{e}" if not str(e).startswith("(top)") else f"pattern{str(e)[5:]}") from None

    def routes(self) -> list[Route]:
        g = guarded
        base = "/api/v1/events"
        return [
            Route("/api/v1/login", g(self.auth.login), methods=["POST"]),
            Route(f"{base}/buses/{{bus}}/events", g(self.put_events), methods=["POST"]),
            Route(f"{base}/buses", g(self.buses), methods=["GET", "POST"]),
            Route(f"{base}/buses/{{bus}}", g(self.bus), methods=["GET", "DELETE"]),
            Route(f"{base}/sources", g(self.sources), methods=["GET", "POST"]),
            Route(f"{base}/sources/{{name}}", g(self.source), methods=["GET", "DELETE"]),
            Route(f"{base}/rules", g(self.rules), methods=["GET", "POST"]),
            Route(f"{base}/rules/{{bus}}/{{name}}", g(self.rule), methods=["GET", "DELETE"]),
            Route(f"{base}/rules/{{bus}}/{{name}}/{{action:str}}", g(self.rule_switch), methods=["POST"]),
            Route(f"{base}/test", g(self.test), methods=["POST"]),
        ]


async def run_events_http(service: EventService, users: Users, host: str, port: int, *,
                          cert_file: str = "", key_file: str = "", task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve the event API on ``host:port`` until cancelled; ``started(bound port)``."""
    try:
        sock = bind(host, port)
    except OSError as e:
        raise OSError(e.errno, f"events HTTP port {port} on {host}: {e.strerror}") from None
    bound = sock.getsockname()[1]
    config = hypercorn_config(sock, cert_file, key_file)
    if not cert_file and not is_loopback(host):
        log.warning("event API on %s without [http] certFile: passwords and tokens travel in clear", host)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_app, json_app(EventsApi(service, users).routes()), config)
        log.info("event API listening on %s://%s:%d", "https" if cert_file else "http", host, bound)
        task_status.started(bound)
