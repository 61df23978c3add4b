"""Consumer groups as an operator sees them: GET_CONSUMER_CONNECTION_LIST (203),
GET_CONSUME_STATS (208),
INVOKE_BROKER_TO_RESET_OFFSET (222), which sends RESET_CONSUMER_CLIENT_OFFSET (220)
to the group's live clients, and the two requests the broker passes on to one
client and answers with the client's answer: GET_CONSUMER_RUNNING_INFO (307)
and CONSUME_MESSAGE_DIRECTLY (309).

Reference 2.1 (``AdminBrokerProcessor``, ``Broker2Client.resetOffset``).
Rules kept here:

- GET_CONSUMER_CONNECTION_LIST answers ConsumerConnection (every channel's
  client id, address, language and version; the group's consume type,
  message model, consume-from-where and subscriptions) from the heartbeat
  table; a group with no live channel is 206 CONSUMER_NOT_ONLINE.
- GET_CONSUME_STATS answers ConsumeStats for ``consumerGroup``: the topics
  of ``topicList`` (``;``-separated, taken as they are), else ``topic``,
  else every topic the group committed on; without ``topicList``, a topic
  the group's online clients do not subscribe to is left out (when they
  subscribe to anything), as in Java. Per read queue of each known topic:
  ``brokerOffset`` (max offset), ``consumerOffset`` (committed, 0 if none),
  ``pullOffset`` (the same: pulls are not tracked apart) and
  ``lastTimestamp`` (store time of the last consumed message, when there is
  one), keyed by MessageQueue objects; ``consumeTps`` is the group's pull
  rate over the topics (``core.broker.group_gets``).
- INVOKE_BROKER_TO_RESET_OFFSET computes, for each write queue of the topic
  on this broker, the offset of ``timestamp`` (SEARCH_OFFSET_BY_TIMESTAMP's
  rule; ``-1`` means the queue's end). With ``isForce`` that offset is
  taken; without it only when it lies before the committed offset (a
  rollback, never a skip forward). A queue the group never committed on
  takes the new offset.
- The table goes to every live channel of the group as oneway 220 and back
  to the caller as ResetOffsetBody; the clients move their queues and
  commit. Nothing is written to the broker's offset table here: with no
  client online the answer is 206 CONSUMER_NOT_ONLINE, with the same body
  (Java sends none; its tools ignore it), and the admin tool commits those
  offsets itself (mqadmin's ``resetOffsetByTimeOld`` path does the same). A
  group this broker does not know (no client online, no committed offset on
  the topic, no subscription config) is SYSTEM_ERROR "The consumer group <G>
  not exist" (Java's wording).
- Body form per channel: C++ clients (language CPP, or any channel when the
  request itself came from a CPP client, as Java decides) get
  ``ResetOffsetBodyForC`` (a list of queues with ``offset``); everyone else
  gets ``ResetOffsetBody`` (MessageQueue objects as map keys). A channel
  older than V3_0_7_SNAPSHOT cannot take 220: SYSTEM_ERROR, as in Java.
- 307 and 309 (``AdminBrokerProcessor.callConsumer``): the channel of
  (consumerGroup, clientId) gets the same header and body as a new request,
  and its response goes back as it is. No such channel: SYSTEM_ERROR "The
  Consumer <G> <C> not online"; a client older than V3_1_8_SNAPSHOT:
  SYSTEM_ERROR; no answer within 10 s: CONSUME_MSG_TIMEOUT (207); a channel
  that closes first: SYSTEM_ERROR. For 309 the broker adds its
  ``brokerName`` to the header and puts the stored message that ``msgId``
  (an offset message id) names in the body; an id that names no message here
  is SYSTEM_ERROR (Java sends an empty body and lets the client fail).
  Both run in a task of their own, so the asking connection keeps reading.
"""

from __future__ import annotations

import logging

from core.processors.context import BrokerContext
import trio

from core.remoting import LanguageCode, RemotingCommand, RequestCode, ResponseCode, encode_json
from core.remoting.server import Channel, ChannelClosedError
from core.store import parse_offset_msg_id

log = logging.getLogger("mqgate.processors.group_admin")

V3_0_7_SNAPSHOT = 28  # MQVersion ordinal: the first client version that handles 220
V3_1_8_SNAPSHOT = 62  # ... that handles 307 and 309
CALL_CLIENT_TIMEOUT = 10.0  # seconds, Broker2Client.callClient's


def _body(obj) -> bytes:
    return encode_json(obj, standard=False).encode()


def _mq_key(topic: str, broker_name: str, queue_id: int) -> tuple:
    return (("brokerName", broker_name), ("queueId", queue_id), ("topic", topic))


