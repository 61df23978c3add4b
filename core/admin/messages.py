"""``mqgate admin message key|id`` and ``dlq resend`` (mqadmin queryMsgByKey,
queryMsgById, queryMsgByUniqueKey).

Rules kept here:

- A message id is 32 hexadecimal characters (56 for an IPv6 host); anything
  else is refused before any request. Two kinds share that form: an
  *offset* message id (the storing broker's ip:port and the commit-log
  offset) and a *UNIQ_KEY* (made by the client: its ip, pid, a random
  number, time and counter; the C++ client even writes its ip backwards).
  The bytes alone cannot tell them apart, so an id is taken as an offset id
  only when its address is a broker the name servers know
  (VIEW_MESSAGE_BY_ID there); otherwise it is a UNIQ_KEY, looked up with
  QUERY_MESSAGE ``_UNIQUE_KEY_QUERY`` in ``--topic``, or, without it, in
  every topic of every master broker (GET_ALL_TOPIC_CONFIG). Nothing found
  is an error that says which lookups were made.
- ``dlq resend`` reads ``%DLQ%<group>`` from where the previous resend
  stopped (its progress is the consumer group ``DLQ_RESEND_<group>``) and
  sends each message to its original topic (``RETRY_TOPIC``, else
  ``REAL_TOPIC``) with its body, tags, keys, user properties and UNIQ_KEY;
  the progress is committed only past messages that were re-sent.
"""

from __future__ import annotations

import re
from typing import TextIO

from core.admin.base import UNREACHABLE, Admin, AdminError, AdminUsageError
from core.admin.render import table
from core.client.api import MQBrokerError
from core.client.model import Message, MessageExt
from core.client.producer import open_producer
from core.store.message import decode_messages, parse_offset_msg_id, unpack_host

DLQ_PREFIX = "%DLQ%"
INTERNAL_PROPERTIES = {
    "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "DELAY", "ORIGIN_MESSAGE_ID", "MIN_OFFSET", "MAX_OFFSET",
    "CLUSTER", "WAIT", "MAX_RECONSUME_TIMES", "RECONSUME_TIME", "CONSUME_START_TIME",
}
_HEX = re.compile(r"[0-9A-Fa-f]+")


def add_parsers(sub) -> None:
    message = sub.add_parser("message", help="find messages by key or id").add_subparsers(dest="action", required=True)
    k = message.add_parser("key", help="messages by KEYS (mqadmin queryMsgByKey)")
    k.add_argument("topic")
    k.add_argument("key")
    k.add_argument("--max", type=int, default=32)
    i = message.add_parser("id", help="a message by offset msg id or UNIQ_KEY (mqadmin queryMsgById, queryMsgByUniqueKey)")
    i.add_argument("msg_id")
    i.add_argument("--topic", help="look the id up as a UNIQ_KEY in this topic only")
    i.add_argument("--group", help="with --client: hand the message to that consumer's listener once "
                                   "(mqadmin queryMsgById -g -d); no offset moves")
    i.add_argument("--client", help="the client id (mqgate admin group connections GROUP lists them)")
    dlq = sub.add_parser("dlq", help="dead-letter queues").add_subparsers(dest="action", required=True)
    d = dlq.add_parser("resend", help="re-send %%DLQ%%<group> to the original topics")
    d.add_argument("group")
    d.add_argument("--max", type=int, default=None, help="at most this many messages")


def message_row(m: MessageExt) -> dict:
    return {
        "topic": m.queue.topic, "brokerName": m.broker_name, "queueId": m.queue.queue_id, "queueOffset": m.queue_offset,
        "msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "tags": m.tags, "keys": " ".join(m.keys),
        "storeTimestamp": m.store_timestamp, "reconsumeTimes": m.reconsume_times, "bodySize": len(m.body),
        "body": m.body.decode("utf-8", "replace")[:200], "properties": m.properties,
    }


async def message_key(admin: Admin, a) -> dict:
    route = await admin.route(a.topic)
    found = []
    for name, addr in sorted(route.broker_addrs().items()):
        body = await admin.api.query_message(addr, a.topic, a.key, a.max)
        found.extend(MessageExt.from_stored(m, name) for m in decode_messages(body))
    found = [m for m in found if a.key in m.keys or m.msg_id == a.key]
    return {"messages": [message_row(m) for m in found[: a.max]]}


def check_msg_id(msg_id: str) -> str:
    if not _HEX.fullmatch(msg_id) or len(msg_id) not in (32, 56):
        raise AdminUsageError(f"{msg_id!r} is not a message id: an id is 32 hexadecimal characters (56 for an IPv6 "
                              f"host), an offset message id or a UNIQ_KEY")
    return msg_id.upper()


async def message_id(admin: Admin, a) -> dict:
    group, client = getattr(a, "group", None), getattr(a, "client", None)
    if bool(group) != bool(client):
        raise AdminUsageError("--group and --client go together: the consumer that gets the message")
    found = await _find_by_id(admin, a)
    if group:
        row = found["messages"][0]
        ip, port = unpack_host(parse_offset_msg_id(row["offsetMsgId"])[0])
        result = await admin.api.consume_message_directly(f"{ip}:{port}", group, client, row["offsetMsgId"],
                                                          row["topic"])
        found["consumed"] = {"group": group, "clientId": client, **result}
    return found


