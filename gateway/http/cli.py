"""``mqgate admin clients|sessions|retained|subscriptions ...``: the admin API from the shell.

Usage (global options may come anywhere on the line)::

    mqgate admin [--url URL] [--user NAME] [--password PW] [--json] [--timeout S] VERB
    clients list [--limit N] [--offset N] | show ID | kick ID
    sessions list [--limit N] [--offset N] | show ID | delete ID
    retained list [--limit N] [--offset N] | delete TOPIC
    subscriptions list [--client ID] [--limit N] [--offset N]

Rules kept here:
- Every verb is one request to the JSON admin API (``gateway.http.app``);
  nothing is computed here that the API does not say.
- ``--url`` defaults to ``$MQGATE_URL``, else ``http://127.0.0.1:18083``;
  the user to ``$MQGATE_USER``, the password to ``$MQGATE_PASSWORD``, else
  it is asked for when a terminal is there. HTTP Basic on every request.
- Output: a table (``core.admin.table``), or the API's JSON with ``--json``.
  Exit status 0 on success; 1 when the server refused or could not be
  reached (its one-line reason on stderr); 2 on a usage error.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from typing import TextIO
from urllib.parse import quote

import httpx

from core.admin import table

DEFAULT_URL = "http://127.0.0.1:18083"
HTTP_ADMIN_AREAS = ("clients", "sessions", "retained", "subscriptions")
_VALUE_OPTIONS = ("--url", "--user", "--password", "--timeout")
_GLOBAL_VALUE_OPTIONS = _VALUE_OPTIONS + ("--namesrv", "-n")  # core's, to find the verb on any line

COLUMNS = {
    "clients": ["clientId", "username", "peer", "listener", "protocol", "keepalive", "subscriptions",
                "inflight", "dropped"],
    "sessions": ["clientId", "online", "persistent", "expiryInterval", "protocol", "subscriptions", "inflight",
                 "pending", "dropped"],
    "retained": ["topic", "qos", "size"],
    "subscriptions": ["clientId", "filter", "qos", "noLocal", "retainAsPublished", "retainHandling"],
}


def admin_area(argv: list[str]) -> str | None:
    """The first word of ``mqgate admin``'s line after global options (``clients``, ``events``...)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _GLOBAL_VALUE_OPTIONS:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return arg
    return None


def is_http_verb(argv: list[str]) -> bool:
    """Whether the first word of ``mqgate admin``'s line (after global options) is one of ours."""
    return admin_area(argv) in HTTP_ADMIN_AREAS


def hoist_options(argv: list[str]) -> list[str]:
    """The global options (``--url``, ``--user``, ``--json``...) moved before the verb, wherever they were typed."""
    return _hoist(argv)


def _hoist(argv: list[str]) -> list[str]:
    front, rest = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--json":
            front.append(arg)
        elif arg in _VALUE_OPTIONS and i + 1 < len(argv):
            front += [arg, argv[i + 1]]
            i += 1
        elif arg.split("=", 1)[0] in _VALUE_OPTIONS:
            front.append(arg)
        else:
            rest.append(arg)
        i += 1
    return front + rest


def add_global_options(p: argparse.ArgumentParser, url_env: str, default_url: str, what: str) -> None:
    """``--url`` (from ``url_env``), ``--user``, ``--password``, ``--json``, ``--timeout``."""
    p.add_argument("--url", default=os.environ.get(url_env, default_url),
                   help=f"{what} (default ${url_env} or {default_url})")
    p.add_argument("--user", default=os.environ.get("MQGATE_USER"), help="user of the users file ($MQGATE_USER)")
    p.add_argument("--password", default=os.environ.get("MQGATE_PASSWORD"),
                   help="its password ($MQGATE_PASSWORD; asked for when missing)")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per request")


