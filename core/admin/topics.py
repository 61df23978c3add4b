"""``mqgate admin topic create|list|route|delete|status`` (mqadmin updateTopic,
topicList, topicRoute, deleteTopic, topicStatus).

Rules kept here:

- ``create`` goes to every master of the cluster (``--cluster`` one cluster,
  ``--broker`` one address); ``--order`` also stores ``ORDER_TOPIC_CONFIG``
  on the name servers so clients see ``orderTopicConf``. It returns once
  every name server shows the new route (at most 5 s).
- ``delete``, like mqadmin's deleteTopic: DELETE_TOPIC_IN_BROKER on each
  master serving the topic (of ``--cluster`` when given; slaves follow
  through their metadata sync), then DELETE_TOPIC_IN_NAMESRV on every name
  server, and the topic's ``ORDER_TOPIC_CONFIG`` once no broker serves it.
  It returns once the name servers no longer route the topic to the
  deleted brokers (at most 5 s: a registration already in flight may bring
  the route back for a moment). An unknown topic is an error.
- ``status``: GET_TOPIC_STATS_INFO of each master in the route: per queue,
  min and max offset and the store time of the last message.
"""

from __future__ import annotations

from typing import TextIO

import trio

from core.admin.base import UNREACHABLE, Admin, AdminError
from core.admin.render import human_time, table
from core.client.api import MQBrokerError
from core.remoting import RequestCode, ResponseCode

ORDER_NAMESPACE = "ORDER_TOPIC_CONFIG"
WAIT_ROUTE_S = 5.0


def add_parsers(sub) -> None:
    topic = sub.add_parser("topic", help="create, list, route, delete, status").add_subparsers(dest="action", required=True)
    c = topic.add_parser("create", help="create or update a topic on every master broker (mqadmin updateTopic)")
    c.add_argument("name")
    add_create_options(c)
    topic.add_parser("list", help="every topic the name servers route (mqadmin topicList)")
    r = topic.add_parser("route", help="the name servers' route of a topic (mqadmin topicRoute)")
    r.add_argument("name")
    d = topic.add_parser("delete", help="delete a topic from its brokers and the name servers (mqadmin deleteTopic)")
    d.add_argument("name")
    d.add_argument("--cluster", help="only from this cluster's brokers")
    s = topic.add_parser("status", help="per queue: min and max offset, last store time (mqadmin topicStatus)")
    s.add_argument("name")


def add_create_options(c) -> None:
    c.add_argument("--queues", type=int, default=8)
    c.add_argument("--order", action="store_true", help="ordered topic (orderTopicConf on the name servers)")
    c.add_argument("--perm", type=int, default=6)
    c.add_argument("--cluster", help="only on this cluster's masters")
    c.add_argument("--broker", help="only on this broker address")


async def topic_create(admin: Admin, a) -> dict:
    if a.broker:
        names = {v: k for k, v in (await admin.masters()).items()}
        masters = {names.get(a.broker, a.broker): a.broker}
    else:
        masters = await admin.masters(a.cluster)
    if not masters:
        raise AdminError("the name servers know no master broker")
    for name, addr in sorted(masters.items()):
        await admin.api.create_topic(addr, a.name, a.queues, a.queues, perm=a.perm, order=a.order)
    if a.order:
        conf = ";".join(f"{name}:{a.queues}" for name in sorted(masters))
        for ns in admin.namesrvs:
            resp = await admin.api.call(ns, RequestCode.PUT_KV_CONFIG, {"namespace": ORDER_NAMESPACE, "key": a.name, "value": conf})
            if resp.code != ResponseCode.SUCCESS:
                raise MQBrokerError(resp.code, resp.remark, ns)
    await _wait_route(admin, a.name, lambda route: route is not None and set(masters) <= {
        q.broker_name for q in route.queue_datas if q.write_queue_nums == a.queues})
    return {"topic": a.name, "queues": a.queues, "order": a.order, "brokers": sorted(masters)}


async def _wait_route(admin: Admin, topic: str, done, timeout: float = WAIT_ROUTE_S) -> None:
    """Brokers re-register a changed topic at once but asynchronously: wait until every
    name server's route satisfies ``done`` so the next command (or client) sees it."""
    with trio.move_on_after(timeout):
        for ns in admin.namesrvs:
            while True:
                try:
                    route = await admin.api.get_route(ns, topic)
                except UNREACHABLE:
                    break  # a dead name server is not waited for
                if done(route):
                    break
                await trio.sleep(0.05)


