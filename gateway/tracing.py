"""Message trace of the MQTT edge: publishes and deliveries on traced topics, as RocketMQ trace records.

``[mqtt] traceMqttTopics = ["sensors/#"]`` turns it on for the MQTT topics
those filters match; records go to ``[mqtt] traceTopicName``
(``RMQ_SYS_TRACE_TOPIC``) in the layout of `core.trace`, so
``mqgate admin trace`` and RocketMQ's own trace readers find them by
message id.

Rules kept here:

- Off (no filter), nothing of this module runs: no hook is registered and
  the gateway's ``tracer`` is None, which the few call sites test before
  anything else (one attribute test per delivery, no call).
- A stored MQTT publish on a traced topic makes a Pub record: group
  ``%MQTT%<client id>``, broker topic, UNIQ_KEY as message id, the offset
  message id (store host + commit-log offset) as the stored location, QoS
  and MQTT topic in the extension fields.
- Each delivery to a subscriber makes a SubBefore record (group
  ``%MQTT%<subscriber>``, retry count 1 for a DUP resend) when the PUBLISH
  is handed to the connection, and a SubAfter record with the same request
  id when it ends: ``acked`` (PUBACK / PUBCOMP; a QoS 0 delivery when it is
  handed over), ``dropped`` (a queue limit cut it: ``maxQueuedMessages``
  with dropNew, in the session queue or behind a slow write, or the
  outbound byte limit) or
  ``expired`` (its message expiry passed before delivery).
- A delivery's message id comes from the entry it was read from; the tracer
  remembers (bounded, ``_IDS`` entries) the ids of traced messages decoded
  for delivery. A delivery it cannot name (evicted meanwhile) is not traced.
  A QoS 1/2 delivery waits for its ack in ``_flights`` (bounded, oldest
  forgotten); a reconnect keeps it (the ack may come on the new
  connection), a DUP resend starts a new SubBefore/SubAfter pair.
- Records never wait on the broker: a bounded buffer (``_BUFFER``) drops
  and counts what does not fit; one task sends them in batches (at most 20
  records or 0.5 s apart) with the broker's own send, and a failed send is
  logged and counted, never raised into a connection.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping

import trio

from core.store import Message, parse_offset_msg_id
from core.trace import (
    PROPERTY_KEYS, PROPERTY_UNIQ_KEY, TRACE_TOPIC, DeliveryOutcome, PubRecord, SubAfterRecord, SubBeforeRecord, TraceBatch, TraceRecord, mqtt_group,
)
from gateway.config import ConfigError
from gateway.mapping import P_CLIENT, P_TOPIC, now_ms
from gateway.mqtt import Publish
from gateway.wildcard import TopicError, parse_filter, topic_matches

log = logging.getLogger("mqgate.gateway.trace")

TRACE_KEYS = frozenset({"traceMqttTopics", "traceTopicName"})
_BUFFER = 4096
_IDS = 8192        # traced messages decoded for delivery whose ids are kept (each holds its Outbound)
_FLIGHTS = 65536   # QoS 1/2 deliveries awaiting their ack; the oldest are forgotten past it
_MATCH_CACHE = 4096
_BATCH = 20
_FLUSH_S = 0.5


@dataclass(frozen=True)
class TraceSettings:
    mqtt_topics: tuple[str, ...] = ()
    topic_name: str = TRACE_TOPIC

    @classmethod
    def from_dict(cls, table: Mapping[str, Any]) -> "TraceSettings":
        topics = table.get("traceMqttTopics", [])
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            raise ConfigError(f"[mqtt] traceMqttTopics must be a list of MQTT topic filters, not {topics!r}")
        for t in topics:
            try:
                parse_filter(t)
            except TopicError as e:
                raise ConfigError(f"[mqtt] traceMqttTopics: {t!r} is not a topic filter: {e}") from None
        name = table.get("traceTopicName", TRACE_TOPIC)
        if not isinstance(name, str) or not name or len(name) > 127 or not all(
                c.isascii() and (c.isalnum() or c in "%|_-") for c in name):
            raise ConfigError(f"[mqtt] traceTopicName must be a topic name (1..127 of [%|a-zA-Z0-9_-]), not {name!r}")
        return cls(tuple(topics), name)


class MqttTracer:
    """Builds the gateway's trace records and sends them; see the module docstring."""

    def __init__(self, settings: TraceSettings, broker) -> None:
        self.settings = settings
        self.broker = broker
        self._filters = [parse_filter(t) for t in settings.mqtt_topics]
        self._matches: dict[str, bool] = {}
        self._ids: OrderedDict[int, tuple[Any, str, str]] = OrderedDict()  # id(out) -> (out, msg id, keys)
        self._flights: dict[tuple[str, int], tuple[str, str, str, int]] = {}  # (client, pid) -> request
        self._send, self._recv = trio.open_memory_channel[TraceRecord](_BUFFER)
        self._seq = 0
        self.discarded = 0
        self.failed = 0
        self.sent_records = 0
        self._warned = False

    # ---- which messages ----

    def traced(self, mqtt_topic: str) -> bool:
        hit = self._matches.get(mqtt_topic)
        if hit is None:
            hit = any(topic_matches(f, mqtt_topic) for f in self._filters)
            if len(self._matches) >= _MATCH_CACHE:
                self._matches.clear()
            self._matches[mqtt_topic] = hit
        return hit

    def remember(self, out, props: Mapping[str, str]) -> None:
        """``out`` (an Outbound about to be delivered) came from a message with ``props``."""
        msg_id = props.get(PROPERTY_UNIQ_KEY)
        if msg_id is None or not self.traced(out.topic):
            return
        ids = self._ids
        ids[id(out)] = (out, msg_id, props.get(PROPERTY_KEYS, ""))
        if len(ids) > _IDS:
            ids.popitem(last=False)

    def _name(self, out) -> tuple[str, str] | None:
        entry = self._ids.get(id(out))
        if entry is None or entry[0] is not out:
            return None
        return entry[1], entry[2]

    def _request_id(self) -> str:
        self._seq += 1
        return f"{now_ms():X}{self._seq:08X}"

    def _append(self, record: TraceRecord) -> None:
        try:
            self._send.send_nowait(record)
        except trio.WouldBlock:
            self.discarded += 1
            if self.discarded == 1:
                log.warning("trace buffer full (%d records): records are dropped until it drains", _BUFFER)

    # ---- the records ----

    def stored_hook(self, msg: Message, result) -> None:
        """The broker's stored hook: a Pub record for each traced MQTT publish stored."""
        pub = msg.note
        if pub.__class__ is not Publish or not result.ok:
            return
        props = msg.properties
        topic = props.get(P_TOPIC)
        if topic is None or not self.traced(topic):
            return
        host = ""
        try:
            raw_host, _ = parse_offset_msg_id(result.msg_id)
            host = _host_text(raw_host)
        except (ValueError, TypeError):
            pass
        self._append(PubRecord(
            timestamp=msg.born_timestamp or now_ms(), group=mqtt_group(props.get(P_CLIENT, "")), topic=result.topic,
            msg_id=props.get(PROPERTY_UNIQ_KEY, result.msg_id), tags=msg.tags, keys=props.get(PROPERTY_KEYS) or None,
            store_host=host, body_length=len(msg.body), cost_ms=max(0, now_ms() - (msg.born_timestamp or now_ms())),
            offset_msg_id=result.msg_id, success=True, client_host=props.get(P_CLIENT, ""), mqtt_qos=pub.qos,
            mqtt_topic=topic))

    def _before(self, client_id: str, out, qos: int, msg_id: str, keys: str, retry: int) -> str:
        request_id = self._request_id()
        self._append(SubBeforeRecord(timestamp=now_ms(), group=mqtt_group(client_id), request_id=request_id,
                                     msg_id=msg_id, retry_times=retry, keys=keys or None, client_id=client_id,
                                     mqtt_qos=qos, mqtt_topic=out.topic))
        return request_id

    def _after(self, client_id: str, request_id: str, msg_id: str, keys: str, started: int,
               outcome: DeliveryOutcome) -> None:
        ended = now_ms()
        self._append(SubAfterRecord(request_id=request_id, msg_id=msg_id, cost_ms=max(0, ended - started),
                                    success=outcome is DeliveryOutcome.ACKED, keys=keys or None,
                                    context_code=int(outcome.context_code), timestamp=ended,
                                    group=mqtt_group(client_id), outcome=outcome))

    def delivered(self, client_id: str, out, qos: int, packet_id: int | None, dup: bool = False) -> None:
        """A PUBLISH was handed to ``client_id``'s connection."""
        named = self._name(out)
        if named is None:
            return
        msg_id, keys = named
        started = now_ms()
        request_id = self._before(client_id, out, qos, msg_id, keys, 1 if dup else 0)
        if not qos or packet_id is None:
            self._after(client_id, request_id, msg_id, keys, started, DeliveryOutcome.ACKED)
        else:
            flights = self._flights
            flights[(client_id, packet_id)] = (request_id, msg_id, keys, started)
            if len(flights) > _FLIGHTS:
                del flights[next(iter(flights))]

    def acked(self, client_id: str, packet_id: int) -> None:
        """The QoS 1/2 flow of ``packet_id`` completed (PUBACK / PUBCOMP)."""
        flight = self._flights.pop((client_id, packet_id), None)
        if flight is not None:
            request_id, msg_id, keys, started = flight
            self._after(client_id, request_id, msg_id, keys, started, DeliveryOutcome.ACKED)

    def ended(self, client_id: str, out, qos: int, outcome: DeliveryOutcome) -> None:
        """A delivery that never reached the client: dropped or expired."""
        named = self._name(out)
        if named is not None:
            self._not_delivered(client_id, out.topic, qos, named[0], named[1], outcome)

    def dropped_at_put(self, client_id: str, props: Mapping[str, str], qos: int) -> None:
        """The router did not queue a message for ``client_id`` (queue limit, dropNew)."""
        topic = props.get(P_TOPIC)
        msg_id = props.get(PROPERTY_UNIQ_KEY)
        if topic is not None and msg_id is not None and self.traced(topic):
            self._not_delivered(client_id, topic, qos, msg_id, props.get(PROPERTY_KEYS, ""), DeliveryOutcome.DROPPED)

    def _not_delivered(self, client_id, topic, qos, msg_id, keys, outcome) -> None:
        now = now_ms()
        request_id = self._request_id()
        self._append(SubBeforeRecord(timestamp=now, group=mqtt_group(client_id), request_id=request_id,
                                     msg_id=msg_id, retry_times=0, keys=keys or None, client_id=client_id,
                                     mqtt_qos=qos, mqtt_topic=topic))
        self._after(client_id, request_id, msg_id, keys, now, outcome)

    # ---- sending ----

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self._ensure_topic()
        task_status.started()
        try:
            while True:
                batch = [await self._recv.receive()]
                with trio.move_on_after(_FLUSH_S):
                    while len(batch) < _BATCH:
                        batch.append(await self._recv.receive())
                with trio.CancelScope(shield=True), trio.move_on_after(5.0):
                    await self._deliver(batch)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5.0):
                await self.flush()

    async def flush(self) -> None:
        """Send every buffered record now."""
        while True:
            batch = []
            while len(batch) < _BATCH:
                try:
                    batch.append(self._recv.receive_nowait())
                except trio.WouldBlock:
                    break
            if not batch:
                return
            await self._deliver(batch)

    async def _ensure_topic(self) -> None:
        try:
            if self.broker.get_topic(self.settings.topic_name) is None:
                await self.broker.ensure_topic(self.settings.topic_name, 1)
        except Exception as exc:  # the sends will say it again, once, if it matters
            log.info("trace topic %s not created: %s", self.settings.topic_name, exc)

    async def _deliver(self, records: list[TraceRecord]) -> None:
        for body, keys in TraceBatch().add_all(records):
            msg = Message(topic=self.settings.topic_name, body=body.encode(), properties={PROPERTY_KEYS: " ".join(keys)})
            try:
                result = await self.broker.send(msg)
                if not result.ok:
                    raise RuntimeError(f"{result.status.name} {result.remark or ''}".strip())
                self.sent_records += body.count("\x02")
            except Exception as exc:
                self.failed += 1
                level = logging.DEBUG if self._warned else logging.WARNING
                self._warned = True
                log.log(level, "trace records to %s not stored (%d so far): %s", self.settings.topic_name,
                        self.failed, exc)


def _host_text(raw: bytes) -> str:
    if len(raw) == 8:
        return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}:{int.from_bytes(raw[4:], 'big')}"
    return raw.hex()