def call_api(a: argparse.Namespace, method: str, path: str, params: dict, err: TextIO, *, prog: str,
             unreachable: str, body: bytes | None = None) -> dict | None:
    """One request with ``a``'s URL, credentials (asked for on a terminal) and timeout:
    the answer's JSON object, or None after printing the one-line reason on ``err``."""
    if a.user and a.password is None and sys.stdin.isatty():
        a.password = getpass.getpass(f"Password for {a.user}: ")
    auth = (a.user, a.password or "") if a.user else None
    headers = {"content-type": "application/json"} if body is not None else {}
    try:
        r = httpx.request(method, a.url.rstrip("/") + path, params=params, auth=auth, timeout=a.timeout,
                          content=body, headers=headers, verify=not os.environ.get("MQGATE_INSECURE"))
    except httpx.HTTPError as exc:
        print(f"{prog}: cannot reach the HTTP API at {a.url}: {exc or type(exc).__name__} ({unreachable})", file=err)
        return None
    try:
        result = r.json()
    except ValueError:
        result = None
    if r.status_code >= 400 or not isinstance(result, dict):
        reason = result.get("error") if isinstance(result, dict) else (r.text.strip()[:200] or r.reason_phrase)
        hint = " (--user and $MQGATE_PASSWORD, or $MQGATE_USER)" if r.status_code == 401 and not a.user else ""
        print(f"{prog}: {reason}{hint} (HTTP {r.status_code})", file=err)
        return None
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqgate admin", description="the gateway's clients, sessions, retained "
                                "messages and subscriptions, over the HTTP admin API (docs/OPERATIONS.md)")
    add_global_options(p, "MQGATE_URL", DEFAULT_URL, "the HTTP API")
    sub = p.add_subparsers(dest="area", required=True, metavar="VERB")

    def paged(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("--limit", type=int, default=1000, help="at most this many rows (1..10000)")
        parser.add_argument("--offset", type=int, default=0, help="skip this many rows first")
        return parser

    for area, verbs in (("clients", ("kick",)), ("sessions", ("delete",))):
        s = sub.add_parser(area, help=f"{area}: list, show, {verbs[0]}").add_subparsers(dest="action", required=True)
        paged(s.add_parser("list"))
        s.add_parser("show").add_argument("client_id")
        s.add_parser(verbs[0]).add_argument("client_id")
    s = sub.add_parser("retained", help="retained messages: list, delete").add_subparsers(dest="action",
                                                                                         required=True)
    paged(s.add_parser("list"))
    s.add_parser("delete").add_argument("topic")
    s = sub.add_parser("subscriptions", help="subscriptions: list").add_subparsers(dest="action", required=True)
    paged(s.add_parser("list")).add_argument("--client", help="only this client's")
    return p


def _request(a: argparse.Namespace) -> tuple[str, str, dict]:
    paging = {"limit": getattr(a, "limit", None), "offset": getattr(a, "offset", None)}
    params = {k: v for k, v in paging.items() if v is not None}
    if a.action == "list":
        if getattr(a, "client", None):
            params["clientId"] = a.client
        return "GET", f"/api/v1/{a.area}", params
    if a.area == "retained":
        return "DELETE", f"/api/v1/retained/{quote(a.topic, safe='/')}", {}
    method = "GET" if a.action == "show" else "DELETE"
    return method, f"/api/v1/{a.area}/{quote(a.client_id, safe='')}", {}


def _render(a: argparse.Namespace, result: dict, out: TextIO) -> None:
    if a.action == "list":
        table(result["items"], COLUMNS[a.area], out)
        shown = len(result["items"])
        if shown < result["total"]:
            print(f"({shown} of {result['total']} from {result['offset']}; --offset and --limit for more)", file=out)
        return
    if a.action == "show":
        subs = result.pop("subscriptionList", [])
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key.ljust(width)}  {'-' if value is None else value}", file=out)
        if subs:
            print(file=out)
            table(subs, COLUMNS["subscriptions"][1:], out)
        return
    what = {"kick": f"client {result.get('clientId')} kicked",
            "delete": (f"retained message on {result.get('topic')} deleted" if a.area == "retained"
                       else f"session {result.get('clientId')} deleted")}
    print(what[a.action], file=out)


def run(argv: list[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        a = build_parser().parse_args(_hoist(list(argv)))
    except SystemExit as exc:
        return int(exc.code or 0)
    method, path, params = _request(a)
    result = call_api(a, method, path, params, err, prog="mqgate admin",
                      unreachable="is mqgate serve running with [http] port on? --url or $MQGATE_URL")
    if result is None:
        return 1
    if a.json:
        json.dump(result, out, indent=2, sort_keys=True)
        print(file=out)
    else:
        _render(a, result, out)
    return 0


def http_admin_main(argv: list[str]) -> int:
    try:
        return run(argv)
    except BrokenPipeError:  # `mqgate admin ... | head`
        sys.stdout = open(os.devnull, "w")
        return 0
