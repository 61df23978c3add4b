"""``mqgate admin events ...``: event buses, sources and rules from the shell, over the event API.

Usage (global options may come anywhere on the line)::

    mqgate admin [--url URL] [--user NAME] [--password PW] [--json] [--timeout S] events VERB
    buses   list | show NAME | create FILE | delete NAME
    sources list | show NAME | create FILE | delete NAME
    rules   list [--bus BUS] | show BUS NAME | create FILE | enable BUS NAME | disable BUS NAME
            | delete BUS NAME | counts [--bus BUS]
    test PATTERN_FILE EVENT_FILE        does the pattern match the sample event?
    put BUS FILE                        PutEvents: one structured event or a JSON array of them

Rules kept here:
- FILE is JSON, or TOML when its name ends in ``.toml``; ``-`` reads JSON
  from standard input. A file that does not parse is a one-line error
  naming it (exit 2), before any request.
- Every verb is one request to the event API (``gateway.http.events_api``);
  ``--url`` defaults to ``$MQGATE_EVENTS_URL``, else
  ``http://127.0.0.1:18084`` (the event API is off until ``[events] port``
  is set; docs/EVENTS.md uses 18084). Credentials as ``mqgate admin``'s
  other HTTP verbs (``$MQGATE_USER``, ``$MQGATE_PASSWORD``).
- Exit status 0 on success (``test``: 0 when it matches, 3 when it does
  not); 1 when the server refused or could not be reached (its one-line
  reason on stderr); 2 on a usage error or a bad file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from typing import Any, TextIO
from urllib.parse import quote

from core.admin import table
from gateway.http.cli import add_global_options, call_api, hoist_options

DEFAULT_URL = "http://127.0.0.1:18084"
BASE = "/api/v1/events"
COLUMNS = {
    "buses": ["name", "topic", "description"],
    "sources": ["name", "bus", "kind", "mqttTopic", "type", "state"],
    "rules": ["bus", "name", "enabled", "state", "targets", "matched", "delivered", "failed", "deadLettered"],
    "counts": ["bus", "name", "matched", "delivered", "failed", "deadLettered"],
}


class _BadFile(Exception):
    pass


def read_definition(path: str) -> Any:
    """The JSON (or TOML, for ``*.toml``) object in ``path``; ``-`` is standard input."""
    try:
        if path == "-":
            return json.load(sys.stdin)
        with open(path, "rb") as f:
            if path.endswith(".toml"):
                return tomllib.load(f)
            return json.load(f)
    except OSError as e:
        raise _BadFile(f"{path}: {e.strerror}") from None
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise _BadFile(f"{path}: not valid {'TOML' if path.endswith('.toml') else 'JSON'}: {e}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqgate admin", description="event buses, sources and rules over the event "
                                "API (docs/EVENTS.md)")
    add_global_options(p, "MQGATE_EVENTS_URL", DEFAULT_URL, "the event API")
    top = p.add_subparsers(dest="events", required=True, metavar="events")
    sub = top.add_parser("events", help="buses, sources, rules").add_subparsers(dest="area", required=True,
                                                                                 metavar="AREA")
    for area in ("buses", "sources"):
        s = sub.add_parser(area, help=f"{area}: list, show, create, delete").add_subparsers(dest="action",
                                                                                            required=True)
        s.add_parser("list")
        s.add_parser("show").add_argument("name")
        s.add_parser("create").add_argument("file", help="JSON or TOML (.toml) file; - = standard input")
        s.add_parser("delete").add_argument("name")
    s = sub.add_parser("rules", help="rules: list, show, create, enable, disable, delete, counts") \
        .add_subparsers(dest="action", required=True)
    s.add_parser("list").add_argument("--bus")
    s.add_parser("counts").add_argument("--bus")
    s.add_parser("create").add_argument("file", help="JSON or TOML (.toml) file; - = standard input")
    for action in ("show", "enable", "disable", "delete"):
        a = s.add_parser(action)
        a.add_argument("bus")
        a.add_argument("name")
    t = sub.add_parser("test", help="does a pattern match a sample event?")
    t.add_argument("pattern_file")
    t.add_argument("event_file")
    t = sub.add_parser("put", help="PutEvents from a file (one structured event or an array)")
    t.add_argument("bus")
    t.add_argument("file")
    return p


def _request(a: argparse.Namespace) -> tuple[str, str, dict, Any]:
    """(method, path, params, JSON body or None)."""
    q = lambda *parts: "/".join(quote(x, safe="") for x in parts)  # noqa: E731
    if a.area == "test":
        return "POST", f"{BASE}/test", {}, {"pattern": read_definition(a.pattern_file),
                                            "event": read_definition(a.event_file)}
    if a.area == "put":
        return "POST", f"{BASE}/buses/{q(a.bus)}/events", {}, read_definition(a.file)
    if a.action in ("list", "counts"):
        params = {"bus": a.bus} if getattr(a, "bus", None) else {}
        return "GET", f"{BASE}/{a.area}", params, None
    if a.action == "create":
        return "POST", f"{BASE}/{a.area}", {}, read_definition(a.file)
    if a.area == "rules":
        path = f"{BASE}/rules/{q(a.bus, a.name)}"
    else:
        path = f"{BASE}/{a.area}/{q(a.name)}"
    if a.action in ("enable", "disable"):
        return "POST", f"{path}/{a.action}", {}, None
    return ("DELETE" if a.action == "delete" else "GET"), path, {}, None


def _render(a: argparse.Namespace, result: dict, out: TextIO) -> int:
    if a.area == "test":
        print("matches" if result.get("matches") else "does not match", file=out)
        return 0 if result.get("matches") else 3
    if a.area == "put":
        print(f"{result['stored']} event(s) stored: {' '.join(result['ids'])}", file=out)
        return 0
    if a.action in ("list", "counts"):
        rows = result["items"]
        for r in rows:
            if isinstance(r.get("targets"), list):
                r["targets"] = ",".join(r["targets"])
        table(rows, COLUMNS["counts" if a.action == "counts" else a.area], out)
        return 0
    if a.action == "delete":
        print(f"deleted {result['deleted']}", file=out)
        return 0
    spec = result.pop("spec", None)
    for key, value in result.items():
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "-"
        print(f"{key:<16}{value}", file=out)
    if spec is not None and a.action == "show":
        print(json.dumps(spec, indent=2), file=out)
    return 0


def run(argv: list[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        a = build_parser().parse_args(hoist_options(list(argv)))
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        method, path, params, body = _request(a)
    except _BadFile as e:
        print(f"mqgate admin events: {e}", file=err)
        return 2
    result = call_api(a, method, path, params, err, prog="mqgate admin events",
                      unreachable="is [events] port set? --url or $MQGATE_EVENTS_URL",
                      body=json.dumps(body).encode() if body is not None else None)
    if result is None:
        return 1
    if a.json:
        json.dump(result, out, indent=2, sort_keys=True)
        print(file=out)
        return 0 if a.area != "test" or result.get("matches") else 3
    return _render(a, result, out)


def events_admin_main(argv: list[str]) -> int:
    try:
        return run(argv)
    except BrokenPipeError:  # `mqgate admin events ... | head`
        sys.stdout = open(os.devnull, "w")
        return 0
