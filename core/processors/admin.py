"""Messages by key or id, topics and broker info: QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33),
UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21), GET_BROKER_RUNTIME_INFO (28),
GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
GET_TOPIC_STATS_INFO (202), DELETE_TOPIC_IN_BROKER (215).

Reference 2.1, 3.3 (``QueryMessageProcessor``, ``AdminBrokerProcessor``).
Rules kept here:

- QUERY_MESSAGE with ``_UNIQUE_KEY_QUERY=true`` is a message-id lookup and
  returns at most ``defaultQueryMaxNum``; nothing found is 22
  QUERY_NOT_FOUND. Bodies are stored entries, concatenated.
- UPDATE_AND_CREATE_TOPIC refuses invalid names and the cluster's own name
  (SYSTEM_ERROR, like Java); a created or changed topic is registered with
  the name servers at once (the topic table's listener triggers it).
- JSON bodies are fastjson's default form, compact; KVTable values are
  strings.
- GET_TOPIC_STATS_INFO answers, per write queue, min and max offset and
  the store time of the last message (0 for an empty queue), keyed by
  MessageQueue objects (fastjson's object keys); an unknown topic is 17
  TOPIC_NOT_EXIST.
- DELETE_TOPIC_IN_BROKER forgets the topic's config, consumer offsets and
  consume queues and re-registers at once (the topic table's listener);
  an unknown topic is SUCCESS (idempotent, like Java). System topics, the
  cluster's and the broker's own topics are refused (SYSTEM_ERROR), and
  so is any change on a slave.
- ``earliestMessageTimeStamp`` is the store time of the first message the
  commit log holds, -1 when it holds none (Java ``getEarliestMessageTime``).
- Runtime info adds what the broker's services hold: pending half
  messages, checks sent, commits, rollbacks and discards of the
  transaction service, and the timer service's pending and fired counts
  (``broker.timers``) when one runs.
"""

from __future__ import annotations

import time

from core.broker import (
    BrokerRole, SubscriptionGroupConfig, TopicConfig, TopicFilterType, is_system_topic, validate_topic,
)
from core.processors.context import BrokerContext
from core.remoting import RemotingCommand, ResponseCode, decode_json, encode_json
from core.remoting.server import Channel

_BOOT_MS = int(time.time() * 1000)


def _body(obj) -> bytes:
    return encode_json(obj, standard=False).encode()


async def query_message(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    topic = req.get_str("topic")
    key = req.get_str("key")
    max_num = req.get_int("maxNum")
    begin = req.get_long("beginTimestamp")
    end = req.get_long("endTimestamp")
    if req.get_bool("_UNIQUE_KEY_QUERY", False):
        max_num = ctx.broker.config.default_query_max_num
    result = await ctx.broker.query_message(topic, key, max(1, max_num), begin, end)
    ext = {
        "indexLastUpdateTimestamp": result.index_last_update_timestamp,
        "indexLastUpdatePhyoffset": result.index_last_update_phy_offset,
    }
    if not result.entries:
        return req.make_response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext=ext)
    return req.make_response(ResponseCode.SUCCESS, ext=ext, body=result.body)