async def get_consumer_connection_list(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    group = req.get_str("consumerGroup")
    g = ctx.clients.consumers.get(group)
    if g is None or not g.channels:
        return req.make_response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
    connections = [
        {"clientAddr": c.channel.remote if isinstance(c.channel, Channel) else str(c.channel),
         "clientId": c.client_id, "language": c.language, "version": c.version}
        for c in g.channels.values()
    ]
    subscriptions = {
        s.topic: {"classFilterMode": False, "codeSet": list(s.codes), "expressionType": s.expression_type,
                  "subString": s.sub_string, "subVersion": s.sub_version, "tagsSet": list(s.tags), "topic": s.topic}
        for s in g.subscriptions.values()
    }
    body = {"connectionSet": sorted(connections, key=lambda c: c["clientId"]), "consumeFromWhere": g.consume_from_where,
            "consumeType": g.consume_type, "messageModel": g.message_model, "subscriptionTable": subscriptions}
    return req.make_response(ResponseCode.SUCCESS, body=_body(body))


async def get_consume_stats(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    group = req.get_str("consumerGroup")
    listed = [t for t in req.get_str("topicList", "").split(";") if t]
    b = ctx.broker
    if listed:
        topics = set(listed)
    else:
        given = req.get_str("topic", "")
        topics = {given} if given else b.offsets.topics_of(group)
        g = ctx.clients.consumers.get(group)
        if g is not None and g.subscriptions:
            topics = {t for t in topics if t in g.subscriptions}
    table = {}
    tps = 0.0
    for topic in sorted(topics):
        cfg = b.get_topic(topic)
        if cfg is None:
            continue
        for qid in range(cfg.read_queue_nums):
            consumer = max(0, b.query_offset(group, topic, qid) or 0)
            wrapper = {"brokerOffset": max(0, b.max_offset(topic, qid)), "consumerOffset": consumer,
                       "lastTimestamp": 0, "pullOffset": consumer}
            if consumer > 0:
                last = await b.store_time(topic, qid, consumer - 1)
                if last > 0:
                    wrapper["lastTimestamp"] = last
            table[(("brokerName", b.config.broker_name), ("queueId", qid), ("topic", topic))] = wrapper
        tps += b.group_gets.tps(group, topic)
    return req.make_response(ResponseCode.SUCCESS, body=_body({"consumeTps": tps, "offsetTable": table}))


async def reset_offset_table(ctx: BrokerContext, topic: str, group: str, timestamp: int, force: bool) -> dict[int, int]:
    """queue id -> the offset ``group`` restarts from (see the module rules)."""
    b = ctx.broker
    cfg = b.get_topic(topic)
    table = {}
    for qid in range(cfg.write_queue_nums if cfg else 0):
        target = b.max_offset(topic, qid) if timestamp == -1 else await b.offset_by_time(topic, qid, timestamp)
        target = max(0, target)
        committed = b.query_offset(group, topic, qid)
        table[qid] = target if committed is None or force or target < committed else committed
    return table


async def invoke_broker_to_reset_offset(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    topic, group = req.get_str("topic"), req.get_str("group")
    timestamp = req.get_long("timestamp")
    force = req.get_bool("isForce", False, cpp_compatible=True)
    if ctx.broker.get_topic(topic) is None:
        return req.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                 f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
    g = ctx.clients.consumers.get(group)
    online = list(g.channels.values()) if g is not None else []
    if not online and group not in ctx.broker.offsets.groups_of(topic) and ctx.broker.groups.get(group) is None:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"The consumer group <{group}> not exist")
    table = await reset_offset_table(ctx, topic, group, timestamp, force)
    broker_name = ctx.broker.config.broker_name
    java_body = _body({"offsetTable": {_mq_key(topic, broker_name, q): o for q, o in table.items()}})
    if not online:
        return req.make_response(
            ResponseCode.CONSUMER_NOT_ONLINE,
            f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} Timestamp: {timestamp}",
            body=java_body)
    old = [c for c in online if c.version < V3_0_7_SNAPSHOT]
    if old:
        return req.make_response(ResponseCode.SYSTEM_ERROR,
                                 f"the client does not support this feature. version={old[0].version}")
    cpp_body = _body({"offsetTable": [{"brokerName": broker_name, "offset": o, "queueId": q, "topic": topic}
                                      for q, o in table.items()]})
    header = {"topic": topic, "group": group, "timestamp": timestamp, "isForce": force}
    all_cpp = req.language == LanguageCode.CPP
    for c in online:
        if not isinstance(c.channel, Channel) or c.channel.closed:
            continue
        body = cpp_body if all_cpp or c.language == LanguageCode.CPP.name else java_body
        c.channel.send_oneway(RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, header, body))
        log.info("[reset-offset] %s of %s to %s sent to %s", topic, group, table, c.client_id)
    return req.make_response(ResponseCode.SUCCESS, body=java_body)


async def _call_consumer(ctx: BrokerContext, req: RemotingCommand, code: RequestCode,
                         body: bytes | None) -> RemotingCommand:
    group, client_id = req.get_str("consumerGroup", ""), req.get_str("clientId", "")
    g = ctx.clients.consumers.get(group)
    found = next((c for c in (g.channels.values() if g is not None else ()) if c.client_id == client_id), None)
    if found is None or not isinstance(found.channel, Channel) or found.channel.closed:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
    if found.version < V3_1_8_SNAPSHOT:
        return req.make_response(ResponseCode.SYSTEM_ERROR,
                                 f"The Consumer <{client_id}> Version <{found.version}> too low to finish, "
                                 "please upgrade it to V3_1_8_SNAPSHOT")
    call = RemotingCommand.request(code, dict(req.ext_fields), body or b"")
    try:
        answer = await found.channel.request(call, CALL_CLIENT_TIMEOUT)
    except trio.TooSlowError:
        return req.make_response(ResponseCode.CONSUME_MSG_TIMEOUT,
                                 f"consumer <{group}> <{client_id}> Timeout: no answer in {CALL_CLIENT_TIMEOUT:.0f} s")
    except ChannelClosedError as e:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {e}")
    return req.make_response(answer.code, answer.remark, dict(answer.ext_fields), body=answer.body or b"")


async def get_consumer_running_info(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    return await _call_consumer(ctx, req, RequestCode.GET_CONSUMER_RUNNING_INFO, req.body)


async def consume_message_directly(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    msg_id = req.get_str("msgId", "")
    try:
        _host, offset = parse_offset_msg_id(msg_id)
    except ValueError:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"not an offset message id: {msg_id!r}")
    raw = await ctx.broker.read_at(offset)
    if raw is None:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"no message {msg_id} on this broker (offset {offset})")
    req.ext_fields["brokerName"] = ctx.broker.config.broker_name
    return await _call_consumer(ctx, req, RequestCode.CONSUME_MESSAGE_DIRECTLY, bytes(raw))
