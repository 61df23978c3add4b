"""``mqgate admin group list|progress|connections|status|reset-offset|update``
(mqadmin consumerProgress, consumerConnection, consumerStatus, resetOffsetByTime,
updateSubGroup).

Rules kept here:

- ``list``: every consumer group a master broker knows (subscription
  configs and committed offsets), with its online clients (from each
  master's GET_CONSUMER_CONNECTION_LIST), consume type, message model and
  total lag over the queues it committed on.
- ``progress``: the group's topics come from the brokers' offset tables, or
  ``--topic``; GET_CONSUME_STATS (208, as mqadmin ``consumerProgress``) of
  each broker in the topic's route (its master, else a slave): per queue
  broker offset, consumer offset (0 when none is committed), the lag between
  them and the store time of the last consumed message; and the group's
  pull rate. An unknown group, or an unknown ``--topic``, is an error.
- ``connections``: the group's clients on every master, merged by client
  id, and its subscriptions; no client online is an error.
- ``status``: each online client's own report (GET_CONSUMER_RUNNING_INFO,
  asked through a master the client is connected to): without ``--client``
  one row per client (queues held, messages cached, pull and consume rates,
  failures) and whether all clients subscribe alike; with ``--client`` that
  client's queues, rates per topic and settings (``--jstack`` adds its
  threads' stacks).
- ``reset-offset``: INVOKE_BROKER_TO_RESET_OFFSET on each master of the
  topic's route. Where clients of the group are online the broker sends
  them RESET_CONSUMER_CLIENT_OFFSET and they restart there and commit;
  where none is (CONSUMER_NOT_ONLINE) the offsets the broker computed are
  committed here with UPDATE_CONSUMER_OFFSET, so the group starts there
  next time. The time is ``now`` (the end of each queue), ms since the
  epoch, mqadmin's ``yyyy-MM-dd#HH:mm:ss:SSS`` or ISO 8601, local time.
  ``force`` (the default, as mqadmin) moves either way; ``--no-force``
  only moves a group back.
- ``update``: on every master, the group's config as it is there (or the
  defaults, for a new group) with the options given, sent whole with
  UPDATE_AND_CREATE_SUBSCRIPTIONGROUP; ``--orderly`` is RocketMQ 5's
  ``consumeMessageOrderly`` (a FIFO group for the 5.x clients).
"""

from __future__ import annotations

import argparse
import datetime
from typing import TextIO

from core.admin.base import Admin, AdminError, AdminUsageError
from core.admin.render import human_time, table
from core.client.model import MessageQueue


def add_parsers(sub) -> None:
    group = sub.add_parser("group", help="consumer groups: list, progress, connections, status, reset-offset, update")
    group = group.add_subparsers(dest="action", required=True)
    group.add_parser("list", help="every consumer group the brokers know (mqadmin consumerProgress without -g)")
    g = group.add_parser("progress", help="per queue: broker offset, consumer offset, lag (mqadmin consumerProgress)")
    g.add_argument("group")
    g.add_argument("--topic", action="append", help="only this topic (repeatable)")
    c = group.add_parser("connections", help="the group's online clients and subscriptions (mqadmin consumerConnection)")
    c.add_argument("group")
    st = group.add_parser("status", help="the clients' own reports: queues, cache, rates (mqadmin consumerStatus)")
    st.add_argument("group")
    st.add_argument("--client", help="one client's whole report")
    st.add_argument("--jstack", action="store_true", help="with --client: its threads' stacks too")
    r = group.add_parser("reset-offset", help="move the group to a time on a topic (mqadmin resetOffsetByTime)")
    r.add_argument("group")
    r.add_argument("topic")
    r.add_argument("time", help="now | ms since the epoch | yyyy-MM-dd#HH:mm:ss:SSS | ISO 8601 (local time)")
    r.add_argument("--no-force", dest="force", action="store_false",
                   help="only move back: a queue already before that time keeps its offset")
    u = group.add_parser("update", help="create or change a group's config on every master (mqadmin updateSubGroup)")
    u.add_argument("group")
    u.add_argument("--orderly", type=_bool, help="true: a FIFO group for 5.x clients (consumeMessageOrderly)")
    u.add_argument("--retry-max-times", type=int, help="redeliveries before the DLQ (retryMaxTimes)")
    u.add_argument("--consume-enable", type=_bool, help="false: the group may not consume (consumeEnable)")


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return text.lower() == "true"