async def topic_list(admin: Admin, a) -> dict:
    return {"topics": sorted(await admin.on_namesrv(admin.api.get_topic_list))}


async def topic_route(admin: Admin, a) -> dict:
    route = await admin.route(a.name)
    return {
        "topic": a.name,
        "queueDatas": [{"brokerName": q.broker_name, "readQueueNums": q.read_queue_nums,
                        "writeQueueNums": q.write_queue_nums, "perm": q.perm} for q in route.queue_datas],
        "brokerDatas": [{"brokerName": b.broker_name, "cluster": b.cluster,
                         "brokerAddrs": {str(k): v for k, v in sorted(b.addrs.items())}} for b in route.broker_datas],
        "orderTopicConf": route.order_topic_conf,
    }


async def topic_delete(admin: Admin, a) -> dict:
    route = await admin.route(a.name)
    serving = {q.broker_name for q in route.queue_datas}
    targets = {n: addr for n, addr in (await admin.masters(a.cluster)).items() if n in serving}
    if a.cluster and not targets:
        raise AdminError(f"no broker of cluster {a.cluster} serves topic {a.name}")
    for name, addr in sorted(targets.items()):
        await admin.api.delete_topic_in_broker(addr, a.name)
    cleared = []
    for ns in admin.namesrvs:
        try:
            await admin.api.delete_topic_in_namesrv(ns, a.name, a.cluster)
        except UNREACHABLE:
            continue
        cleared.append(ns)
    if not cleared:
        raise AdminError(f"topic {a.name} was deleted from {', '.join(sorted(targets))} but no name server answered")
    if route.order_topic_conf and serving <= set(targets):
        for ns in cleared:
            await admin.api.call(ns, RequestCode.DELETE_KV_CONFIG, {"namespace": ORDER_NAMESPACE, "key": a.name})
    await _wait_route(admin, a.name, lambda r: r is None or not {q.broker_name for q in r.queue_datas} & set(targets))
    return {"topic": a.name, "brokers": sorted(targets), "namesrvs": cleared}


async def topic_status(admin: Admin, a) -> dict:
    route = await admin.route(a.name)
    rows = []
    for name, addr in sorted(route.broker_addrs().items()):
        stats = await admin.api.topic_stats(addr, a.name)
        for mq, st in sorted((stats or {}).items(), key=lambda kv: (kv[0].broker_name, kv[0].queue_id)):
            rows.append({"brokerName": mq.broker_name, "queueId": mq.queue_id, "minOffset": st.get("minOffset"),
                         "maxOffset": st.get("maxOffset"), "lastUpdateTimestamp": st.get("lastUpdateTimestamp")})
    if not rows:
        raise AdminError(f"no broker in the route of topic {a.name} has it (deleted a moment ago?)")
    return {"topic": a.name, "queues": rows}


def render(action: str, result: dict, out: TextIO) -> None:
    if action == "create":
        print(f"topic {result['topic']} ({result['queues']} queues{', ordered' if result['order'] else ''}) "
              f"on {', '.join(result['brokers'])}", file=out)
    elif action == "list":
        for t in result["topics"]:
            print(t, file=out)
    elif action == "route":
        rows = [{**q, "addrs": ", ".join(f"{k}={v}" for b in result["brokerDatas"] if b["brokerName"] == q["brokerName"]
                                          for k, v in b["brokerAddrs"].items())} for q in result["queueDatas"]]
        table(rows, ["brokerName", "readQueueNums", "writeQueueNums", "perm", "addrs"], out)
        if result["orderTopicConf"]:
            print(f"orderTopicConf: {result['orderTopicConf']}", file=out)
    elif action == "delete":
        print(f"deleted topic {result['topic']} from {', '.join(result['brokers']) or 'no broker'} "
              f"and {len(result['namesrvs'])} name server(s)", file=out)
    elif action == "status":
        rows = [{**r, "lastUpdated": human_time(r["lastUpdateTimestamp"])} for r in result["queues"]]
        table(rows, ["brokerName", "queueId", "minOffset", "maxOffset", "lastUpdated"], out)
