"""The ASGI application: routes, authentication, and errors as one JSON line.

Routes (``/api/v1`` is the admin API; docs/OPERATIONS.md lists each with
its answers)::

    GET    /metrics                              Prometheus text (no login unless metricsAuth)
    POST   /api/v1/login                         Basic or {"username", "password"} -> {"token": ...}
    GET    /api/v1/stats
    GET    /api/v1/clients[?limit&offset]        connected clients
    GET    /api/v1/clients/{clientId}
    DELETE /api/v1/clients/{clientId}            kick (admin)
    GET    /api/v1/sessions[?limit&offset]       every session, online or not
    GET    /api/v1/sessions/{clientId}
    DELETE /api/v1/sessions/{clientId}           end the session (admin)
    GET    /api/v1/subscriptions[?clientId&limit&offset]
    GET    /api/v1/retained[?limit&offset]
    DELETE /api/v1/retained/{topic}              clear a retained message (admin)

Rules kept here:
- Every answer is JSON except ``/metrics``. An error is
  ``{"error": "<one line>"}`` with its status: 400 malformed request, 401 no
  or bad credentials (with ``WWW-Authenticate``), 403 the role may not do
  that, 404 no such thing, 405 wrong method, 413 a body too large, 500 a bug (logged with its
  traceback on the server; the client sees one line, never a traceback).
- Credentials: HTTP Basic (``user:password``, checked against the users
  file on each request, cheap after the first) or ``Authorization: Bearer
  <token>`` from ``POST /api/v1/login``. GET needs any role; anything that
  changes state needs ``admin``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.http.ops import GatewayOps, NotFound
from gateway.http.users import User, Users

log = logging.getLogger("mqgate.http")

MAX_BODY = 64 * 1024  # a login body is a few dozen bytes
MAX_LIMIT = 10_000
DEFAULT_LIMIT = 1000
_CHALLENGE = {"WWW-Authenticate": 'Basic realm="mqgate"'}


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"query parameter {name} must be an integer, not {text!r}") from None
    if not low <= value <= high:
        raise ApiError(400, f"query parameter {name} must be in {low}..{high}, not {value}")
    return value


def paging(request: Request) -> tuple[int, int]:
    return (_int_param(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT),
            _int_param(request, "offset", 0, 0, 2**31))


class AdminApi:
    """The routes over one gateway (``ops``), one users file and one registry."""

    def __init__(self, ops: GatewayOps, users: Users, registry, *, metrics_auth: bool = False) -> None:
        self.ops = ops
        self.users = users
        self.registry = registry
        self.metrics_auth = metrics_auth

    # ---- authentication ---------------------------------------------------------------

    async def user(self, request: Request) -> User:
        header = request.headers.get("authorization")
        if not header:
            if not len(self.users):
                raise ApiError(401, f"no HTTP users yet: add one with `mqgate passwd --admin {self.users.path} "
                                    f"USER` (read again at the next request)", _CHALLENGE)
            raise ApiError(401, "authentication required: HTTP Basic or a Bearer token from POST /api/v1/login",
                           _CHALLENGE)
        scheme, _, value = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            user = self.users.check_token(value.strip())
            if user is None:
                raise ApiError(401, "token unknown or expired: log in again (POST /api/v1/login)", _CHALLENGE)
            return user
        if scheme != "basic":
            raise ApiError(401, f"unsupported authorization scheme {scheme!r}: use Basic or Bearer", _CHALLENGE)
        try:
            name, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise ApiError(401, "malformed Basic credentials", _CHALLENGE) from None
        if not sep:
            raise ApiError(401, "malformed Basic credentials: expected user:password", _CHALLENGE)
        user = await self.users.verify(name, password)
        if user is None:
            log.info("HTTP: authentication failed for %r from %s", name, _peer(request))
            raise ApiError(401, "bad username or password", _CHALLENGE)
        return user

    async def admin(self, request: Request, what: str) -> User:
        user = await self.user(request)
        if not user.admin:
            raise ApiError(403, f"user {user.name!r} is read-only: {what} needs the admin role")
        return user

    # ---- routes -------------------------------------------------------------------------------

    async def metrics(self, request: Request) -> Response:
        if self.metrics_auth:
            await self.user(request)
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def login(self, request: Request) -> Response:
        if request.headers.get("authorization"):
            user = await self.user(request)
        else:
            if int(request.headers.get("content-length") or 0) > MAX_BODY:
                raise ApiError(413, f"the body is larger than {MAX_BODY} bytes")
            try:
                body = json.loads(await request.body() or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise ApiError(400, "the body is not JSON: send {\"username\": ..., \"password\": ...}") from None
            if not (isinstance(body, dict) and isinstance(body.get("username"), str)
                    and isinstance(body.get("password"), str)):
                raise ApiError(400, "send {\"username\": ..., \"password\": ...} or HTTP Basic credentials")
            user = await self.users.verify(body["username"], body["password"])
            if user is None:
                log.info("HTTP: login failed for %r from %s", body["username"], _peer(request))
                raise ApiError(401, "bad username or password", _CHALLENGE)
        return JSONResponse({"token": self.users.issue_token(user), "role": user.role,
                             "expiresIn": self.users.token_ttl})

    async def stats(self, request: Request) -> Response:
        await self.user(request)
        return JSONResponse(self.ops.stats())

    async def clients(self, request: Request) -> Response:
        await self.user(request)
        return JSONResponse(self.ops.clients(*paging(request)))

    async def client(self, request: Request) -> Response:
        cid = request.path_params["cid"]
        if request.method == "DELETE":
            user = await self.admin(request, "kicking a client")
            result = await self.ops.kick(cid)
            log.info("HTTP: %s kicked client %s", user.name, cid)
            return JSONResponse(result)
        await self.user(request)
        return JSONResponse(self.ops.client(cid))

    async def sessions(self, request: Request) -> Response:
        await self.user(request)
        return JSONResponse(self.ops.sessions(*paging(request)))

    async def session(self, request: Request) -> Response:
        cid = request.path_params["cid"]
        if request.method == "DELETE":
            user = await self.admin(request, "deleting a session")
            result = await self.ops.delete_session(cid)
            log.info("HTTP: %s deleted the session of %s", user.name, cid)
            return JSONResponse(result)
        await self.user(request)
        return JSONResponse(self.ops.session(cid))

    async def subscriptions(self, request: Request) -> Response:
        await self.user(request)
        return JSONResponse(self.ops.subscriptions(*paging(request), request.query_params.get("clientId")))

    async def retained(self, request: Request) -> Response:
        await self.user(request)
        return JSONResponse(await self.ops.retained(*paging(request)))

    async def retained_topic(self, request: Request) -> Response:
        user = await self.admin(request, "deleting a retained message")
        topic = request.path_params["topic"]
        result = await self.ops.delete_retained(topic)
        log.info("HTTP: %s cleared the retained message of %r", user.name, topic)
        return JSONResponse(result)

    def routes(self) -> list[Route]:
        r = guarded
        if self.ops.gw is None:  # a broker alone (mqgate broker): its series, and login for metricsAuth
            return [Route("/metrics", r(self.metrics), methods=["GET"]),
                    Route("/api/v1/login", r(self.login), methods=["POST"]),
                    Route("/api/v1/{rest:path}", r(self.no_gateway), methods=["GET", "POST", "DELETE"])]
        return [
            Route("/metrics", r(self.metrics), methods=["GET"]),
            Route("/api/v1/login", r(self.login), methods=["POST"]),
            Route("/api/v1/stats", r(self.stats), methods=["GET"]),
            Route("/api/v1/clients", r(self.clients), methods=["GET"]),
            Route("/api/v1/clients/{cid:path}", r(self.client), methods=["GET", "DELETE"]),
            Route("/api/v1/sessions", r(self.sessions), methods=["GET"]),
            Route("/api/v1/sessions/{cid:path}", r(self.session), methods=["GET", "DELETE"]),
            Route("/api/v1/subscriptions", r(self.subscriptions), methods=["GET"]),
            Route("/api/v1/retained", r(self.retained), methods=["GET"]),
            Route("/api/v1/retained/{topic:path}", r(self.retained_topic), methods=["DELETE"]),
        ]


    async def no_gateway(self, request: Request) -> Response:
        await self.user(request)
        raise ApiError(404, "this process runs no MQTT gateway (mqgate broker): the MQTT API is on the "
                            "mqgate serve process; here only /metrics")


def _peer(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "?"


def guarded(handler: Callable[[Request], Awaitable[Response]]):
    """``ApiError`` and ``NotFound`` become their one-line JSON answer; any other
    exception is a bug: logged with its traceback, answered 500 in one line."""
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as e:
            return error(e.status, str(e), e.headers)
        except NotFound as e:
            return error(404, str(e))
        except Exception:  # noqa: BLE001 - the client gets one line; the log gets the traceback
            log.exception("HTTP %s %s failed", request.method, request.url.path)
            return error(500, "internal error; the server log has the details")
    return endpoint


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return error(exc.status_code, exc.detail if isinstance(exc.detail, str) else "error", exc.headers)


async def _bug(request: Request, exc: Exception) -> Response:
    return error(500, "internal error; the server log has the details")


def json_app(routes: list) -> Starlette:
    """A Starlette app whose errors (unknown path, wrong method, a bug) are one JSON line."""
    return Starlette(routes=routes, exception_handlers={HTTPException: _http_error, Exception: _bug})


def make_app(api: AdminApi, extra_routes: list | tuple = ()) -> Starlette:
    """The admin API's routes, then ``extra_routes`` (Starlette ``Route``/``Mount``:
    the dashboard's, and other HTTP parts)."""
    return json_app([*api.routes(), *extra_routes])