def parse_time(text: str) -> int:
    """mqadmin's -s: ``now`` is -1 (each queue's end); else ms since the epoch."""
    text = text.strip()
    if text == "now":
        return -1
    if text.isdigit():
        return int(text)
    for parse in (lambda t: datetime.datetime.strptime(t, "%Y-%m-%d#%H:%M:%S:%f"), datetime.datetime.fromisoformat):
        try:
            return int(parse(text).timestamp() * 1000)
        except ValueError:
            continue
    raise AdminUsageError(f"cannot read the time {text!r}: give now, ms since the epoch, "
                          f"yyyy-MM-dd#HH:mm:ss:SSS or ISO 8601 (2026-01-31T08:00:00)")


async def group_progress(admin: Admin, a) -> dict:
    facts = await admin.require_group(a.group)
    topics = set(a.topic or ()) or facts.topics
    rows = []
    tps = 0.0
    for topic in sorted(topics):
        route = await admin.route(topic)
        for _name, addr in sorted(route.subscribe_addrs().items()):
            table, rate = await admin.api.consume_stats(addr, a.group, topic)
            tps += rate
            for mq, w in sorted(table.items(), key=lambda kv: (kv[0].broker_name, kv[0].queue_id)):
                rows.append({"topic": topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
                             "brokerOffset": w["brokerOffset"], "consumerOffset": w["consumerOffset"],
                             "lag": max(0, w["brokerOffset"] - w["consumerOffset"]),
                             "lastTimestamp": w.get("lastTimestamp") or 0})
    return {"group": a.group, "queues": rows, "totalLag": sum(r["lag"] for r in rows), "consumeTps": tps}


async def group_list(admin: Admin, a) -> dict:
    masters = await admin.masters()
    names: set[str] = set()
    for addr in masters.values():
        names |= set(await admin.broker_groups(addr))
        names |= {g for (_t, g) in await admin.broker_offsets(addr)}
    max_offsets: dict[tuple[str, str, int], int] = {}
    rows = []
    for group in sorted(names):
        facts = await admin.group_facts(group)
        lag = 0
        for (broker, topic), queues in facts.offsets.items():
            for qid, committed in queues.items():
                key = (broker, topic, qid)
                if key not in max_offsets:
                    max_offsets[key] = await admin.api.max_offset(masters[broker], MessageQueue(topic, broker, qid))
                lag += max(0, max_offsets[key] - committed)
        conns = list(facts.connections.values())
        clients = {c["clientId"] for conn in conns for c in conn.get("connectionSet") or ()}
        rows.append({"group": group, "clients": len(clients), "consumeType": conns[0].get("consumeType") if conns else None,
                     "messageModel": conns[0].get("messageModel") if conns else None,
                     "topics": sorted(facts.topics), "lag": lag})
    return {"groups": rows}


async def group_connections(admin: Admin, a) -> dict:
    facts = await admin.group_facts(a.group)
    if not facts.connections:
        why = "" if facts.known else f" (and is unknown: {facts.WHY_UNKNOWN})"
        raise AdminError(f"consumer group {a.group} has no client online{why}")
    clients: dict[str, dict] = {}
    subs: dict[str, str] = {}
    first = next(iter(facts.connections.values()))
    for broker, conn in sorted(facts.connections.items()):
        for c in conn.get("connectionSet") or ():
            clients.setdefault(c["clientId"], {**c, "brokers": []})["brokers"].append(broker)
        for topic, sd in (conn.get("subscriptionTable") or {}).items():
            subs[topic] = sd.get("subString", "*")
    return {"group": a.group, "connections": [clients[k] for k in sorted(clients)],
            "subscriptions": [{"topic": t, "subExpression": e} for t, e in sorted(subs.items())],
            "consumeType": first.get("consumeType"), "messageModel": first.get("messageModel"),
            "consumeFromWhere": first.get("consumeFromWhere")}


