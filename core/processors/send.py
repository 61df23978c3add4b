"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), CONSUMER_SEND_MSG_BACK (36).

Reference 2.1, 2.2, 4.7, 10 (``SendMessageProcessor``). Rules kept here:

- The three send codes reach one path; V2's one-letter keys are mapped to
  the long names first. Whether the body is a batch depends only on the
  ``batch``/``m`` flag, not on the code (as in Java).
- **The batch flag is read C++-compatibly: ``"1"`` means true** (as well as
  ``"true"``). C++ 1.2.x sends ``batch="1"``; a Java broker reads that as
  false and stores the whole batch as one message with the batch encoding
  as its body (rocketmq-client-cpp #363, #447). A C++ user who sends a
  batch of N expects N messages, so we store N. Java, Go and ali-ons send
  ``"true"``/``"false"`` or no flag, so nothing changes for them.
- Batch items get the header's properties appended for keys they do not
  set themselves (4.9.3+ behaviour), so a batch-level ``WAIT`` applies.
- The born host is the TCP peer (IPv4 when it is one); the broker stamps
  the store host, ``CLUSTER`` and a missing ``UNIQ_KEY``.
- Sends to ``%RETRY%<group>`` whose reconsume times reached the group's
  maximum go to ``%DLQ%<group>`` instead (``handleRetryAndDLQ``); the
  header's ``maxReconsumeTimes`` counts only for clients of version >= 117
  (V3_4_9), so C++ 1.2.x (59) gets the group's ``retryMaxTimes`` (16).
- Send-back: the failed message is read by commit-log offset and stored
  again in ``%RETRY%<group>`` with delay level ``3 + reconsumeTimes`` (or
  the header's level when > 0), reconsume times + 1, ``RETRY_TOPIC`` and
  ``ORIGIN_MESSAGE_ID`` set; past the maximum (or delay level < 0) it goes
  to ``%DLQ%<group>`` with no delay. The delay itself is the schedule
  service's put hook (`core.delay_levels`).
- **Fast failure** (RocketMQ's ``BrokerFastFailure``, with
  ``brokerFastFailureEnable``): a send, batch or send-back that waited in
  the broker ``waitTimeMillsInSendQueue`` ms or more since its frame was
  read (behind earlier requests of the same read whose stores were slow to
  become durable) is answered SYSTEM_BUSY ``[TIMEOUT_CLEAN_QUEUE]...``,
  and any send while a commit-log flush has run longer than
  ``osPageCacheBusyTimeOutMills`` is answered SYSTEM_BUSY
  ``[PC_SYNCHRONIZED]...``: nothing of it is stored, and clients retry
  (Java's producer retries SYSTEM_BUSY on another queue). A flood that has
  not been read yet waits in the sockets: the server reads a connection
  again only when that read's requests are answered.
- Response codes and remarks come from the broker's `SendResult`; the
  response carries ``msgId`` (offset id, comma-joined for a batch),
  ``queueId``, ``queueOffset`` and ``MSG_REGION``/``TRACE_ON`` (``regionId``,
  ``traceOn``), which every native send also gets in its stored properties
  (RocketMQ's broker does the same; Java's tracing consumers need them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import trio

from core.broker import RETRY_GROUP_TOPIC_PREFIX, SendResult, dlq_topic, retry_topic
from core.processors.context import BrokerContext, born_host
from core.remoting import HeaderFieldError, RemotingCommand, ResponseCode
from core.remoting.server import Channel
from core.store.batch import decode_batch
from core.store.message import (
    PROPERTY_DELAY,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    Message,
    MessageFormatError,
    decode_message,
    decode_properties,
)

PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_ON = "TRACE_ON"

V2_NAMES = {
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
    "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
    "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName",
}
MAX_RECONSUME_VERSION = 117  # V3_4_9
PERM_RW = 6


def _long_names(req: RemotingCommand) -> RemotingCommand:
    if req.code == 10:
        return req
    view = RemotingCommand(code=req.code, version=req.version, ext_fields={V2_NAMES.get(k, k): v for k, v in req.ext_fields.items()})
    return view


def _num(h: RemotingCommand, name: str, *default: object, long: bool = False) -> int:
    """``get_int``/``get_long`` with a fast path for plain non-negative decimals (eight per send)."""
    v = h.ext_fields.get(name)
    if v is not None and v.isdigit() and len(v) < (19 if long else 10):
        return int(v)
    return h.get_long(name, *default) if long else h.get_int(name, *default)


def _stamp(ctx: BrokerContext, s: "_Send") -> "_Send":
    """MSG_REGION and TRACE_ON in the stored properties, as RocketMQ's broker writes them
    (``AbstractSendMessageProcessor.buildMsgContext``): a tracing consumer reads its
    region from there, and the Java client drops consumer trace records without one."""
    cfg = ctx.broker.config
    s.props[PROPERTY_MSG_REGION] = cfg.region_id
    s.props[PROPERTY_TRACE_ON] = "true" if cfg.trace_on else "false"
    return s


def _response(req: RemotingCommand, result: SendResult, cfg) -> RemotingCommand | None:
    """The answer to one send; ``cfg`` (the broker's config) gives MSG_REGION and TRACE_ON."""
    if req.is_oneway:
        return None  # nobody reads it: do not build it
    if not result.ok:
        return req.make_response(result.status.code, result.remark or result.status.name)
    return req.make_response(
        result.status.code,
        ext={
            "msgId": result.msg_id,
            "queueId": result.queue_id,
            "queueOffset": result.queue_offset,
            PROPERTY_MSG_REGION: cfg.region_id,
            PROPERTY_TRACE_ON: "true" if cfg.trace_on else "false",
        },
    )


def _max_reconsume(ctx: BrokerContext, group: str, header_value: int | None, version: int, props: dict) -> int:
    cfg = ctx.broker.get_group(group)
    limit = cfg.retry_max_times if cfg is not None else 16
    if version >= MAX_RECONSUME_VERSION and header_value is not None:
        limit = header_value
    if PROPERTY_MAX_RECONSUME_TIMES in props:
        try:
            limit = int(props[PROPERTY_MAX_RECONSUME_TIMES])
        except ValueError:
            pass
    return limit


@dataclass(slots=True)
class _Send:
    """One parsed send request."""

    topic: str
    default_topic: str
    default_nums: int
    qid: int | None
    sys_flag: int
    born_ts: int
    flag: int
    props: dict[str, str]
    reconsume: int
    batch: bool
    max_reconsume: int | None
    host: bytes


def _parse(channel: Channel, req: RemotingCommand) -> _Send:
    h = _long_names(req)
    topic = h.get_str("topic")
    h.get_str("producerGroup")
    queue_id = _num(h, "queueId")
    return _Send(
        topic=topic,
        default_topic=h.get_str("defaultTopic"),
        default_nums=_num(h, "defaultTopicQueueNums"),
        qid=queue_id if queue_id >= 0 else None,
        sys_flag=_num(h, "sysFlag"),
        born_ts=_num(h, "bornTimestamp", long=True),
        flag=_num(h, "flag"),
        props=decode_properties(h.get_str("properties", "")),
        reconsume=_num(h, "reconsumeTimes", 0),
        batch=h.get_bool("batch", False, cpp_compatible=True),
        max_reconsume=h.get_int("maxReconsumeTimes", None),
        host=born_host(channel),
    )


def _message(s: _Send, body: bytes) -> Message:
    return Message(topic=s.topic, body=body, flag=s.flag, properties=s.props, sysflag=s.sys_flag,
                   born_timestamp=s.born_ts, born_host=s.host, reconsume_times=s.reconsume)


PC_BUSY = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"


def _fast_failure(ctx: BrokerContext, channel: Channel, req: RemotingCommand, queued: int) -> RemotingCommand | None:
    """SYSTEM_BUSY for a send that waited too long here or came while the disk is busy; None to go on."""
    broker = ctx.broker
    cfg = broker.config
    if not cfg.broker_fast_failure_enable:
        return None
    behind = (trio.current_time() - channel.read_at) * 1000.0
    if behind >= cfg.wait_time_mills_in_send_queue:
        return req.make_response(ResponseCode.SYSTEM_BUSY, "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, "
                                 f"period in queue: {int(behind)}ms, size of queue: {queued}")
    if broker.page_cache_busy_ms() > cfg.os_page_cache_busy_time_out_mills:
        return req.make_response(ResponseCode.SYSTEM_BUSY, PC_BUSY)
    return None


async def send_message(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand | None:
    busy = _fast_failure(ctx, channel, req, 0)
    if busy is not None:
        return busy
    return await _execute(ctx, req, _stamp(ctx, _parse(channel, req)))


async def send_messages(ctx: BrokerContext, channel: Channel, reqs: list[RemotingCommand]) -> list[RemotingCommand | None]:
    """A run of sends from one read: plain sends to existing topics go to the broker
    together (`Broker.send_many`: one checkpoint, one durability wait); any other
    request is served alone, in its place, so the order of appends is the order
    of the requests."""
    out: list[RemotingCommand | None] = [None] * len(reqs)
    pending: list[tuple[int, Message, int | None]] = []
    broker = ctx.broker

    async def flush() -> None:
        if pending:
            results = await broker.send_many([(m, q) for _i, m, q in pending])
            for (i, _m, _q), result in zip(pending, results):
                out[i] = _response(reqs[i], result, broker.config)
            pending.clear()

    last = len(reqs) - 1
    for i, req in enumerate(reqs):
        busy = _fast_failure(ctx, channel, req, last - i)
        if busy is not None:
            out[i] = busy
            continue
        try:
            s = _stamp(ctx, _parse(channel, req))
        except HeaderFieldError as exc:
            await flush()
            out[i] = req.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
            continue
        if not s.batch and not s.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and broker.get_topic(s.topic) is not None:
            pending.append((i, _message(s, req.body), s.qid))
        else:
            await flush()
            out[i] = await _execute(ctx, req, s)
    await flush()
    return out


async def _execute(ctx: BrokerContext, req: RemotingCommand, s: _Send) -> RemotingCommand | None:
    broker = ctx.broker
    if s.batch:
        try:
            items = decode_batch(req.body)
        except MessageFormatError as exc:
            return req.make_response(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {exc}")
        if not items:
            return req.make_response(ResponseCode.MESSAGE_ILLEGAL, "empty batch")
        msgs = []
        for body, item_flag, item_props in items:
            merged = dict(item_props)
            for k, v in s.props.items():
                merged.setdefault(k, v)
            msgs.append(Message(topic=s.topic, body=body, flag=item_flag, properties=merged, sysflag=s.sys_flag,
                                born_timestamp=s.born_ts, born_host=s.host, reconsume_times=s.reconsume))
        result = await broker.send_batch(msgs, s.qid, default_topic=s.default_topic, default_topic_queue_nums=s.default_nums)
        return _response(req, result, broker.config)

    if s.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        group = s.topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        if s.reconsume >= _max_reconsume(ctx, group, s.max_reconsume, req.version, s.props):
            s.topic = dlq_topic(group)
            await broker.ensure_topic(s.topic, 1, PERM_RW)
            s.qid = 0
            s.props.pop(PROPERTY_DELAY, None)
    result = await broker.send(_message(s, req.body), s.qid, default_topic=s.default_topic,
                               default_topic_queue_nums=s.default_nums)
    return _response(req, result, broker.config)


async def consumer_send_msg_back(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    busy = _fast_failure(ctx, channel, req, 0)
    if busy is not None:
        return busy
    offset = req.get_long("offset")
    group = req.get_str("group")
    delay_level = req.get_int("delayLevel")
    origin_msg_id = req.get_str("originMsgId", None)
    header_max = req.get_int("maxReconsumeTimes", None)
    broker = ctx.broker
    cfg = broker.get_group(group)
    if cfg is None:
        return req.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
    if not broker.config.broker_permission & 2:
        return req.make_response(ResponseCode.NO_PERMISSION, f"the broker[{broker.config.broker_name}] sending message is forbidden")
    if cfg.retry_queue_nums <= 0:
        return req.make_response(ResponseCode.SUCCESS)
    raw = await broker.read_at(offset)
    if raw is None:
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
    stored = decode_message(raw)
    props = dict(stored.properties)
    props.setdefault(PROPERTY_RETRY_TOPIC, stored.topic)
    limit = cfg.retry_max_times
    if req.version >= MAX_RECONSUME_VERSION and header_max is not None:
        limit = header_max
    if stored.reconsume_times >= limit or delay_level < 0:
        topic = dlq_topic(group)
        await broker.ensure_topic(topic, 1, PERM_RW)
        qid = 0
        props.pop(PROPERTY_DELAY, None)
    else:
        topic = retry_topic(group)
        await broker.ensure_topic(topic, cfg.retry_queue_nums, PERM_RW)
        qid = random.randrange(cfg.retry_queue_nums)
        props[PROPERTY_DELAY] = str(delay_level if delay_level > 0 else 3 + stored.reconsume_times)
    if not props.get(PROPERTY_ORIGIN_MESSAGE_ID):
        props[PROPERTY_ORIGIN_MESSAGE_ID] = origin_msg_id or stored.msg_id
    props["WAIT"] = "false"
    msg = Message(topic=topic, body=stored.body, flag=stored.flag, properties=props, sysflag=stored.sysflag,
                  born_timestamp=stored.born_timestamp, born_host=stored.born_host,
                  reconsume_times=stored.reconsume_times + 1)
    result = await broker.send(msg, qid, internal=True)
    if result.ok:
        return req.make_response(ResponseCode.SUCCESS)
    return req.make_response(result.status.code, result.remark or result.status.name)