async def view_message_by_id(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    offset = req.get_long("offset")
    raw = await ctx.broker.read_at(offset)
    if raw is None:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
    return req.make_response(ResponseCode.SUCCESS, body=bytes(raw))


async def update_and_create_topic(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    topic = req.get_str("topic")
    reason = validate_topic(topic)
    if reason:
        return req.make_response(ResponseCode.SYSTEM_ERROR, reason)
    if topic == ctx.broker.config.broker_cluster_name:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"the topic[{topic}] is conflict with system reserved words.")
    try:
        filter_type = TopicFilterType(req.get_str("topicFilterType", "SINGLE_TAG"))
    except ValueError:
        filter_type = TopicFilterType.SINGLE_TAG
    cfg = TopicConfig(
        topic_name=topic,
        read_queue_nums=req.get_int("readQueueNums"),
        write_queue_nums=req.get_int("writeQueueNums"),
        perm=req.get_int("perm"),
        topic_filter_type=filter_type,
        topic_sys_flag=req.get_int("topicSysFlag", 0),
        order=req.get_bool("order", False, cpp_compatible=True),
    )
    try:
        await ctx.broker.update_topic(cfg)
    except ValueError as exc:
        return req.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
    return req.make_response(ResponseCode.SUCCESS)


async def get_topic_stats_info(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    topic = req.get_str("topic")
    b = ctx.broker
    cfg = b.get_topic(topic)
    if cfg is None:
        return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    table = {}
    for qid in range(cfg.write_queue_nums):
        lo, hi = max(0, b.min_offset(topic, qid)), max(0, b.max_offset(topic, qid))
        last = await b.store_time(topic, qid, hi - 1) if hi > 0 else 0
        key = (("brokerName", b.config.broker_name), ("queueId", qid), ("topic", topic))
        table[key] = {"lastUpdateTimestamp": max(0, last), "maxOffset": hi, "minOffset": lo}
    return req.make_response(ResponseCode.SUCCESS, body=_body({"offsetTable": table}))


async def delete_topic_in_broker(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    topic = req.get_str("topic")
    cfg = ctx.broker.config
    if cfg.broker_role is BrokerRole.SLAVE:
        return req.make_response(ResponseCode.SYSTEM_ERROR, "Can't modify topic or subscription group from slave broker, "
                                                            "please execute it from master broker.")
    reason = validate_topic(topic)
    if reason:
        return req.make_response(ResponseCode.SYSTEM_ERROR, reason)
    if is_system_topic(topic) or topic in (cfg.broker_cluster_name, cfg.broker_name):
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
    await ctx.broker.delete_topic(topic)
    return req.make_response(ResponseCode.SUCCESS)


async def get_all_topic_config(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    return req.make_response(ResponseCode.SUCCESS, body=_body(ctx.broker.topics.to_json()))


async def get_all_consumer_offset(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    return req.make_response(ResponseCode.SUCCESS, body=_body(ctx.broker.offsets.to_json()))


async def update_and_create_subscription_group(ctx: BrokerContext, channel: Channel,
                                               req: RemotingCommand) -> RemotingCommand:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200, mqadmin updateSubGroup): the body is a
    SubscriptionGroupConfig as JSON; the keys this broker knows are kept, others ignored."""
    try:
        obj = decode_json(req.body)
        cfg = SubscriptionGroupConfig.from_json(obj)
    except (ValueError, TypeError) as exc:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"bad subscription group body: {exc}".splitlines()[0])
    if not isinstance(cfg.group_name, str) or not cfg.group_name:
        return req.make_response(ResponseCode.SYSTEM_ERROR, "the subscription group body has no groupName")
    if ctx.broker.config.broker_role is BrokerRole.SLAVE:
        return req.make_response(ResponseCode.SYSTEM_ERROR, "the broker is a slave; update the group on its master")
    ctx.broker.groups.put(cfg)
    return req.make_response(ResponseCode.SUCCESS)


async def get_all_subscription_group(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    return req.make_response(ResponseCode.SUCCESS, body=_body(ctx.broker.groups.to_json()))


def delay_offset_route(schedule):
    async def get_all_delay_offset(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        offsets = dict(schedule.offsets) if schedule is not None else {}
        return req.make_response(ResponseCode.SUCCESS, body=_body({"offsetTable": offsets}))

    return get_all_delay_offset


def runtime_table(ctx: BrokerContext, earliest_message_ms: int = -1) -> dict:
    b = ctx.broker
    store = b.store
    now = int(time.time() * 1000)
    table = {
        "brokerVersionDesc": "V4_9_8",
        "brokerVersion": "405",
        "bootTimestamp": _BOOT_MS,
        "runtime": f"[ {(now - _BOOT_MS) // 86_400_000} days, {(now - _BOOT_MS) // 3_600_000 % 24} hours, "
                   f"{(now - _BOOT_MS) // 60_000 % 60} minutes, {(now - _BOOT_MS) // 1000 % 60} seconds ]",
        "commitLogMinOffset": store.min_phy_offset,
        "commitLogMaxOffset": store.max_phy_offset,
        "brokerName": b.config.broker_name,
        "brokerRole": b.config.broker_role.name if hasattr(b.config.broker_role, "name") else str(b.config.broker_role),
        "flushDiskType": b.config.flush_disk_type.name if hasattr(b.config.flush_disk_type, "name") else str(b.config.flush_disk_type),
        "topicCount": len(b.topics),
        "consumerGroupCount": len(ctx.clients.consumers),
        "producerGroupCount": len(ctx.clients.producers),
        "flushCount": b.flush_count,
        "earliestMessageTimeStamp": earliest_message_ms,
        "grpcPort": b.grpc_port,  # ours: where this broker's 5.x clients go (core.proxy.routing)
    }
    timers = b.timers
    if timers is not None:
        table["timerPending"] = timers.pending
        table["timerFired"] = timers.fired
        table["timerScheduled"] = timers.scheduled
        table["timerRolled"] = timers.rolled
        table["timerRefused"] = timers.refused
    return table


def runtime_info_route(transactions=None):
    """GET_BROKER_RUNTIME_INFO with the transaction service's counts (``transactions`` may be None)."""

    async def get_broker_runtime_info(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        table = runtime_table(ctx, await ctx.broker.earliest_message_time())
        if transactions is not None:
            s = transactions.stats()
            table.update({
                "transactionHalfPending": s["pending"],
                "transactionHalfOffset": s["halfOffset"],
                "transactionCommitted": s["committed"],
                "transactionRolledBack": s["rolledBack"],
                "transactionCheckSent": s["checksSent"],
                "transactionCheckUnreachable": s["checksUnreachable"],
                "transactionCheckDiscarded": s["discarded"],
            })
        return req.make_response(ResponseCode.SUCCESS, body=_body({"table": {k: str(v) for k, v in table.items()}}))

    return get_broker_runtime_info


get_broker_runtime_info = runtime_info_route()
