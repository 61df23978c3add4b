"""``mqgate admin trace <msgId | --key KEY --topic T>``: a message's whole path, from its trace records.

Rules kept here:

- The trace records are found as RocketMQ's tooling finds them: a
  QUERY_MESSAGE by key on the trace topic (``--trace-topic``, default
  ``RMQ_SYS_TRACE_TOPIC``) at every broker of its route; trace messages are
  keyed by each traced message id and key. Records of other messages in the
  same trace message are left out.
- ``--key KEY --topic T`` first finds the messages of ``T`` with that key
  (as ``message key`` does), then traces each; a message id is traced as
  given (a UNIQ_KEY, the id producers and consumers see).
- The path is told from the records, in time order: produced (Pub, with
  the stored location: store host and offset message id), consumed (each
  SubBefore with its SubAfter: group, client, retry count, outcome, cost),
  delivered over MQTT (the gateway's records: subscriber, QoS, acked,
  dropped or expired). Two facts no trace record holds are asked of the
  brokers: where the message is stored now (a UNIQ_KEY query in its
  topic) and whether it was dead-lettered (a UNIQ_KEY query in
  ``%DLQ%<group>`` of every consumer group seen).
- No trace record for the id is an error that says where it looked.
"""

from __future__ import annotations

from typing import TextIO

from core.admin.base import UNREACHABLE, Admin, AdminError, AdminUsageError
from core.admin.render import human_time
from core.client.api import MQBrokerError
from core.client.model import MessageExt
from core.store.message import decode_messages
from core.trace import (
    TRACE_TOPIC, ConsumeReturnType, EndTransactionRecord, PubRecord, SubAfterRecord, SubBeforeRecord,
    decode, is_mqtt_group, MQTT_GROUP_PREFIX,
)

DLQ_PREFIX = "%DLQ%"
_MAX = 64


def add_parsers(sub) -> None:
    t = sub.add_parser("trace", help="a message's path from its trace records (produced, consumed, retried, "
                                     "dead-lettered, delivered over MQTT)")
    t.add_argument("msg_id", nargs="?", help="the message id (UNIQ_KEY)")
    t.add_argument("--key", help="trace the messages of --topic with this key")
    t.add_argument("--topic", help="the topic of --key")
    t.add_argument("--trace-topic", default=TRACE_TOPIC, help=f"where the trace records are (default {TRACE_TOPIC})")
    t.set_defaults(action="show")


async def _query(admin: Admin, topic: str, key: str, *, unique: bool = False) -> list[MessageExt]:
    try:
        route = await admin.route(topic)
    except (AdminError, MQBrokerError):
        return []
    found = []
    for name, addr in sorted(route.broker_addrs().items()):
        try:
            body = await admin.api.query_message(addr, topic, key, _MAX, unique_key=unique)
        except (*UNREACHABLE, MQBrokerError):
            continue
        found.extend(MessageExt.from_stored(m, name) for m in decode_messages(body))
    if unique:
        return [m for m in found if m.properties.get("UNIQ_KEY") == key]
    return [m for m in found if key in m.keys or m.msg_id == key]


async def trace_records(admin: Admin, trace_topic: str, msg_id: str) -> list:
    seen: set[str] = set()
    records = []
    for m in await _query(admin, trace_topic, msg_id):
        if m.offset_msg_id in seen:
            continue
        seen.add(m.offset_msg_id)
        records.extend(r for r in decode(m.body) if r.msg_id == msg_id)
    return records


def _client(group: str | None) -> str | None:
    return group[len(MQTT_GROUP_PREFIX):] if is_mqtt_group(group) else None


def _steps(records: list) -> list[dict]:
    """The path's steps, one per record or SubBefore/SubAfter pair, in time order."""
    afters = {r.request_id: r for r in records if isinstance(r, SubAfterRecord)}
    steps = []
    for r in records:
        if isinstance(r, PubRecord):
            mqtt = _client(r.group)
            steps.append({
                "time": r.timestamp, "step": "published over MQTT" if mqtt is not None else "produced",
                "group": r.group, "client": mqtt if mqtt is not None else r.client_host, "topic": r.topic,
                "mqttTopic": r.mqtt_topic, "qos": r.mqtt_qos, "storeHost": r.store_host, "offsetMsgId": r.offset_msg_id,
                "costMs": r.cost_ms, "status": "SEND_OK" if r.success else "FAILED", "bodyLength": r.body_length,
                "msgType": r.msg_type.name, "tags": r.tags, "keys": r.keys})
        elif isinstance(r, SubBeforeRecord):
            after = afters.get(r.request_id)
            mqtt = _client(r.group)
            if mqtt is not None:
                outcome = after.outcome.value if after is not None and after.outcome else "in flight"
                step = {"time": r.timestamp, "step": "delivered over MQTT", "group": r.group, "client": mqtt,
                        "qos": r.mqtt_qos, "mqttTopic": r.mqtt_topic, "retryTimes": r.retry_times, "status": outcome}
            else:
                if after is None:
                    status = "no end record (consumer stopped?)"
                else:
                    try:
                        status = ConsumeReturnType(after.context_code).name if not after.success else "SUCCESS"
                    except ValueError:
                        status = "SUCCESS" if after.success else "FAILED"
                step = {"time": r.timestamp, "step": "retried" if r.retry_times else "consumed", "group": r.group,
                        "client": r.client_id, "retryTimes": r.retry_times, "status": status}
            if after is not None:
                step["costMs"] = after.cost_ms
            steps.append(step)
        elif isinstance(r, EndTransactionRecord):
            steps.append({"time": r.timestamp, "step": "transaction ended", "group": r.group, "topic": r.topic,
                          "status": r.transaction_state, "fromCheck": r.from_transaction_check,
                          "transactionId": r.transaction_id})
    steps.sort(key=lambda s: (s["time"], 0 if s["step"] in ("produced", "published over MQTT") else 1))
    return steps


