"""``mqgate admin cluster list`` and ``broker runtime`` (mqadmin clusterList, brokerStatus).

Rules kept here:

- ``cluster list``: every broker the name servers know (masters and
  slaves), each asked for GET_BROKER_RUNTIME_INFO; a broker that does not
  answer is listed as UNREACHABLE, not an error. ``hours`` is the age of
  the broker's earliest stored message, as mqadmin's ``#Hour``.
- ``broker runtime``: the runtime table of every master, or of ``--broker``.
"""

from __future__ import annotations

import time
from typing import TextIO

from core.admin.base import UNREACHABLE, Admin
from core.admin.render import table
from core.client.api import MQBrokerError


def add_parsers(sub) -> None:
    cluster = sub.add_parser("cluster", help="the cluster's brokers").add_subparsers(dest="action", required=True)
    cluster.add_parser("list", help="every broker: cluster, name, id, address, version, role (mqadmin clusterList)")
    broker = sub.add_parser("broker", help="a broker's runtime table").add_subparsers(dest="action", required=True)
    b = broker.add_parser("runtime", help="GET_BROKER_RUNTIME_INFO of each master broker (mqadmin brokerStatus)")
    b.add_argument("--broker", help="only this broker address")


def _hours_since(ms: str | None) -> float | None:
    try:
        ts = int(ms or -1)
    except ValueError:
        return None
    return round((time.time() * 1000 - ts) / 3_600_000, 2) if ts > 0 else None


async def cluster_list(admin: Admin, a) -> dict:
    info = await admin.cluster_info()
    brokers = await admin.brokers()
    rows = []
    for cluster, names in sorted((info.get("clusterAddrTable") or {}).items()):
        for name in sorted(names):
            for bid, addr in sorted(brokers.get(name, {}).items()):
                try:
                    rt = await admin.api.broker_runtime_info(addr)
                except (*UNREACHABLE, MQBrokerError):
                    rt = None
                rows.append({
                    "cluster": cluster, "brokerName": name, "brokerId": bid, "addr": addr,
                    "version": rt.get("brokerVersionDesc") if rt else None,
                    "role": rt.get("brokerRole") if rt else "UNREACHABLE",
                    "maxOffset": rt.get("commitLogMaxOffset") if rt else None,
                    "hours": _hours_since(rt.get("earliestMessageTimeStamp")) if rt else None,
                    "runtime": rt,
                })
    return {"brokers": rows}


async def broker_runtime(admin: Admin, a) -> dict:
    targets = {a.broker: a.broker} if a.broker else await admin.masters()
    return {"brokers": {name: await admin.api.broker_runtime_info(addr) for name, addr in sorted(targets.items())}}


def render(action: str, result: dict, out: TextIO) -> None:
    if action == "list":
        table(result["brokers"], ["cluster", "brokerName", "brokerId", "addr", "version", "role", "maxOffset", "hours"], out)
    elif action == "runtime":
        for name, kv in result["brokers"].items():
            print(f"[{name}]", file=out)
            table([{"key": k, "value": v} for k, v in sorted(kv.items())], ["key", "value"], out)
