"""The ``mqgate admin`` command line: parsing, dispatch, output, exit status.

Rules kept here:

- Global options (``--namesrv``/``-n``, ``--json``, ``--timeout``) may come
  anywhere on the line: they are moved in front of the verb before
  argparse sees the line (``admin topic list --namesrv X`` works).
- Each verb is ``area action`` (``topic status``) or mqadmin's name
  (``topicStatus -t``, see `core.admin.mqadmin`); both run one handler.
- Output: a table by default, one JSON document with ``--json``. Exit
  status 0 on success; 1 on an error (one line on stderr: unknown topic or
  group, message not found, broker refused or unreachable); 2 on usage
  (argparse's errors, a malformed message id or time).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TextIO

import trio

from core.admin import cluster, groups, messages, mqadmin, topics, trace
from core.admin.base import UNREACHABLE, Admin, AdminError, AdminUsageError
from core.admin.render import table
from core.client.api import MQClientError, open_client_api
from core.ha import admin as ha_admin

__all__ = ["admin_main", "build_parser", "hoist_global_options", "run_admin"]

_VALUE_OPTIONS = ("--namesrv", "-n", "--timeout")
_FLAG_OPTIONS = ("--json",)

HANDLERS = {
    ("topic", "create"): topics.topic_create, ("topic", "list"): topics.topic_list,
    ("topic", "route"): topics.topic_route, ("topic", "delete"): topics.topic_delete,
    ("topic", "status"): topics.topic_status,
    ("cluster", "list"): cluster.cluster_list, ("cluster", "status"): cluster.cluster_status,
    ("broker", "runtime"): cluster.broker_runtime,
    ("group", "list"): groups.group_list, ("group", "progress"): groups.group_progress,
    ("group", "connections"): groups.group_connections, ("group", "reset-offset"): groups.group_reset_offset,
    ("group", "status"): groups.group_status,
    ("group", "update"): groups.group_update,
    ("message", "key"): messages.message_key, ("message", "id"): messages.message_id,
    ("dlq", "resend"): messages.dlq_resend, ("trace", "show"): trace.trace_show,
    ("ha", "status"): ha_admin.ha_status, ("ha", "promote"): ha_admin.ha_promote,
}
RENDERERS = {
    "topic": topics.render, "cluster": cluster.render, "broker": cluster.render, "group": groups.render,
    "message": messages.render, "dlq": messages.render, "trace": trace.render,
    "ha": lambda action, result, out: ha_admin.render(action, result, table, out),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mqgate admin", description="administration over the RocketMQ protocol",
        epilog="Global options may come anywhere on the line. mqadmin's verb names and flags work too "
               "(mqgate admin topicStatus -t T). docs/ADMIN.md has every verb next to mqadmin's. "
               "The MQTT side (clients, sessions, retained, subscriptions) goes through the gateway's "
               "HTTP admin API: mqgate admin clients --help, docs/OPERATIONS.md.")
    p.add_argument("-n", "--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
                   help="name servers, host:port;host:port (default $NAMESRV_ADDR or 127.0.0.1:9876)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per request")
    sub = p.add_subparsers(dest="area", required=True, metavar="VERB")
    topics.add_parsers(sub)
    cluster.add_parsers(sub)
    groups.add_parsers(sub)
    messages.add_parsers(sub)
    trace.add_parsers(sub)
    ha_admin.add_parser(sub)
    mqadmin.add_parsers(sub)
    return p


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move the global options (and their values) in front of the verb."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if arg == "--":
            rest.extend(argv[i:])
            break
        if arg in _FLAG_OPTIONS:
            front.append(arg)
        elif arg in _VALUE_OPTIONS and i + 1 < len(argv):
            front += [arg, argv[i + 1]]
            i += 1
        elif name in _VALUE_OPTIONS and name.startswith("--") and "=" in arg:
            front.append(arg)
        else:
            rest.append(arg)
        i += 1
    return front + rest


def _namesrvs(text: str) -> list[str]:
    return [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]


async def run_admin(argv: list[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The admin command inside a running trio loop (tests use this); see `admin_main`."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        a = build_parser().parse_args(hoist_global_options(list(argv)))
    except SystemExit as exc:
        return int(exc.code or 0)
    a = mqadmin.resolve(a)
    failure: Exception | None = None
    try:
        async with open_client_api(a.timeout) as api:
            try:
                result = await HANDLERS[(a.area, a.action)](Admin(api, _namesrvs(a.namesrv)), a)
            except (AdminError, ha_admin.HAAdminError, MQClientError, *UNREACHABLE) as exc:
                failure = exc
    except OSError as exc:
        failure = exc
    if failure is not None:
        print(f"mqgate admin: {failure}", file=err)
        return 2 if isinstance(failure, AdminUsageError) else 1
    if a.json:
        json.dump(result, out, indent=2, sort_keys=True, default=str)
        print(file=out)
    else:
        RENDERERS[a.area](a.action, result, out)
    return 0


def admin_main(argv: list[str]) -> int:
    """``mqgate admin ...``: run one command and answer the exit status."""
    try:
        return trio.run(run_admin, list(argv))
    except BrokenPipeError:  # `mqgate admin ... | head`
        sys.stdout = open(os.devnull, "w")
        return 0
