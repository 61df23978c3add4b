"""``mqgate admin cluster list`` and ``broker runtime`` (mqadmin clusterList, brokerStatus).

Rules kept here:

- ``cluster list``: every broker the name servers know (masters and
  slaves), each asked for GET_BROKER_RUNTIME_INFO; a broker that does not
  answer is listed as UNREACHABLE, not an error. ``hours`` is the age of
  the broker's earliest stored message, as mqadmin's ``#Hour``.
- ``broker runtime``: the runtime table of every master, or of ``--broker``.
- ``cluster status``: the brokers (masters), and the MQTT gateway nodes
  (``mqgate gateway``, docs/CLUSTER.md): the clients of consumer group
  ``mqgate_gateway_nodes`` each master lists, with their client counts read
  from the gateway's meta records (topic ``rmq_sys_mqtt_meta``, msgpack
  ``[kind, key, value]``, last record per key wins): persistent sessions
  connected on the node (``"sess"`` with no ``gone``) and clean sessions
  with subscriptions (``"live"``, keyed ``<node>/<client id>``). A clean
  session without subscriptions writes no record and is not counted. A
  node heartbeats to every broker group it sends to: its ``groups`` are
  the masters that list it, its ``broker`` the first of them (its home,
  which holds the meta records).
"""

from __future__ import annotations

import time
from typing import TextIO

import msgpack

from core.admin.base import UNREACHABLE, Admin
from core.client.model import MessageQueue
from core.store.message import decode_messages
from core.admin.render import table
from core.client.api import MQBrokerError


def add_parsers(sub) -> None:
    cluster = sub.add_parser("cluster", help="the cluster's brokers").add_subparsers(dest="action", required=True)
    cluster.add_parser("list", help="every broker: cluster, name, id, address, version, role (mqadmin clusterList)")
    cluster.add_parser("status", help="brokers and MQTT gateway nodes with their client counts")
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


GATEWAY_NODES_GROUP = "mqgate_gateway_nodes"  # gateway.membership.NODES_GROUP
GATEWAY_META_TOPIC = "rmq_sys_mqtt_meta"  # gateway.meta.META_TOPIC


async def _meta_records(admin: Admin, addr: str, broker_name: str) -> dict[tuple[str, str], object]:
    mq = MessageQueue(GATEWAY_META_TOPIC, broker_name, 0)
    state: dict[tuple[str, str], object] = {}
    try:
        offset = await admin.api.min_offset(addr, mq)
        end = await admin.api.max_offset(addr, mq)
    except MQBrokerError:
        return state  # no gateway ever wrote there
    while offset < end:
        resp = await admin.api.pull(addr, "mqgate_admin", mq, offset, 256, subscription="*", sub_version=0,
                                    commit_offset=None, suspend_ms=0, timeout=admin.api.timeout)
        if resp.code != 0 or resp.next_begin_offset <= offset:
            break
        for msg in decode_messages(resp.body):
            try:
                kind, key, value = msgpack.unpackb(msg.body, raw=False, strict_map_key=False)
            except Exception:  # noqa: BLE001 - not ours to judge here: the gateway logs bad records
                continue
            if value is None:
                state.pop((kind, key), None)
            else:
                state[(kind, key)] = value
        offset = resp.next_begin_offset
    return state


async def cluster_status(admin: Admin, a) -> dict:
    masters = await admin.masters()
    brokers, nodes = [], {}
    for name, addr in sorted(masters.items()):
        try:
            ids = await admin.api.get_consumer_ids(addr, GATEWAY_NODES_GROUP)
            records = await _meta_records(admin, addr, name)
            reachable = True
        except UNREACHABLE:
            ids, records, reachable = [], {}, False
        brokers.append({"brokerName": name, "addr": addr, "reachable": reachable, "gatewayNodes": len(ids)})
        counts = {node: 0 for node in ids}
        for (kind, key), value in records.items():
            if kind == "sess" and isinstance(value, dict) and value.get("gone") is None:
                node = value.get("node")
            elif kind == "live":
                node = str(key).partition("/")[0]
            else:
                continue
            if node in counts:
                counts[node] += 1
        for node, n in counts.items():
            row = nodes.setdefault(node, {"node": node, "broker": name, "groups": [], "clients": 0})
            row["groups"].append(name)
            row["clients"] += n
    return {"brokers": brokers, "nodes": sorted(nodes.values(), key=lambda r: r["node"])}


async def broker_runtime(admin: Admin, a) -> dict:
    targets = {a.broker: a.broker} if a.broker else await admin.masters()
    return {"brokers": {name: await admin.api.broker_runtime_info(addr) for name, addr in sorted(targets.items())}}


def render(action: str, result: dict, out: TextIO) -> None:
    if action == "list":
        table(result["brokers"], ["cluster", "brokerName", "brokerId", "addr", "version", "role", "maxOffset", "hours"], out)
    elif action == "status":
        table(result["brokers"], ["brokerName", "addr", "reachable", "gatewayNodes"], out)
        print(file=out)
        table([dict(r, groups=",".join(r["groups"])) for r in result["nodes"]], ["node", "broker", "groups", "clients"],
              out)
    elif action == "runtime":
        for name, kv in result["brokers"].items():
            print(f"[{name}]", file=out)
            table([{"key": k, "value": v} for k, v in sorted(kv.items())], ["key", "value"], out)