async def trace_one(admin: Admin, trace_topic: str, msg_id: str) -> dict:
    records = await trace_records(admin, trace_topic, msg_id)
    steps = _steps(records)
    pub = next((r for r in records if isinstance(r, PubRecord)), None)
    stored = []
    if pub is not None:
        stored = [{"topic": m.queue.topic, "brokerName": m.broker_name, "queueId": m.queue_id,
                   "queueOffset": m.queue_offset, "offsetMsgId": m.offset_msg_id, "storeTime": m.store_timestamp}
                  for m in await _query(admin, pub.topic, msg_id, unique=True)]
    groups = sorted({r.group for r in records if isinstance(r, SubBeforeRecord) and not is_mqtt_group(r.group)})
    dead = []
    for g in groups:
        for m in await _query(admin, DLQ_PREFIX + g, msg_id, unique=True):
            dead.append({"group": g, "topic": m.queue.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset,
                         "storeTime": m.store_timestamp, "reconsumeTimes": m.reconsume_times})
            steps.append({"time": m.store_timestamp, "step": "dead-lettered", "group": g, "topic": m.queue.topic,
                          "retryTimes": m.reconsume_times, "status": f"queue {m.queue_id} offset {m.queue_offset}"})
    steps.sort(key=lambda s: s["time"])
    return {"msgId": msg_id, "records": len(records), "stored": stored, "consumerGroups": groups,
            "mqttClients": sorted({s["client"] for s in steps if s["step"] == "delivered over MQTT"}),
            "deadLettered": dead, "steps": steps}


async def trace_show(admin: Admin, a) -> dict:
    if a.msg_id and a.key:
        raise AdminUsageError("give a message id or --key KEY --topic T, not both")
    if a.key and not a.topic:
        raise AdminUsageError("--key needs --topic (the topic of the messages with that key)")
    if a.msg_id:
        ids = [a.msg_id.upper() if len(a.msg_id) in (32, 56) else a.msg_id]
    elif a.key:
        ids = sorted({m.msg_id for m in await _query(admin, a.topic, a.key)})
        if not ids:
            raise AdminError(f"no message with key {a.key!r} in topic {a.topic}")
    else:
        raise AdminUsageError("give a message id, or --key KEY --topic T")
    traces = [await trace_one(admin, a.trace_topic, i) for i in ids]
    if not any(t["records"] for t in traces):
        raise AdminError(f"no trace record for {', '.join(ids)} in {a.trace_topic} (was tracing on for its producer, "
                         f"consumers or MQTT topic? see docs/TRACE.md)")
    return {"traceTopic": a.trace_topic, "messages": traces}


def _line(s: dict) -> str:
    step = s["step"]
    who = s.get("group") or "-"
    if step in ("produced", "published over MQTT"):
        what = f"by {who}" + (f" (client {s['client']})" if s.get("client") else "")
        what += f" to {s['topic']}"
        if s.get("mqttTopic"):
            what += f" as MQTT {s['mqttTopic']} QoS {s['qos']}"
        what += f", {s['status']} in {s['costMs']} ms; stored on {s['storeHost'] or '-'} as {s['offsetMsgId'] or '-'}"
    elif step == "delivered over MQTT":
        what = f"to {s['client']} QoS {s['qos']}" + (" (DUP)" if s.get("retryTimes") else "") + f": {s['status']}"
    elif step == "dead-lettered":
        what = f"to {s['topic']}, reconsume times {s['retryTimes']} ({s['status']})"
    elif step == "transaction ended":
        what = f"by {who}: {s['status']}" + (" (answering a check)" if s.get("fromCheck") else "")
    else:
        what = f"by group {who}" + (f" client {s['client']}" if s.get("client") else "")
        if s.get("retryTimes"):
            what += f" (retry {s['retryTimes']})"
        what += f": {s['status']}" + (f" in {s['costMs']} ms" if s.get("costMs") is not None else "")
    return f"  {human_time(s['time'])}  {step:<20} {what}"


def render(action: str, result: dict, out: TextIO) -> None:
    for t in result["messages"]:
        print(f"message {t['msgId']}: {t['records']} trace record(s) in {result['traceTopic']}", file=out)
        for s in t["stored"]:
            print(f"  stored in {s['topic']} on {s['brokerName']} queue {s['queueId']} offset {s['queueOffset']} "
                  f"({s['offsetMsgId']})", file=out)
        for s in t["steps"]:
            print(_line(s), file=out)
        if t["consumerGroups"]:
            print(f"  consumer groups: {', '.join(t['consumerGroups'])}", file=out)
        if t["mqttClients"]:
            print(f"  MQTT subscribers: {', '.join(t['mqttClients'])}", file=out)
        if t["deadLettered"]:
            print(f"  dead-lettered in: {', '.join(d['topic'] for d in t['deadLettered'])}", file=out)


__all__ = ["add_parsers", "render", "trace_show"]