async def _find_by_id(admin: Admin, a) -> dict:
    msg_id = check_msg_id(a.msg_id)
    host, offset = parse_offset_msg_id(msg_id)
    ip, port = unpack_host(host)
    addr = f"{ip}:{port}"
    names = {ad: name for name, addrs in (await admin.brokers()).items() for ad in addrs.values()}
    if addr in names and offset >= 0:
        try:
            msgs = decode_messages(await admin.api.view_message(addr, offset))
        except MQBrokerError:
            msgs = []
        if msgs:
            return {"kind": "offsetMsgId", "messages": [message_row(MessageExt.from_stored(msgs[0], names[addr]))]}
        if not a.topic:
            raise AdminError(f"{msg_id} is an offset message id of {names[addr]} ({addr}), "
                             f"but nothing is stored at commit-log offset {offset} (deleted by retention?)")
    if a.topic:
        route = await admin.route(a.topic)
        places = [(name, ad, a.topic) for name, ad in sorted(route.broker_addrs().items())]
    else:
        places = []
        for name, ad in sorted((await admin.masters()).items()):
            topics = (await admin.api.all_topic_config(ad)).get("topicConfigTable") or {}
            places.extend((name, ad, t) for t in sorted(topics))
    found = []
    for name, ad, topic in places:
        try:
            body = await admin.api.query_message(ad, topic, msg_id, 32, unique_key=True)
        except (*UNREACHABLE, MQBrokerError):
            continue
        found.extend(MessageExt.from_stored(m, name) for m in decode_messages(body)
                     if m.properties.get("UNIQ_KEY") == msg_id)
    if not found:
        where = f"topic {a.topic}" if a.topic else f"any of the {len(places)} topics of the master brokers"
        raise AdminError(f"no message with id {msg_id}: it is not an offset message id of a broker the name servers "
                         f"know (as one it would name {addr}), and no message in {where} has it as UNIQ_KEY")
    return {"kind": "uniqKey", "messages": [message_row(m) for m in found]}


async def dlq_resend(admin: Admin, a) -> dict:
    dlq = DLQ_PREFIX + a.group
    tool_group = "DLQ_RESEND_" + a.group
    route = await admin.route(dlq)
    addrs = route.broker_addrs()
    api = admin.api
    resent, skipped = [], []
    limit = a.max if a.max is not None else float("inf")
    async with open_producer(";".join(admin.namesrvs), "DLQ_RESEND_PRODUCER", send_timeout=api.timeout) as producer:
        for mq in route.subscribe_queues():
            addr = addrs.get(mq.broker_name)
            if addr is None or len(resent) >= limit:
                continue
            start = await api.query_consumer_offset(addr, tool_group, mq)
            offset = max(start or 0, await api.min_offset(addr, mq))
            end = await api.max_offset(addr, mq)
            done_to = offset
            while offset < end and len(resent) < limit:
                resp = await api.pull(addr, tool_group, mq, offset, 32, subscription="*", sub_version=0,
                                      commit_offset=None, suspend_ms=0, timeout=api.timeout)
                if resp.code != 0:
                    break
                for stored in decode_messages(resp.body):
                    if len(resent) >= limit:
                        break
                    m = MessageExt.from_stored(stored, mq.broker_name)
                    original = m.properties.get("RETRY_TOPIC") or m.properties.get("REAL_TOPIC")
                    if original:
                        props = {k: v for k, v in m.properties.items() if k not in INTERNAL_PROPERTIES}
                        r = await producer.send(Message(original, m.body, flag=m.flag, properties=props))
                        resent.append({"dlqOffset": m.queue_offset, "msgId": m.msg_id, "topic": original,
                                       "queueId": r.queue.queue_id, "queueOffset": r.queue_offset})
                    else:
                        skipped.append({"dlqOffset": m.queue_offset, "msgId": m.msg_id,
                                        "reason": "no RETRY_TOPIC or REAL_TOPIC"})
                    done_to = m.queue_offset + 1
                offset = resp.next_begin_offset
            if done_to > (start or 0):
                await api.update_consumer_offset(addr, tool_group, mq, done_to)
    return {"group": a.group, "dlq": dlq, "resent": resent, "skipped": skipped}


def render(action: str, result: dict, out: TextIO) -> None:
    if action in ("key", "id"):
        table(result["messages"], ["topic", "queueId", "queueOffset", "msgId", "offsetMsgId", "tags", "keys", "body"], out)
        c = result.get("consumed")
        if c is not None:
            print(f"consumed directly by {c['clientId']} of {c['group']}: {c['consumeResult']} in "
                  f"{c['spentTimeMills']} ms{' (orderly)' if c.get('order') else ''}", file=out)
            if c.get("remark"):
                print(c["remark"].rstrip(), file=out)
    elif action == "resend":
        table(result["resent"], ["dlqOffset", "msgId", "topic", "queueId", "queueOffset"], out)
        for s in result["skipped"]:
            print(f"skipped {s['msgId']} at {s['dlqOffset']}: {s['reason']}", file=out)
        print(f"re-sent {len(result['resent'])} message(s) from {result['dlq']}", file=out)
