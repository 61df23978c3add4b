"""The admin tool's actions as calls, for the dashboard (``gateway/http``): the same code
paths as ``mqgate admin``, through the name servers, so a page acts like the command.

Rules kept here:
- Each action opens its own client and answers what the command would print as
  JSON; every failure (a broker's refusal, a name server or broker that does not
  answer) is `AdminError` with the line the command would print.
- Nothing here knows about HTTP or argparse.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Awaitable, Callable

from core.admin.base import UNREACHABLE, Admin, AdminError
from core.admin.cluster import cluster_list, cluster_status
from core.admin.groups import group_reset_offset
from core.admin.topics import topic_create
from core.admin.trace import trace_one
from core.client.api import MQClientError, open_client_api
from core.trace import TRACE_TOPIC


async def _run(namesrvs: list[str], action: Callable[[Admin], Awaitable[Any]], timeout: float = 10.0) -> Any:
    failure: Exception | None = None
    try:
        async with open_client_api(timeout) as api:
            try:
                return await action(Admin(api, list(namesrvs)))
            except (AdminError, MQClientError, *UNREACHABLE) as exc:
                failure = exc
    except OSError as exc:
        failure = exc
    if isinstance(failure, AdminError):
        raise failure
    raise AdminError(str(failure))


async def create_topic(namesrvs: list[str], name: str, queues: int, *, perm: int = 6) -> dict:
    """``mqgate admin topic create NAME --queues N``: on every master."""
    args = SimpleNamespace(name=name, queues=queues, perm=perm, order=False, broker=None, cluster=None)
    return await _run(namesrvs, lambda admin: topic_create(admin, args))


async def reset_group_offset(namesrvs: list[str], group: str, topic: str, when: str, *, force: bool = True) -> dict:
    """``mqgate admin group reset-offset GROUP --topic T --time WHEN [--force]``."""
    args = SimpleNamespace(group=group, topic=topic, time=when, force=force)
    return await _run(namesrvs, lambda admin: group_reset_offset(admin, args))


async def trace_message(namesrvs: list[str], msg_id: str, trace_topic: str = TRACE_TOPIC) -> dict:
    """``mqgate admin trace MSGID``: the message's path from its trace records."""
    return await _run(namesrvs, lambda admin: trace_one(admin, trace_topic, msg_id))


async def cluster_overview(namesrvs: list[str]) -> dict:
    """``mqgate admin cluster list`` and ``cluster status`` together: every broker of the
    cluster with its role and log, and the gateway nodes with their clients."""
    async def both(admin: Admin) -> dict:
        listed = await cluster_list(admin, SimpleNamespace())
        status = await cluster_status(admin, SimpleNamespace())
        for row in listed["brokers"]:
            row.pop("runtime", None)
        return {"brokers": listed["brokers"], "nodes": status["nodes"]}
    return await _run(namesrvs, both)