async def group_status(admin: Admin, a) -> dict:
    facts = await admin.group_facts(a.group)
    if not facts.connections:
        why = "" if facts.known else f" (and is unknown: {facts.WHY_UNKNOWN})"
        raise AdminError(f"consumer group {a.group} has no client online{why}")
    masters = await admin.masters()
    via: dict[str, str] = {}  # client id -> a master it is connected to
    for broker, conn in sorted(facts.connections.items()):
        for c in conn.get("connectionSet") or ():
            via.setdefault(c["clientId"], masters[broker])
    if a.client:
        if a.client not in via:
            raise AdminError(f"client {a.client} is not online in consumer group {a.group} "
                             f"(online: {', '.join(sorted(via))})")
        info = await admin.api.consumer_running_info(via[a.client], a.group, a.client, a.jstack)
        return {"group": a.group, "clientId": a.client, **_report(info)}
    rows, subscriptions = [], set()
    for client_id, addr in sorted(via.items()):
        info = _report(await admin.api.consumer_running_info(addr, a.group, client_id))
        subscriptions.add(tuple(sorted((s["topic"], s["subString"]) for s in info["subscriptions"])))
        status = info["status"]
        rows.append({"clientId": client_id, "version": info["properties"].get("PROP_CLIENT_VERSION"),
                     "orderly": info["properties"].get("PROP_CONSUMEORDERLY") == "true",
                     "queues": len(info["queues"]), "cachedMsgs": sum(q["cachedMsgCount"] for q in info["queues"]),
                     "pullTPS": round(sum(s["pullTPS"] for s in status), 2),
                     "consumeOKTPS": round(sum(s["consumeOKTPS"] for s in status), 2),
                     "consumeFailedTPS": round(sum(s["consumeFailedTPS"] for s in status), 2),
                     "consumeFailedMsgs": sum(s["consumeFailedMsgs"] for s in status)})
    return {"group": a.group, "clients": rows, "sameSubscriptions": len(subscriptions) <= 1}


def _numbers(fields: dict) -> dict:
    """The C++ client writes its longs and doubles as JSON strings ("commitOffset": "12")."""
    out = {}
    for k, v in fields.items():
        if isinstance(v, str):
            try:
                v = int(v)
            except ValueError:
                try:
                    v = float(v)
                except ValueError:
                    pass
        out[k] = v
    return out


def _report(info: dict) -> dict:
    """ConsumerRunningInfo as rows: queues (MessageQueue keys flattened), status per topic."""
    queues = [_numbers({**dict(mq), **pq}) for mq, pq in (info.get("mqTable") or {}).items()]
    queues.sort(key=lambda q: (q["topic"], q["brokerName"], q["queueId"]))
    status = [{"topic": t, **_numbers(st)} for t, st in sorted((info.get("statusTable") or {}).items())]
    out = {"properties": info.get("properties") or {}, "subscriptions": info.get("subscriptionSet") or [],
           "queues": queues, "status": status}
    if info.get("jstack"):
        out["jstack"] = info["jstack"]
    return out


async def group_reset_offset(admin: Admin, a) -> dict:
    ts = parse_time(a.time)
    route = await admin.route(a.topic)
    facts = await admin.require_group(a.group)
    rows = []
    for name, addr in sorted(route.broker_addrs().items()):
        online, offsets = await admin.api.reset_offset(addr, a.topic, a.group, ts, a.force)
        for mq, offset in sorted(offsets.items(), key=lambda kv: kv[0].queue_id):
            if not online:
                await admin.api.update_consumer_offset(addr, a.group, mq, offset)
            rows.append({"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offset,
                         "appliedBy": "clients" if online else "stored"})
    return {"group": a.group, "topic": a.topic, "timestamp": ts, "force": a.force, "queues": rows,
            "clientsOnline": bool(facts.connections)}


