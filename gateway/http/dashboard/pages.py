"""The dashboard's routes: server-rendered pages under ``/dashboard``.

Rules kept here:
- Login is the users file's (``mqgate passwd --admin``); the session cookie
  and the CSRF token follow ``login.WebSessions``' rules.
- A page asked for without a valid cookie redirects (303) to the login page,
  which comes back to the page after login (only paths under /dashboard:
  no open redirect).
- Every change is a form POST checked by ``WebSessions.change`` (session,
  CSRF token, admin role): 403 otherwise. A read-only user sees no kick or
  delete button.
- Kick and delete call ``GatewayOps``, the same code as the JSON API, and
  are logged with the user's name.
"""

from __future__ import annotations

import datetime
import logging
from pathlib import Path
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from core.admin import AdminError, cluster_overview, create_topic, reset_group_offset, trace_message
from gateway.http.dashboard.charts import RateSampler, svg_chart
from gateway.http.dashboard.login import Forbidden, WebSessions
from gateway.http.dashboard.reads import MAX_TIME_RESULTS, DashboardReads, local_time
from gateway.http.ops import GatewayOps, NotFound
from gateway.http.users import User, Users

log = logging.getLogger("mqgate.http")

PREFIX = "/dashboard"
MAX_ROWS = 500  # a table shows this many matches; a search narrows the rest
STATIC_DIR = Path(__file__).parent / "static"
_HEADERS = {"Cache-Control": "no-store", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
            "Content-Security-Policy": "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
                                       "frame-ancestors 'none'; form-action 'self'"}


