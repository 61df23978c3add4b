"""The name server: request processors over a `RouteTable`, and its runner.

Modelled on RocketMQ 4.9.x ``DefaultRequestProcessor`` and
``NamesrvController`` (reference 2.1, 3.1, 9). Rules kept here:

- Route data goes out in fastjson's default form (``brokerAddrs`` keys
  unquoted: ``{0:"ip:port"}``) unless the request's version is >= 397
  (V4_9_4) or it carries ``acceptStandardJsonOnly=true``; then every key is
  quoted. Both are compact (no whitespace: the Go client splits
  ``brokerAddrs`` on ``,`` and ``:``). Cluster info is always the default
  form, like Java.
- A broker leaves the tables 120 s after its last registration (scanned
  every 10 s) or as soon as the connection it registered on closes.
- Clock: ``trio.current_time()`` (monotonic), so tests may use a mock clock.
- Name servers never talk to each other; brokers register with each.
- DELETE_TOPIC_IN_NAMESRV drops the topic's queue data (of one cluster's
  brokers with ``clusterName``); it answers SUCCESS for an unknown topic and
  leaves the KV config (``ORDER_TOPIC_CONFIG``) alone, like Java.
"""

from __future__ import annotations

import logging

import trio

from core.namesrv.register_body import RegisterBodyError, body_crc32, decode_register_body
from core.namesrv.route_table import BROKER_EXPIRED_MS, DataVersion, RouteTable
from core.remoting import (
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_json,
    encode_json,
)
from core.remoting.server import Channel, RemotingServer

__all__ = ["NameServer", "run_namesrv", "STANDARD_JSON_VERSION"]

log = logging.getLogger("mqgate.namesrv")

STANDARD_JSON_VERSION = 397  # MQVersion V4_9_4


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


def _json(obj, standard: bool = False) -> bytes:
    return encode_json(obj, standard=standard).encode()


class NameServer:
    """Name-server state and processors; `routes()` is the dispatch table."""

    def __init__(self, *, broker_expired_ms: int = BROKER_EXPIRED_MS) -> None:
        self.table = RouteTable()
        self.kv: dict[str, dict[str, str]] = {}
        self.broker_expired_ms = broker_expired_ms

    def routes(self) -> dict[int, object]:
        return {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.topics_by_cluster,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.PUT_KV_CONFIG: self.put_kv,
            RequestCode.GET_KV_CONFIG: self.get_kv,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.kv_list,
        }

    def channel_closed(self, channel: Channel) -> None:
        for addr in self.table.on_channel_closed(channel):
            log.info("broker %s removed: its connection closed", addr)

    def expire(self) -> list[str]:
        gone = self.table.expire(_now_ms(), self.broker_expired_ms)
        for addr in gone:
            log.info("broker %s expired: no registration for %d ms", addr, self.broker_expired_ms)
        return gone

    # ---- processors ----

    async def register_broker(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        # read every header field first (Java decodes the whole header before acting)
        fields = dict(
            cluster=req.get_str("clusterName"),
            broker_addr=req.get_str("brokerAddr"),
            broker_name=req.get_str("brokerName"),
            broker_id=req.get_long("brokerId"),
            ha_server_addr=req.get_str("haServerAddr", ""),
        )
        compressed = req.get_bool("compressed", False)
        crc = req.get_int("bodyCrc32", 0)
        if crc and body_crc32(req.body) != crc:
            return req.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            body = decode_register_body(req.body, compressed=compressed)
        except RegisterBodyError as exc:
            return req.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        result = self.table.register_broker(
            **fields,
            data_version=body.data_version,
            topic_configs=body.topic_configs,
            filter_servers=body.filter_servers,
            channel=channel,
            now_ms=_now_ms(),
        )
        return req.make_response(
            ResponseCode.SUCCESS, ext={"haServerAddr": result.ha_server_addr, "masterAddr": result.master_addr}
        )

    async def unregister_broker(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        self.table.unregister_broker(
            cluster=req.get_str("clusterName"),
            broker_addr=req.get_str("brokerAddr"),
            broker_name=req.get_str("brokerName"),
            broker_id=req.get_long("brokerId"),
        )
        return req.make_response(ResponseCode.SUCCESS)

    async def get_route(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic = req.get_str("topic")
        route = self.table.route(topic)
        if route is None:
            return req.make_response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}"
            )
        standard = req.version >= STANDARD_JSON_VERSION or req.get_bool("acceptStandardJsonOnly", False)
        order_conf = self.kv.get("ORDER_TOPIC_CONFIG", {}).get(topic)
        if order_conf:
            route["orderTopicConf"] = order_conf
        return req.make_response(ResponseCode.SUCCESS, body=_json(route, standard))

    async def cluster_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, body=_json(self.table.cluster_info()))

    async def topic_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, body=_json({"topicList": self.table.topic_list()}))

    async def topics_by_cluster(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topics = self.table.topics_of_cluster(req.get_str("cluster"))
        return req.make_response(ResponseCode.SUCCESS, body=_json({"topicList": topics}))

    async def delete_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic, cluster = req.get_str("topic"), req.get_str("clusterName", "")
        if self.table.delete_topic(topic, cluster or None):
            log.info("topic %s deleted%s", topic, f" from cluster {cluster}" if cluster else "")
        return req.make_response(ResponseCode.SUCCESS)

    async def query_data_version(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        addr = req.get_str("brokerAddr")
        try:
            theirs = DataVersion.from_json(decode_json(req.body) if req.body else None)
        except ValueError as exc:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"bad DataVersion body: {exc}")
        live = self.table.live.get(addr)
        changed = live is None or live.data_version != theirs
        if live is not None:
            live.last_update_ms = _now_ms()
        body = _json(live.data_version.to_json()) if live is not None else b""
        return req.make_response(ResponseCode.SUCCESS, ext={"changed": changed}, body=body)

    async def put_kv(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        self.kv.setdefault(req.get_str("namespace"), {})[req.get_str("key")] = req.get_str("value")
        return req.make_response(ResponseCode.SUCCESS)

    async def get_kv(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        ns, key = req.get_str("namespace"), req.get_str("key")
        value = self.kv.get(ns, {}).get(key)
        if value is None:
            return req.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return req.make_response(ResponseCode.SUCCESS, ext={"value": value})

    async def delete_kv(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        ns = self.kv.get(req.get_str("namespace"), {})
        ns.pop(req.get_str("key"), None)
        return req.make_response(ResponseCode.SUCCESS)

    async def kv_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        ns = req.get_str("namespace")
        table = self.kv.get(ns)
        if not table:
            return req.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return req.make_response(ResponseCode.SUCCESS, body=_json({"table": table}))


async def run_namesrv(
    host: str | None,
    port: int,
    *,
    broker_expired_ms: int = BROKER_EXPIRED_MS,
    scan_interval: float = 10.0,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve a name server on ``host:port`` until cancelled; reports the bound port.

    Use as ``port = await nursery.start(run_namesrv, "0.0.0.0", 9876)``.
    """
    ns = NameServer(broker_expired_ms=broker_expired_ms)
    server = RemotingServer(ns.routes(), name="namesrv")
    server.on_close(ns.channel_closed)
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(server.serve, host, port)
        task_status.started(bound)
        await trio.sleep(min(5.0, scan_interval))  # Java: first scan after 5 s
        while True:
            ns.expire()
            await trio.sleep(scan_interval)
