"""One function per request the client makes (Java ``MQClientAPIImpl``), over a `RemotingClient`.

Rules kept here:

- Every call has a timeout (3 s, the Java client's default; 30 s for a
  suspended pull) and answers typed values, never raw commands.
- A response code a caller must act on raises `MQBrokerError` with the
  code and the broker's remark; a connection or timeout problem raises
  the remoting client's `RemotingConnectionError` / `RemotingTimeoutError`
  (both are `MQClientError`-compatible through `is_remoting_error`).
- Requests carry language PYTHON and version 405 (set on the
  `RemotingClient`), so the name server answers route data in standard
  JSON (version >= 397) and the broker honours ``maxReconsumeTimes``
  (version >= 117).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator

from core.client.model import MessageQueue
from core.client.route import TopicRoute
from core.remoting import (
    CURRENT_VERSION,
    LanguageCode,
    PullSysFlag,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_json,
    encode_json,
)
from core.remoting.client import RemotingClient, RemotingConnectionError, RemotingTimeoutError, open_remoting_client

__all__ = [
    "ClientApi",
    "open_client_api",
    "MQBrokerError",
    "MQClientError",
    "PullResponse",
    "is_remoting_error",
]

DEFAULT_TIMEOUT = 3.0


class MQClientError(Exception):
    """The client could not do what was asked (no route, bad message, closed client...)."""


class MQBrokerError(MQClientError):
    """The broker or name server answered with an error code."""

    def __init__(self, code: int, remark: str | None, addr: str = ""):
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"{name} ({code}) from {addr or '?'}: {remark or ''}")
        self.code = code
        self.remark = remark
        self.addr = addr


def is_remoting_error(exc: BaseException) -> bool:
    return isinstance(exc, (RemotingConnectionError, RemotingTimeoutError, OSError))


def _check(resp: RemotingCommand, addr: str, *ok: int) -> RemotingCommand:
    if resp.code not in (ok or (ResponseCode.SUCCESS,)):
        raise MQBrokerError(resp.code, resp.remark, addr)
    return resp


def _json_body(obj) -> bytes:
    return encode_json(obj, standard=True).encode()


@dataclass(frozen=True, slots=True)
class PullResponse:
    code: int  # 0 FOUND, 19 NO_NEW_MSG, 20 NO_MATCHED_MSG, 21 OFFSET_ILLEGAL
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes
    suggest_which_broker_id: int = 0


class ClientApi:
    """Typed requests to name servers and brokers."""

    def __init__(self, remoting: RemotingClient, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.remoting = remoting
        self.timeout = timeout

    async def call(self, addr: str, code: int, ext: dict | None = None, body: bytes = b"",
                   timeout: float | None = None) -> RemotingCommand:
        req = RemotingCommand.request(code, ext, body)
        return await self.remoting.invoke(addr, req, timeout or self.timeout)

    async def oneway(self, addr: str, code: int, ext: dict | None = None, body: bytes = b"") -> None:
        await self.remoting.invoke_oneway(addr, RemotingCommand.request(code, ext, body), self.timeout)

    # ---- name server ----

    async def get_route(self, namesrv: str, topic: str) -> TopicRoute | None:
        """None when the name server has no route (TOPIC_NOT_EXIST)."""
        resp = await self.call(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": True})
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        _check(resp, namesrv)
        return TopicRoute.from_json(topic, decode_json(resp.body))

    async def get_topic_list(self, namesrv: str) -> list[str]:
        resp = _check(await self.call(namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), namesrv)
        return list(decode_json(resp.body).get("topicList") or [])

    async def get_cluster_info(self, namesrv: str) -> dict:
        resp = _check(await self.call(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO), namesrv)
        return decode_json(resp.body)

    # ---- producer ----

    async def send(self, addr: str, code: int, header: dict, body: bytes, timeout: float | None = None) -> RemotingCommand:
        resp = await self.call(addr, code, header, body, timeout)
        return _check(resp, addr, 0, 10, 11, 12)

    async def send_oneway(self, addr: str, code: int, header: dict, body: bytes) -> None:
        await self.oneway(addr, code, header, body)

    # ---- clients ----

    async def heartbeat(self, addr: str, data: dict) -> None:
        _check(await self.call(addr, RequestCode.HEART_BEAT, None, _json_body(data)), addr)

    async def unregister_client(self, addr: str, client_id: str, producer_group: str | None = None,
                                consumer_group: str | None = None) -> None:
        ext = {"clientID": client_id, "producerGroup": producer_group, "consumerGroup": consumer_group}
        _check(await self.call(addr, RequestCode.UNREGISTER_CLIENT, ext), addr)

    async def get_consumer_ids(self, addr: str, group: str) -> list[str]:
        resp = await self.call(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        if resp.code != ResponseCode.SUCCESS:
            return []
        return [str(c) for c in decode_json(resp.body).get("consumerIdList") or ()]

    async def lock_batch(self, addr: str, group: str, client_id: str, mqs: list[MessageQueue]) -> set[MessageQueue]:
        body = {"clientId": client_id, "consumerGroup": group, "mqSet": [mq.to_json() for mq in mqs]}
        resp = _check(await self.call(addr, RequestCode.LOCK_BATCH_MQ, None, _json_body(body)), addr)
        return {MessageQueue.from_json(d) for d in decode_json(resp.body).get("lockOKMQSet") or ()}

    async def unlock_batch(self, addr: str, group: str, client_id: str, mqs: list[MessageQueue]) -> None:
        body = {"clientId": client_id, "consumerGroup": group, "mqSet": [mq.to_json() for mq in mqs]}
        _check(await self.call(addr, RequestCode.UNLOCK_BATCH_MQ, None, _json_body(body)), addr)

    # ---- consumer ----

    async def pull(self, addr: str, group: str, mq: MessageQueue, offset: int, max_nums: int, *,
                   subscription: str, sub_version: int, commit_offset: int | None,
                   suspend_ms: int, timeout: float, expression_type: str = "TAG") -> PullResponse:
        sys_flag = PullSysFlag.SUBSCRIPTION
        if commit_offset is not None and commit_offset > 0:
            sys_flag |= PullSysFlag.COMMIT_OFFSET
        if suspend_ms > 0:
            sys_flag |= PullSysFlag.SUSPEND
        ext = {
            "consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "queueOffset": offset,
            "maxMsgNums": max_nums, "sysFlag": int(sys_flag), "commitOffset": commit_offset or 0,
            "suspendTimeoutMillis": suspend_ms, "subscription": subscription, "subVersion": sub_version,
            "expressionType": expression_type,
        }
        resp = await self.call(addr, RequestCode.PULL_MESSAGE, ext, timeout=timeout)
        _check(resp, addr, 0, 19, 20, 21)
        return PullResponse(resp.code, resp.get_long("nextBeginOffset", offset), resp.get_long("minOffset", 0),
                            resp.get_long("maxOffset", 0), resp.body, resp.get_long("suggestWhichBrokerId", 0))

    async def check_client_config(self, addr: str, group: str, client_id: str, subscription: dict) -> None:
        """CHECK_CLIENT_CONFIG: `MQBrokerError` if the broker cannot filter by this subscription."""
        body = {"clientId": client_id, "group": group, "subscriptionData": subscription}
        _check(await self.call(addr, RequestCode.CHECK_CLIENT_CONFIG, None, _json_body(body)), addr)

    async def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue) -> int | None:
        """The committed offset, or None when the broker has none (QUERY_NOT_FOUND)."""
        resp = await self.call(addr, RequestCode.QUERY_CONSUMER_OFFSET,
                               {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id})
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return _check(resp, addr).get_long("offset")

    async def update_consumer_offset(self, addr: str, group: str, mq: MessageQueue, offset: int) -> None:
        ext = {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "commitOffset": offset}
        _check(await self.call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext), addr)

    async def send_back(self, addr: str, group: str, commit_log_offset: int, *, delay_level: int,
                        origin_msg_id: str, origin_topic: str, max_reconsume_times: int) -> None:
        ext = {"offset": commit_log_offset, "group": group, "delayLevel": delay_level, "originMsgId": origin_msg_id,
               "originTopic": origin_topic, "unitMode": False, "maxReconsumeTimes": max_reconsume_times}
        _check(await self.call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, ext), addr)

    async def _offset_call(self, addr: str, code: int, mq: MessageQueue, **extra) -> RemotingCommand:
        ext = {"topic": mq.topic, "queueId": mq.queue_id, **extra}
        return _check(await self.call(addr, code, ext), addr)

    async def max_offset(self, addr: str, mq: MessageQueue) -> int:
        return (await self._offset_call(addr, RequestCode.GET_MAX_OFFSET, mq)).get_long("offset")

    async def min_offset(self, addr: str, mq: MessageQueue) -> int:
        return (await self._offset_call(addr, RequestCode.GET_MIN_OFFSET, mq)).get_long("offset")

    async def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
        resp = await self._offset_call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, timestamp=timestamp_ms)
        return resp.get_long("offset")

    async def earliest_store_time(self, addr: str, mq: MessageQueue) -> int:
        return (await self._offset_call(addr, RequestCode.GET_EARLIEST_MSG_STORETIME, mq)).get_long("timestamp")

    # ---- queries and admin ----

    async def query_message(self, addr: str, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                            end_ms: int = 2**62, *, unique_key: bool = False) -> bytes:
        ext = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin_ms, "endTimestamp": end_ms}
        if unique_key:
            ext["_UNIQUE_KEY_QUERY"] = True
        resp = await self.call(addr, RequestCode.QUERY_MESSAGE, ext)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return b""
        return _check(resp, addr).body

    async def view_message(self, addr: str, commit_log_offset: int) -> bytes:
        return _check(await self.call(addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": commit_log_offset}), addr).body

    async def create_topic(self, addr: str, topic: str, read_queue_nums: int, write_queue_nums: int, *,
                           perm: int = 6, order: bool = False, filter_type: str = "SINGLE_TAG") -> None:
        ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": read_queue_nums,
               "writeQueueNums": write_queue_nums, "perm": perm, "topicFilterType": filter_type,
               "topicSysFlag": 0, "order": order}
        _check(await self.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext), addr)

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        resp = _check(await self.call(addr, RequestCode.GET_BROKER_RUNTIME_INFO), addr)
        return dict(decode_json(resp.body).get("table") or {})

    async def all_topic_config(self, addr: str) -> dict:
        return decode_json(_check(await self.call(addr, RequestCode.GET_ALL_TOPIC_CONFIG), addr).body)

    async def all_consumer_offsets(self, addr: str) -> dict[tuple[str, str], dict[int, int]]:
        """GET_ALL_CONSUMER_OFFSET: {(topic, group): {queue id: offset}}."""
        table = decode_json(_check(await self.call(addr, RequestCode.GET_ALL_CONSUMER_OFFSET), addr).body)
        out = {}
        for key, queues in (table.get("offsetTable") or {}).items():
            topic, sep, group = str(key).rpartition("@")
            if sep:
                out[(topic, group)] = {int(q): int(o) for q, o in (queues or {}).items()}
        return out

    async def all_subscription_groups(self, addr: str) -> dict[str, dict]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: group name -> SubscriptionGroupConfig JSON."""
        resp = _check(await self.call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), addr)
        return dict(decode_json(resp.body).get("subscriptionGroupTable") or {})

    async def update_subscription_group(self, addr: str, config: dict) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ``config`` is a SubscriptionGroupConfig as JSON."""
        _check(await self.call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=_json_body(config)), addr)

    async def topic_stats(self, addr: str, topic: str) -> dict[MessageQueue, dict] | None:
        """GET_TOPIC_STATS_INFO: queue -> {minOffset, maxOffset, lastUpdateTimestamp}; None if the broker lacks the topic."""
        resp = await self.call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        table = decode_json(_check(resp, addr).body).get("offsetTable") or {}
        return {MessageQueue.from_json(dict(k)): dict(v) for k, v in table.items()}

    async def consume_stats(self, addr: str, group: str, topic: str) -> tuple[dict[MessageQueue, dict], float]:
        """GET_CONSUME_STATS: (queue -> {brokerOffset, consumerOffset, pullOffset, lastTimestamp}, consumeTps)."""
        resp = await self.call(addr, RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
        body = decode_json(_check(resp, addr).body)
        table = body.get("offsetTable") or {}
        return {MessageQueue.from_json(dict(k)): dict(v) for k, v in table.items()}, float(body.get("consumeTps") or 0)

    async def consumer_connections(self, addr: str, group: str) -> dict | None:
        """GET_CONSUMER_CONNECTION_LIST: ConsumerConnection JSON; None if no client of the group is online there."""
        resp = await self.call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
        if resp.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return None
        return decode_json(_check(resp, addr).body)

    async def delete_topic_in_broker(self, addr: str, topic: str) -> None:
        _check(await self.call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}), addr)

    async def delete_topic_in_namesrv(self, namesrv: str, topic: str, cluster: str | None = None) -> None:
        ext = {"topic": topic, "clusterName": cluster} if cluster else {"topic": topic}
        _check(await self.call(namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV, ext), namesrv)

    async def reset_offset(self, addr: str, topic: str, group: str, timestamp_ms: int,
                           force: bool) -> tuple[bool, dict[MessageQueue, int]]:
        """INVOKE_BROKER_TO_RESET_OFFSET: (clients online, queue -> new offset). With no client
        online (CONSUMER_NOT_ONLINE) our broker still answers the offsets, for the caller to commit."""
        ext = {"topic": topic, "group": group, "timestamp": timestamp_ms, "isForce": force}
        resp = _check(await self.call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext), addr,
                      ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE)
        table = (decode_json(resp.body).get("offsetTable") or {}) if resp.body else {}
        return resp.code == ResponseCode.SUCCESS, {MessageQueue.from_json(dict(k)): int(v) for k, v in table.items()}

    async def consumer_running_info(self, addr: str, group: str, client_id: str, jstack: bool = False) -> dict:
        """GET_CONSUMER_RUNNING_INFO through the broker at ``addr`` to one client of ``group``.
        The broker waits up to 10 s for the client, so this waits 12 s at least."""
        ext = {"consumerGroup": group, "clientId": client_id, "jstackEnable": jstack}
        resp = _check(await self.call(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, ext,
                                      timeout=max(self.timeout, 12.0)), addr, ResponseCode.SUCCESS)
        return decode_json(resp.body)

    async def consume_message_directly(self, addr: str, group: str, client_id: str, offset_msg_id: str,
                                       topic: str | None = None) -> dict:
        """CONSUME_MESSAGE_DIRECTLY: the broker holding ``offset_msg_id`` hands that message to
        one client's listener once; its ConsumeMessageDirectlyResult."""
        ext = {"consumerGroup": group, "clientId": client_id, "msgId": offset_msg_id, "topic": topic}
        resp = _check(await self.call(addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, ext,
                                      timeout=max(self.timeout, 12.0)), addr, ResponseCode.SUCCESS)
        return decode_json(resp.body)


@asynccontextmanager
async def open_client_api(timeout: float = DEFAULT_TIMEOUT) -> AsyncIterator[ClientApi]:
    """A `ClientApi` on connections of its own (admin tools, benchmarks)."""
    async with open_remoting_client(language=LanguageCode.PYTHON, version=CURRENT_VERSION) as remoting:
        yield ClientApi(remoting, timeout)