def _human_bytes(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _time_ms(text: str) -> int:
    """A time from a form (``2026-11-26 10:00``, ISO 8601, local time) as ms since the epoch."""
    try:
        return int(datetime.datetime.fromisoformat(text.replace(" ", "T")).timestamp() * 1000)
    except ValueError:
        raise ValueError(f"cannot read the time {text!r}: give it as 2026-11-26 10:00:00") from None


def _safe_next(value: str | None) -> str:
    if value and value.startswith(PREFIX) and not value.startswith("//") and "\\" not in value:
        return value
    return f"{PREFIX}/"


class Dashboard:
    def __init__(self, ops: GatewayOps, reads: DashboardReads, users: Users, sampler: RateSampler, *,
                 secure_cookie: bool = False, events=None, namesrv: list[str] = ()) -> None:
        """``events``: the running ``core.events.EventService`` (its page), None when event
        rules do not run in this process; ``namesrv``: the name servers the admin actions
        (create a topic, reset a group's offset, trace a message) go through."""
        self.ops = ops
        self.events = events
        self.namesrv = list(namesrv)
        self.reads = reads
        self.users = users
        self.sampler = sampler
        self.web = WebSessions(users, secure=secure_cookie)
        self.env = Environment(loader=PackageLoader("gateway.http.dashboard", "templates"),
                               autoescape=select_autoescape(default=True, default_for_string=True))
        self.env.filters["bytes"] = _human_bytes
        self.env.filters["q"] = lambda s: quote(str(s), safe="")

    def _render(self, request: Request, template: str, code: int = 200, /, **context) -> HTMLResponse:
        session = self.web.current(request)
        user, token = session if session else (None, "")
        html = self.env.get_template(template).render(
            user=user, csrf=self.web.csrf(token) if token else "", path=request.url.path,
            flash=request.query_params.get("flash", ""), prefix=PREFIX, events_on=self.events is not None, **context)
        return HTMLResponse(html, status_code=code, headers=_HEADERS)

    def _page(self, handler, template: str):
        """A GET page: to the login page without a session, else rendered."""
        async def endpoint(request: Request) -> Response:
            if self.web.current(request) is None:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"{PREFIX}/login?{urlencode({'next': target})}", status_code=303)
            try:
                context = await handler(request)
            except NotFound as e:
                return self._render(request, "error.html", 404, title="Not found", message=str(e))
            return self._render(request, template, **context)
        return endpoint

    def _action(self, handler, what: str):
        """A POST that changes something; answered with a redirect and a flash line."""
        async def endpoint(request: Request) -> Response:
            try:
                user, form = await self.web.change(request, what)
                flash, back = await handler(request, user, form)
            except Forbidden as e:
                return self._render(request, "error.html", 403, title="Forbidden", message=str(e))
            except NotFound as e:
                flash, back = str(e), f"{PREFIX}/clients"
            back = _safe_next(back)
            sep = "&" if "?" in back else "?"
            return RedirectResponse(f"{back}{sep}{urlencode({'flash': flash})}", status_code=303)
        return endpoint

    # ---- login / logout ----------------------------------------------------------------------

    async def login_page(self, request: Request) -> Response:
        return self._render(request, "login.html", title="Log in", error="",
                            next=_safe_next(request.query_params.get("next")))

    async def login(self, request: Request) -> Response:
        try:
            form = await self.web.form(request)
        except Forbidden as e:
            return self._render(request, "login.html", 400, title="Log in", next=f"{PREFIX}/", error=str(e))
        nxt = _safe_next(form.get("next"))
        user = await self.users.verify(form.get("username", ""), form.get("password", ""))
        if user is None:
            log.info("HTTP: dashboard login failed for %r", form.get("username", ""))
            return self._render(request, "login.html", 401, title="Log in", next=nxt,
                                error="Wrong username or password.")
        response = RedirectResponse(nxt, status_code=303)
        self.web.start(response, user)
        log.info("HTTP: %s logged in to the dashboard", user.name)
        return response

    async def logout(self, request: Request) -> Response:
        token = None
        if self.web.current(request) is not None:
            try:
                _user, token, _form = await self.web.checked_form(request)
            except Forbidden as e:
                return self._render(request, "error.html", 403, title="Forbidden", message=str(e))
        response = RedirectResponse(f"{PREFIX}/login", status_code=303)
        self.web.end(response, token)
        return response

    # ---- pages -------------------------------------------------------------------------------

    async def overview(self, request: Request) -> dict:
        s = self.sampler
        charts = [svg_chart(s.rate("received"), "Messages in", "/s"), svg_chart(s.rate("sent"), "Messages out", "/s"),
                  svg_chart(s.gauge("connected"), "Connections"),
                  svg_chart([(t, v / 1024) for t, v in s.rate("written")], "Commit log writes", " KiB/s")]
        return {"title": "Overview", "stats": self.reads.overview(), "charts": charts,
                "minutes": round(s.samples.maxlen * s.interval / 60)}

    async def clients(self, request: Request) -> dict:
        q = request.query_params.get("q", "")
        state = request.query_params.get("state", "all")
        rows = self.reads.sessions(q, state)
        return {"title": "Clients and sessions", "rows": rows[:MAX_ROWS], "total": len(rows), "q": q, "state": state}

    async def client(self, request: Request) -> dict:
        cid = request.path_params["cid"]
        sess = self.ops.session(cid)
        conn = self.ops.client(cid) if sess["online"] else None
        return {"title": f"Client {cid}", "cid": cid, "session": sess, "conn": conn}

    async def kick(self, request: Request, user: User, form: dict) -> tuple[str, str]:
        cid = request.path_params["cid"]
        await self.ops.kick(cid)
        log.info("HTTP: %s kicked client %s (dashboard)", user.name, cid)
        return f"Kicked {cid}.", form.get("back") or f"{PREFIX}/clients"

    async def delete_session(self, request: Request, user: User, form: dict) -> tuple[str, str]:
        cid = request.path_params["cid"]
        await self.ops.delete_session(cid)
        log.info("HTTP: %s deleted the session of %s (dashboard)", user.name, cid)
        return f"Deleted the session of {cid}.", f"{PREFIX}/clients"

    async def subscriptions(self, request: Request) -> dict:
        q = request.query_params.get("q", "")
        rows = self.reads.subscriptions(q)
        return {"title": "Subscriptions", "rows": rows[:MAX_ROWS], "total": len(rows), "q": q}

    async def retained(self, request: Request) -> dict:
        q = request.query_params.get("q", "")
        topic = request.query_params.get("topic")
        message = None
        if topic is not None:
            message = await self.reads.retained_message(topic)
            if message is None:
                raise NotFound(f"no retained message on {topic!r}")
        topics = self.reads.retained_topics(q)
        return {"title": "Retained messages", "topics": topics[:MAX_ROWS], "total": len(topics), "q": q,
                "message": message}

    async def delete_retained(self, request: Request, user: User, form: dict) -> tuple[str, str]:
        topic = form.get("topic", "")
        await self.ops.delete_retained(topic)
        log.info("HTTP: %s cleared the retained message of %r (dashboard)", user.name, topic)
        return f"Cleared the retained message of {topic}.", f"{PREFIX}/retained"

    async def topics(self, request: Request) -> dict:
        lmq = request.query_params.get("lmq") == "1"
        return {"title": "Broker topics and queues", "topics": self.reads.topics(lmq), "lmq": lmq}

    async def groups(self, request: Request) -> dict:
        return {"title": "Consumer groups", "groups": self.reads.groups()}

    async def messages(self, request: Request) -> dict:
        p = request.query_params
        topic, key, msg_id = p.get("topic", "").strip(), p.get("key", "").strip(), p.get("msgId", "").strip()
        start, end = p.get("from", "").strip(), p.get("to", "").strip()
        error = ""
        found: list[dict] = []
        searched = bool(key or msg_id or start or end)
        if key or msg_id:
            found = await self.reads.find_messages(topic, key, msg_id)
        elif start or end:
            if not topic:
                error = "A search by time needs a topic."
            else:
                try:
                    start_ms = _time_ms(start) if start else 0
                    end_ms = _time_ms(end) if end else 2**62
                except ValueError as e:
                    error = str(e)
                else:
                    found = await self.reads.messages_between(topic, start_ms, end_ms)
        return {"title": "Message search", "topic": topic, "key": key, "msgId": msg_id, "from": start, "to": end,
                "searched": searched, "found": found, "error": error, "limit": MAX_TIME_RESULTS,
                "tracing": self.reads.tracing_on() and bool(self.namesrv),
                "topics": [t["name"] for t in self.reads.topics()]}

    async def trace(self, request: Request) -> dict:
        msg_id = request.query_params.get("msgId", "").strip()
        if not msg_id:
            raise NotFound("give a message id to trace")
        if not self.namesrv:
            raise NotFound("tracing needs the name servers, and this process has none")
        try:
            result = await trace_message(self.namesrv, msg_id)
        except AdminError as e:
            raise NotFound(str(e)) from None
        steps = [{**s, "when": local_time(s["time"])} for s in result["steps"]]
        return {"title": f"Trace of {msg_id}", "trace": result, "steps": steps, "msgId": msg_id}

    async def create_topic(self, request: Request, user: User, form: dict) -> tuple[str, str]:
        name = form.get("name", "").strip()
        try:
            queues = int(form.get("queues", "4"))
            if not 1 <= queues <= 1024:
                raise ValueError
        except ValueError:
            return "Queues must be a number from 1 to 1024.", f"{PREFIX}/topics"
        if not name:
            return "Give the topic a name.", f"{PREFIX}/topics"
        try:
            result = await create_topic(self.namesrv, name, queues)
        except AdminError as e:
            return f"Topic {name} not created: {e}", f"{PREFIX}/topics"
        log.info("HTTP: %s created the topic %r with %d queues (dashboard)", user.name, name, queues)
        return f"Topic {name} created with {queues} queues on {', '.join(result['brokers'])}.", f"{PREFIX}/topics"

    async def reset_offset(self, request: Request, user: User, form: dict) -> tuple[str, str]:
        group = request.path_params["group"]
        topic, when = form.get("topic", "").strip(), form.get("time", "").strip()
        back = f"{PREFIX}/groups"
        if not topic or not when:
            return "Give the topic and the time to reset to.", back
        try:
            result = await reset_group_offset(self.namesrv, group, topic, when.replace(" ", "T"))
        except AdminError as e:
            return f"Offsets of {group} not reset: {e}", back
        how = "its online clients took them" if result["clientsOnline"] else "stored for its next start"
        log.info("HTTP: %s reset the offsets of %r on %r to %s (dashboard)", user.name, group, topic, when)
        return (f"Offsets of {group} on {topic} reset to {when}: {len(result['queues'])} queues, {how}.", back)

    async def replication(self, request: Request) -> dict:
        cluster, cluster_error = None, ""
        if self.namesrv:
            try:
                cluster = await cluster_overview(self.namesrv)
            except AdminError as e:
                cluster_error = str(e)
        return {"title": "Replication and cluster", "ha": self.reads.replication(), "cluster": cluster,
                "cluster_error": cluster_error}

    async def event_rules(self, request: Request) -> dict:
        svc = self.events
        if svc is None:
            raise NotFound("event rules do not run in this process (they run under mqgate serve with its "
                           "broker's remoting port and a name server)")
        rules = []
        for rule in sorted(svc.rules.values(), key=lambda r: (r.bus, r.name)):
            row = svc.rule_json(rule)
            row.pop("spec", None)
            rules.append(row)
        sources = [{"name": s.name, "bus": s.bus, "kind": s.kind, "mqttTopic": s.mqtt_topic,
                    "state": svc.source_state(s.name)} for s in sorted(svc.sources.values(), key=lambda s: s.name)]
        return {"title": "Event rules", "buses": sorted(svc.buses), "rules": rules, "sources": sources}

    async def switch_rule(self, request: Request, user: User, form: dict) -> tuple[str, str]:
        from core.events import NotFound as NoSuchRule

        bus, name, action = request.path_params["bus"], request.path_params["name"], request.path_params["action"]
        if action not in ("enable", "disable"):
            raise NotFound(f"no dashboard action {action!r} on event rules (enable or disable)")
        enabled = action == "enable"
        if self.events is None:
            raise NotFound("event rules do not run in this process")
        try:
            await self.events.set_enabled(bus, name, enabled)
        except NoSuchRule as e:
            return str(e), f"{PREFIX}/events"
        log.info("HTTP: %s %s the event rule %s/%s (dashboard)", user.name, "enabled" if enabled else "disabled",
                 bus, name)
        return f"Rule {name} on {bus} {'enabled' if enabled else 'disabled'}.", f"{PREFIX}/events"

    def routes(self) -> list:
        p, a = self._page, self._action

        async def root(_request: Request) -> Response:
            return RedirectResponse(f"{PREFIX}/", status_code=307)

        return [
            Route(PREFIX, root, methods=["GET"]),
            Route(f"{PREFIX}/", p(self.overview, "overview.html"), methods=["GET"]),
            Route(f"{PREFIX}/login", self.login_page, methods=["GET"]),
            Route(f"{PREFIX}/login", self.login, methods=["POST"]),
            Route(f"{PREFIX}/logout", self.logout, methods=["POST"]),
            Route(f"{PREFIX}/clients", p(self.clients, "clients.html"), methods=["GET"]),
            Route(f"{PREFIX}/clients/{{cid:path}}/kick", a(self.kick, "kicking a client"), methods=["POST"]),
            Route(f"{PREFIX}/clients/{{cid:path}}/delete", a(self.delete_session, "deleting a session"),
                  methods=["POST"]),
            Route(f"{PREFIX}/clients/{{cid:path}}", p(self.client, "client.html"), methods=["GET"]),
            Route(f"{PREFIX}/subscriptions", p(self.subscriptions, "subscriptions.html"), methods=["GET"]),
            Route(f"{PREFIX}/retained", p(self.retained, "retained.html"), methods=["GET"]),
            Route(f"{PREFIX}/retained/delete", a(self.delete_retained, "deleting a retained message"),
                  methods=["POST"]),
            Route(f"{PREFIX}/topics", p(self.topics, "topics.html"), methods=["GET"]),
            Route(f"{PREFIX}/groups", p(self.groups, "groups.html"), methods=["GET"]),
            Route(f"{PREFIX}/messages", p(self.messages, "messages.html"), methods=["GET"]),
            Route(f"{PREFIX}/trace", p(self.trace, "trace.html"), methods=["GET"]),
            Route(f"{PREFIX}/topics/create", a(self.create_topic, "creating a topic"), methods=["POST"]),
            Route(f"{PREFIX}/groups/{{group:path}}/reset", a(self.reset_offset, "resetting a group's offsets"),
                  methods=["POST"]),
            Route(f"{PREFIX}/replication", p(self.replication, "replication.html"), methods=["GET"]),
            Route(f"{PREFIX}/events", p(self.event_rules, "events.html"), methods=["GET"]),
            Route(f"{PREFIX}/events/rules/{{bus}}/{{name}}/{{action:str}}",
                  a(self.switch_rule, "switching an event rule"), methods=["POST"]),
            Mount(f"{PREFIX}/static", StaticFiles(directory=STATIC_DIR), name="dashboard-static"),
        ]
