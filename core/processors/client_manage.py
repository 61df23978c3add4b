"""HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42), CHECK_CLIENT_CONFIG (46).

Reference 2.1, 2.6, 3.2, 3.3 (``ClientManageProcessor``,
``ConsumerManageProcessor``, ``AdminBrokerProcessor.lockBatchMQ``).
Rules kept here:

- A heartbeat registers its producer and consumer groups for the sending
  connection; for every consumer group the broker has (or auto-creates) a
  subscription group for, ``%RETRY%<group>`` exists afterwards (retry queue
  count of the group, perm 6), so its route is registered with the name
  servers before the client asks for it.
- A heartbeat that adds a member or changes a group's subscriptions, an
  UNREGISTER_CLIENT, a closed connection or an expired channel sends
  NOTIFY_CONSUMER_IDS_CHANGED to the group's remaining members.
- C++ writes the heartbeat enums as integers and Java as names; both are
  read (`core.processors.clients.parse_heartbeat`). A body that cannot be
  read is answered SYSTEM_ERROR; it does not close the connection.
- CHECK_CLIENT_CONFIG (what a Java consumer sends before it starts with a
  non-TAG subscription), as 4.x: TAG or no subscription is SUCCESS; with
  ``enablePropertyFilter`` off, SYSTEM_ERROR "The broker does not support
  consumer to filter message by SQL92"; an expression that does not
  compile, SUBSCRIPTION_PARSE_FAILED with the reason and its column.
  A heartbeat never refuses a subscription (4.x neither): a bad one fails
  at pull time.
"""

from __future__ import annotations

from core.broker import EXPRESSION_TAG, SubscriptionParseError, parse_subscription, property_filter_refusal, retry_topic
from core.processors.clients import HeartbeatError, parse_heartbeat
from core.processors.context import BrokerContext, now_ms
from core.processors.locks import MessageQueue
from core.remoting import RemotingCommand, ResponseCode, decode_json, encode_json
from core.remoting.server import Channel

PERM_RW = 6


def _body(obj) -> bytes:
    return encode_json(obj, standard=False).encode()


async def heart_beat(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    try:
        hb = parse_heartbeat(decode_json(req.body))
    except (ValueError, HeartbeatError) as exc:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"bad heartbeat body: {exc}")
    for cd in hb.consumers:
        cfg = ctx.broker.get_group(cd.group)
        if cfg is not None and cfg.retry_queue_nums > 0:
            await ctx.broker.ensure_topic(retry_topic(cd.group), cfg.retry_queue_nums, PERM_RW)
    changed = ctx.clients.heartbeat(
        hb, channel, language=req.language.name if hasattr(req.language, "name") else str(req.language),
        version=req.version, now_ms=now_ms(),
    )
    ctx.notify_consumer_ids_changed(changed)
    return req.make_response(ResponseCode.SUCCESS)


async def unregister_client(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    req.get_str("clientID")
    changed = ctx.clients.unregister(
        channel, producer_group=req.get_str("producerGroup", "") or None,
        consumer_group=req.get_str("consumerGroup", "") or None,
    )
    ctx.notify_consumer_ids_changed(changed)
    return req.make_response(ResponseCode.SUCCESS)


async def get_consumer_list(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    group = req.get_str("consumerGroup")
    ids = ctx.clients.consumer_ids(group)
    if not ids:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
    return req.make_response(ResponseCode.SUCCESS, body=_body({"consumerIdList": ids}))


def _lock_body(req: RemotingCommand) -> tuple[str, str, list[MessageQueue]]:
    doc = decode_json(req.body)
    if not isinstance(doc, dict):
        raise ValueError("lock body is not a JSON object")
    mqs = [MessageQueue.from_json(d) for d in doc.get("mqSet") or ()]
    return str(doc.get("consumerGroup") or ""), str(doc.get("clientId") or ""), mqs


async def lock_batch_mq(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    try:
        group, client_id, mqs = _lock_body(req)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"bad lock body: {exc}")
    held = ctx.locks.try_lock(group, mqs, client_id, now_ms())
    return req.make_response(ResponseCode.SUCCESS, body=_body({"lockOKMQSet": [mq.to_json() for mq in sorted(held)]}))


async def unlock_batch_mq(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    try:
        group, client_id, mqs = _lock_body(req)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"bad unlock body: {exc}")
    ctx.locks.unlock(group, mqs, client_id)
    return req.make_response(ResponseCode.SUCCESS)


async def check_client_config(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    try:
        doc = decode_json(req.body) if req.body else None
    except ValueError as exc:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"bad client config body: {exc}")
    sub = doc.get("subscriptionData") if isinstance(doc, dict) else None
    if not isinstance(sub, dict):
        return req.make_response(ResponseCode.SUCCESS)
    expression_type = str(sub.get("expressionType") or EXPRESSION_TAG)
    if expression_type == EXPRESSION_TAG:
        return req.make_response(ResponseCode.SUCCESS)
    if not ctx.broker.config.enable_property_filter:
        return req.make_response(ResponseCode.SYSTEM_ERROR, property_filter_refusal(expression_type))
    try:
        parse_subscription(str(sub.get("topic") or ""), sub.get("subString"), expression_type)
    except SubscriptionParseError as exc:
        return req.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
    return req.make_response(ResponseCode.SUCCESS)
