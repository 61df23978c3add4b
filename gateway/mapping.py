"""How MQTT application messages map onto broker messages, and back.

ARCHITECTURE decision 3: an MQTT PUBLISH on ``a/b/c`` is stored once, in
broker topic ``mqtt_level_to_topic("a")``, in queue
``crc32(b"a/b/c") % write_queue_nums`` (so one MQTT topic keeps its order),
with these message properties (names are part of the on-disk contract; the
Spark job reads ``mqttTopic`` and ``contentType``):

======================  =====================================================
property                value
======================  =====================================================
``mqttTopic``           the full MQTT topic name
``mqttQos``             "0", "1" or "2": the QoS the message was published at
``mqttRetain``          "true" or "false": the RETAIN flag of the PUBLISH
``mqttClientId``        the publishing client (for No Local)
``mqttPublishTime``     ms since the epoch when the gateway received it
``mqttExpiry``          5.0 Message Expiry Interval, seconds (absent: none)
``mqttPayloadFormat``   5.0 Payload Format Indicator, "0" or "1"
``contentType``         5.0 Content Type
``mqttResponseTopic``   5.0 Response Topic
``mqttCorrelation``     5.0 Correlation Data, standard base64
``mqttUserProps``       5.0 User Properties, a JSON array of [name, value]
======================  =====================================================

Rules kept here:

* Property values never contain the RocketMQ separators ``\\x01``/``\\x02``:
  a PUBLISH whose topic or string property holds one is refused
  (``MappingError``, reason 0x99/0x90) rather than corrupting the entry.
  Binary and list values are encoded (base64, JSON with ASCII escapes).
* A message sent natively to broker topic ``a`` is an MQTT message on
  ``mqttTopic`` if it carries that property, else on the MQTT topic
  ``topic_to_mqtt_level(a)``; broker-internal topics (``%RETRY%``,
  ``rmq_sys_``, ``TBW102``, schedule and transaction topics) never are.
  A native message has QoS 1 (RocketMQ messages are acknowledged).
* A session queue is the light message queue ``%LMQ%<id>`` (queue 0) where
  ``<id>`` is the client id when it is 1..40 of ``[A-Za-z0-9_-]``, else
  ``%`` + 32 hex digits of its SHA-256 (``%`` cannot appear in the plain
  form, so the two never collide). Names hold no ``,`` so they can be listed
  in ``INNER_MULTI_DISPATCH``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import time
import zlib

from core.broker import LMQ_TOPIC_PREFIX, is_system_topic, mqtt_level_to_topic, topic_to_mqtt_level
from core.store import PROPERTY_MQTT_TOPIC, PROPERTY_REAL_TOPIC, Message, StoredMessage, new_message, roomy_properties
from gateway.mqtt import Publish, ReasonCode
from gateway.wildcard import TopicError, validate_topic_name

P_TOPIC = PROPERTY_MQTT_TOPIC
P_QOS = "mqttQos"
P_RETAIN = "mqttRetain"
P_CLIENT = "mqttClientId"
P_TIME = "mqttPublishTime"
P_EXPIRY = "mqttExpiry"
P_FORMAT = "mqttPayloadFormat"
P_CONTENT_TYPE = "contentType"
P_RESPONSE_TOPIC = "mqttResponseTopic"
P_CORRELATION = "mqttCorrelation"
P_USER_PROPS = "mqttUserProps"
P_TIMER_DELAY = "TIMER_DELAY_SEC"

# RocketMQ's system property names (MessageConst's STRING_HASH_SET, 4.9 and
# 5.x): a user property of an MQTT 5 PUBLISH never becomes one of these.
SYSTEM_PROPERTY_NAMES = frozenset((
    "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET",
    "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
    "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "EXTEND_UNIQ_INFO", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME",
    "INNER_NUM", "INNER_BASE", "CHECK_IMMUNITY_TIME_IN_SECONDS", "TRAN_PREPARED_QUEUE_OFFSET", "__transactionId__",
    "TRANSACTION_CHECK_TIMES", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
    "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "__SHARDINGKEY",
    "PROPERTY_FORWARD_QUEUE_ID", "REDIRECT", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "TRACE_CONTEXT",
    "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "__BORNHOST", "BORN_TIMESTAMP", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "TIMER_DELAY_MS",
    "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__STARTDELIVERTIME",
))

# Ours: the MQTT side reads these back on delivery (a user property named
# mqttExpiry must not make a message expire).
OWN_PROPERTY_NAMES = frozenset((P_TOPIC, P_QOS, P_RETAIN, P_CLIENT, P_TIME, P_EXPIRY, P_FORMAT, P_CONTENT_TYPE,
                                P_RESPONSE_TOPIC, P_CORRELATION, P_USER_PROPS, P_TIMER_DELAY))

_PLAIN_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_BAD = re.compile("[\x01\x02]")
_TRANSACTION_PREPARED = 0x4


class MappingError(ValueError):
    """A PUBLISH that cannot be stored; ``reason_code`` says why (5.0)."""

    def __init__(self, msg: str, reason_code: int) -> None:
        super().__init__(msg)
        self.reason_code = reason_code


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# A device publishes to the same few topics over and over: both mappings are
# pure functions of the topic, computed once per topic (an error is not cached).
_PER_TOPIC = functools.lru_cache(maxsize=16384)


@_PER_TOPIC
def queue_for(mqtt_topic: str, write_queue_nums: int) -> int:
    """The queue of a full MQTT topic: a stable hash, so per-topic order holds."""
    return zlib.crc32(mqtt_topic.encode("utf-8")) % max(1, write_queue_nums)


@_PER_TOPIC
def broker_topic_for(mqtt_topic: str) -> str:
    """Broker topic for an MQTT topic; ``MappingError`` if none can hold it."""
    try:
        name = mqtt_level_to_topic(mqtt_topic.split("/", 1)[0])
    except ValueError as e:
        raise MappingError(str(e), ReasonCode.TOPIC_NAME_INVALID) from None
    if is_system_topic(name) or name == "TBW102":
        raise MappingError(f"topic {mqtt_topic!r} maps onto reserved broker topic {name!r}",
                           ReasonCode.NOT_AUTHORIZED)
    return name


def session_queue_name(client_id: str) -> str:
    """The light message queue of a persistent session (queue id 0)."""
    if _PLAIN_ID.match(client_id):
        return LMQ_TOPIC_PREFIX + client_id
    digest = hashlib.sha256(client_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return LMQ_TOPIC_PREFIX + "%" + digest


def _text(value: str, what: str) -> str:
    if _BAD.search(value):
        raise MappingError(f"{what} holds a control character the store cannot keep",
                           ReasonCode.TOPIC_NAME_INVALID if what == "topic" else ReasonCode.PAYLOAD_FORMAT_INVALID)
    return value


def publish_properties(mqtt_topic: str, qos: int, retain: bool, client_id: str, received_ms: int) -> dict:
    """The properties every message of a PUBLISH starts with (MQTT topic, QoS,
    retain flag, client, receive time); MappingError if the store cannot keep
    the topic or client id. The same for every PUBLISH of a read with the
    same topic, QoS and retain flag: see ``publish_to_message``'s ``base``.
    Its table has room for the two properties the broker stamps on each
    message (`core.store.roomy_properties`): its copies do not grow then."""
    return roomy_properties({
        P_TOPIC: _text(mqtt_topic, "topic"),
        P_QOS: str(qos),
        P_RETAIN: "true" if retain else "false",
        P_CLIENT: _text(client_id, "client id"),
        P_TIME: str(received_ms),
    })


def publish_to_message(pub: Publish, broker_topic: str, client_id: str, received_ms: int,
                       *, topic: str | None = None, base: dict | None = None) -> Message:
    """The broker message for an inbound PUBLISH (queue id set by the caller).
    ``base``: ``publish_properties`` of this PUBLISH (topic, QoS, retain flag,
    client, time), made once for several; it is copied, never changed."""
    if base is None:
        base = publish_properties(pub.topic if topic is None else topic, pub.qos, pub.retain, client_id, received_ms)
    msg = new_message(broker_topic, pub.payload, base, received_ms, pub)
    _add_v5_properties(msg.properties, pub)
    return msg


def plain_publish_to_message(pub: Publish, broker_topic: str, base: dict, received_ms: int) -> Message:
    """``publish_to_message(pub, broker_topic, ..., base=base)`` for a PUBLISH
    known to carry no 5.0 properties (every PUBLISH of a 3.1/3.1.1 client):
    the same message, without looking for them (`core.store.new_message`:
    the message's slots filled in C when compiled)."""
    return new_message(broker_topic, pub.payload, base, received_ms, pub)


def _add_v5_properties(props: dict, pub: Publish) -> None:
    if pub.message_expiry_interval is not None:
        props[P_EXPIRY] = str(pub.message_expiry_interval)
    if pub.payload_format_indicator is not None:
        props[P_FORMAT] = str(pub.payload_format_indicator)
    if pub.content_type is not None:
        props[P_CONTENT_TYPE] = _text(pub.content_type, "content type")
    if pub.response_topic is not None:
        props[P_RESPONSE_TOPIC] = _text(pub.response_topic, "response topic")
    if pub.correlation_data is not None:
        props[P_CORRELATION] = base64.b64encode(pub.correlation_data).decode("ascii")
    if pub.user_properties:
        props[P_USER_PROPS] = json.dumps([list(p) for p in pub.user_properties], separators=(",", ":"))
        _flat_user_properties(props, pub.user_properties)


def _flat_user_properties(props: dict, pairs) -> None:
    """Each user property also as a message property of its own, for native consumers
    and SQL92 filters (``temp > 30.0``). The first of a repeated name wins; one of
    our names (`OWN_PROPERTY_NAMES`, any ``mqtt*``), a RocketMQ system name
    (`SYSTEM_PROPERTY_NAMES`, ``__RMQ.TRANSIENT.*``) or a name or value the store
    cannot keep (\\x01, \\x02) is skipped. MQTT delivery reads the JSON property,
    which keeps every pair in order."""
    for name, value in pairs:
        if (name and name not in props and name not in OWN_PROPERTY_NAMES and not name.startswith("mqtt")
                and name not in SYSTEM_PROPERTY_NAMES
                and not name.startswith("__RMQ.TRANSIENT.") and not _BAD.search(name) and not _BAD.search(value)):
            props[name] = value


def mqtt_topic_of(msg: Message | StoredMessage) -> str | None:
    """The MQTT topic a stored (or about to be stored) message is on, or None."""
    props = msg.properties
    topic = props.get(P_TOPIC)
    if topic is not None:
        return topic or None
    name = msg.topic
    if name.startswith(LMQ_TOPIC_PREFIX) or is_system_topic(name) or name == "TBW102":
        return None
    real = props.get(PROPERTY_REAL_TOPIC)
    if real is not None and real != name:
        return None  # parked in a schedule/half topic; it comes back later
    return topic_to_mqtt_level(name)


def is_deliverable(msg: Message) -> bool:
    """False for entries that are not (yet) messages for consumers."""
    if msg.sysflag & 0xC == _TRANSACTION_PREPARED:
        return False
    real = msg.properties.get(PROPERTY_REAL_TOPIC)
    return real is None or real == msg.topic


class Outbound:
    """An application message ready to deliver: decoded once, shared by every
    subscriber (``templates`` caches its encodings)."""

    __slots__ = ("topic", "payload", "qos", "retain", "client_id", "publish_ms", "expiry", "props",
                 "templates", "ref")

    def __init__(self, topic: str, payload: bytes, qos: int, retain: bool, client_id: str | None,
                 publish_ms: int, expiry: int | None, props: dict, ref=None) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.client_id = client_id
        self.publish_ms = publish_ms
        self.expiry = expiry
        self.props = props  # Publish keyword arguments for the 5.0 properties
        self.templates: dict = {}
        self.ref = ref  # how to find it again: None (not stored) or ["r", phys, size]

    def remaining_expiry(self, now: int) -> int | None:
        """Seconds left (None = never expires); <= 0 means expired."""
        if self.expiry is None:
            return None
        return self.expiry - (now - self.publish_ms) // 1000

    def publish(self, *, qos: int, retain: bool, sub_ids: tuple = (), expiry: int | None = None,
                packet_id: int | None = None, dup: bool = False) -> Publish:
        props = self.props
        if expiry is not None:
            props = dict(props, message_expiry_interval=max(1, expiry))
        return Publish(topic=self.topic, payload=self.payload, qos=qos, retain=retain, dup=dup,
                       packet_id=packet_id if qos else None, subscription_identifiers=sub_ids, **props)


def outbound_from_publish(pub: Publish, topic: str, client_id: str | None, received_ms: int) -> Outbound:
    """The deliverable view of an inbound PUBLISH on ``topic``: what
    `outbound_from_message` makes of the message `publish_to_message` made
    of it, without parsing the properties back."""
    props = {}
    if pub.payload_format_indicator is not None:
        props["payload_format_indicator"] = pub.payload_format_indicator
    if pub.content_type is not None:
        props["content_type"] = pub.content_type
    if pub.response_topic is not None:
        props["response_topic"] = pub.response_topic
    if pub.correlation_data is not None:
        props["correlation_data"] = pub.correlation_data
    if pub.user_properties:
        props["user_properties"] = tuple(pub.user_properties)
    return Outbound(topic, pub.payload, pub.qos, pub.retain, client_id, received_ms, pub.message_expiry_interval, props)


def outbound_from_message(msg: Message | StoredMessage, topic: str | None = None) -> Outbound | None:
    """The deliverable view of a broker message, or None if it is no MQTT message."""
    props = msg.properties
    if topic is None:
        topic = mqtt_topic_of(msg)
        if topic is None:
            return None
    try:
        qos = int(props.get(P_QOS, "1"))
        if qos not in (0, 1, 2):
            qos = 1
        publish_ms = int(props.get(P_TIME) or msg.born_timestamp or now_ms())
        expiry = int(props[P_EXPIRY]) if P_EXPIRY in props else None
        out: dict = {}
        if P_FORMAT in props:
            out["payload_format_indicator"] = int(props[P_FORMAT])
        if P_CONTENT_TYPE in props:
            out["content_type"] = props[P_CONTENT_TYPE]
        if P_RESPONSE_TOPIC in props:
            out["response_topic"] = props[P_RESPONSE_TOPIC]
        if P_CORRELATION in props:
            out["correlation_data"] = base64.b64decode(props[P_CORRELATION])
        if P_USER_PROPS in props:
            out["user_properties"] = tuple((str(k), str(v)) for k, v in json.loads(props[P_USER_PROPS]))
    except (ValueError, TypeError):
        return None  # a native message with garbage in our properties: not ours to guess
    return Outbound(topic, msg.body, qos, props.get(P_RETAIN) == "true", props.get(P_CLIENT),
                    publish_ms, expiry, out)


def split_delayed(topic: str) -> tuple[int, str]:
    """(delay in seconds, real topic) of ``$delayed/<seconds>/<topic>``; MappingError if malformed."""
    parts = topic.split("/", 2)
    # ASCII digits only ("²".isdigit() is true), and few enough for int() and the timer properties
    if len(parts) < 3 or not (parts[1].isascii() and parts[1].isdigit() and len(parts[1]) <= 10) or not parts[2]:
        raise MappingError("$delayed topics are $delayed/<seconds>/<topic>, seconds at most 10 digits",
                           ReasonCode.TOPIC_NAME_INVALID)
    try:
        validate_topic_name(parts[2])
    except TopicError as e:
        raise MappingError(str(e), ReasonCode.TOPIC_NAME_INVALID) from None
    return int(parts[1]), parts[2]