async def group_update(admin: Admin, a) -> dict:
    changes = {key: value for key, value in (("consumeMessageOrderly", a.orderly), ("retryMaxTimes", a.retry_max_times),
                                             ("consumeEnable", a.consume_enable)) if value is not None}
    if not changes:
        raise AdminUsageError("nothing to change: give --orderly, --retry-max-times or --consume-enable")
    if a.retry_max_times is not None and a.retry_max_times < 0:
        raise AdminUsageError(f"--retry-max-times must be 0 or more, not {a.retry_max_times}")
    masters = await admin.masters()
    if not masters:
        raise AdminError("no master broker is registered with the name servers")
    rows = []
    for name, addr in sorted(masters.items()):
        current = (await admin.api.all_subscription_groups(addr)).get(a.group) or {"groupName": a.group}
        config = {**current, **changes}
        await admin.api.update_subscription_group(addr, config)
        rows.append({"brokerName": name, **{k: config.get(k) for k in changes}})
    return {"group": a.group, "brokers": rows}


def render(action: str, result: dict, out: TextIO) -> None:
    if action == "progress":
        rows = [{**r, "lastConsumed": human_time(r["lastTimestamp"]) if r["lastTimestamp"] else "-"}
                for r in result["queues"]]
        table(rows, ["topic", "brokerName", "queueId", "brokerOffset", "consumerOffset", "lag", "lastConsumed"], out)
        print(f"total lag: {result['totalLag']}, consume TPS: {result['consumeTps']:.1f}", file=out)
    elif action == "list":
        rows = [{**r, "topics": ",".join(r["topics"])} for r in result["groups"]]
        table(rows, ["group", "clients", "consumeType", "messageModel", "lag", "topics"], out)
    elif action == "connections":
        table(result["connections"], ["clientId", "clientAddr", "language", "version"], out)
        print(file=out)
        table(result["subscriptions"], ["topic", "subExpression"], out)
        print(file=out)
        for k in ("consumeType", "messageModel", "consumeFromWhere"):
            print(f"{k}: {result[k]}", file=out)
    elif action == "status" and "clients" in result:
        table(result["clients"], ["clientId", "version", "orderly", "queues", "cachedMsgs", "pullTPS", "consumeOKTPS",
                                  "consumeFailedTPS", "consumeFailedMsgs"], out)
        print("subscriptions: " + ("the same on every client" if result["sameSubscriptions"]
                                   else "NOT the same on every client (mqgate admin group connections shows them)"),
              file=out)
    elif action == "status":
        print(f"client {result['clientId']} of {result['group']}", file=out)
        table(result["queues"], ["topic", "brokerName", "queueId", "commitOffset", "cachedMsgCount",
                                 "cachedMsgMinOffset", "cachedMsgMaxOffset", "locked", "droped"], out)
        print(file=out)
        table(result["status"], ["topic", "pullRT", "pullTPS", "consumeRT", "consumeOKTPS", "consumeFailedTPS",
                                 "consumeFailedMsgs"], out)
        print(file=out)
        for k, v in sorted(result["properties"].items()):
            print(f"{k}: {v}", file=out)
        if result.get("jstack"):
            print(file=out)
            print(result["jstack"].rstrip(), file=out)
    elif action == "update":
        table(result["brokers"], list(result["brokers"][0]), out)
    elif action == "reset-offset":
        ts = result["timestamp"]
        when = "now (each queue's end)" if ts == -1 else human_time(ts) if ts > 0 else "0 (each queue's start)"
        print(f"reset consumer group {result['group']} on topic {result['topic']} to {when}"
              f"{'' if result['force'] else ' (only backwards)'}", file=out)
        table(result["queues"], ["brokerName", "queueId", "offset", "appliedBy"], out)
