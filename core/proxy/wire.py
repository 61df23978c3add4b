"""The mapping between RocketMQ 5 gRPC messages (``apache.rocketmq.v2``, see
`core.proxy.pb`) and the store's messages.

Rules kept here:
- System properties travel as RocketMQ 5's proxy puts them in the store
  (``TAGS``, ``KEYS``, ``UNIQ_KEY``, ``__SHARDINGKEY`` for the message group,
  ``TIMER_DELIVER_MS`` for a delivery time), so a message sent over gRPC is
  the same stored message as one sent over remoting, and the reverse.
- A lite message (``lite_topic`` L of parent topic T) is stored once, in T,
  with ``LITE_TOPIC`` = L and multi-dispatched (``INNER_MULTI_DISPATCH``)
  to the light queue `lite_queue` (T, L): its consumers pop that queue, a
  consumer of T sees it too, and an MQTT session's queue works the same way.
  A lite topic name follows the topic-name rules (so it can never split the
  comma-separated dispatch list) and is at most `MAX_LITE_TOPIC` characters.
- Bodies: a GZIP body from a producer is stored uncompressed (so MQTT
  subscribers, 4.x consumers and Spark read it as sent), after a bounded
  decompression (at most the broker's body limit; more is
  MESSAGE_BODY_TOO_LARGE, a broken stream MESSAGE_CORRUPTED). A stored
  body that a 4.x producer compressed (sysflag COMPRESSED, zlib) goes to a
  5.x consumer as GZIP: the same deflate data in a gzip frame, nothing is
  compressed again. The body digest is always of the bytes on the wire.
"""

from __future__ import annotations

import struct
import zlib

from core.broker import validate_topic
from core.store.message import (COMPRESSED_FLAG, PROPERTY_INNER_MULTI_DISPATCH, PROPERTY_KEYS, PROPERTY_TAGS,
                                PROPERTY_UNIQ_KEY, Message, StoredMessage, unpack_host)

from . import pb

SHARDING_KEY = "__SHARDINGKEY"  # the FIFO message group (RocketMQ's PROPERTY_SHARDING_KEY)
DELIVER_MS = "TIMER_DELIVER_MS"  # absolute delivery time, ms (RocketMQ 5 timer messages)
TRACE_CONTEXT = "TRACE_CONTEXT"
# Properties of the store that are the wire's system properties or the broker's own bookkeeping:
# never shown to a 5.x client as user properties.
_SYSTEM = frozenset({
    PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, SHARDING_KEY, DELIVER_MS, TRACE_CONTEXT, "WAIT", "CLUSTER",
    "MIN_OFFSET", "MAX_OFFSET", "REAL_TOPIC", "REAL_QID", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME", "DELAY",
    "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "INNER_MULTI_DISPATCH",
    "INNER_MULTI_QUEUE_OFFSET", "TRAN_MSG", "PGROUP", "TRANSACTION_ID", "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "TRANSACTION_CHECK_TIMES", "TRAN_PREPARED_QUEUE_OFFSET", "LITE_TOPIC",
})
_HELD_PREFIX = "TRAN_HELD_"  # core.transactions keeps a half's delay properties under this prefix
TRAN_MSG, PGROUP, CHECK_IMMUNITY = "TRAN_MSG", "PGROUP", "CHECK_IMMUNITY_TIME_IN_SECONDS"
REAL_TOPIC = "REAL_TOPIC"
LITE_TOPIC = "LITE_TOPIC"
MAX_LITE_TOPIC = 64  # the 5.x clients' default maxLiteTopicSize


def lite_queue(topic: str, lite_topic: str) -> str:
    """The light queue (queue 0 of an ``%LMQ%`` topic) of ``lite_topic`` under ``topic``."""
    return f"%LMQ%${topic}${lite_topic}"


def check_lite_topic(name: str) -> None:
    """A `WireError` (ILLEGAL_LITE_TOPIC) unless ``name`` can be a lite topic."""
    if not name or len(name) > MAX_LITE_TOPIC:
        raise WireError(pb.ILLEGAL_LITE_TOPIC, f"lite topic {name[:80]!r} must have 1..{MAX_LITE_TOPIC} characters")
    problem = validate_topic(name)
    if problem:
        raise WireError(pb.ILLEGAL_LITE_TOPIC, f"lite topic: {problem}")


def transaction_group(topic: str) -> str:
    """The producer group a 5.x transactional message is stored under (PGROUP): 5.x
    producers have no group, so a half is checked with any producer of its topic."""
    return f"%GRPC%{topic}"


def topic_of_transaction_group(group: str) -> str | None:
    return group[len("%GRPC%"):] if group.startswith("%GRPC%") else None


def status(code: int, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)


OK = status(pb.OK)


class WireError(ValueError):
    """A request the client got wrong: ``code`` is the wire's answer, the text one line."""

    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code


def gunzip(data: bytes, limit: int) -> bytes:
    """A GZIP body, uncompressed, refused (`WireError`) past ``limit`` bytes or when broken."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        raise WireError(pb.MESSAGE_CORRUPTED, f"the GZIP body does not decompress: {e}") from None
    if len(out) > limit:
        raise WireError(pb.MESSAGE_BODY_TOO_LARGE, f"the GZIP body decompresses to more than {limit} bytes "
                                                   f"(maxMessageSize)")
    if not d.eof:
        raise WireError(pb.MESSAGE_CORRUPTED, "the GZIP body ends before its stream does")
    return out


def zlib_to_gzip(data: bytes) -> bytes:
    """A zlib stream (a 4.x compressed body) as a gzip stream of the same deflate data."""
    raw = zlib.decompress(data)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + data[2:-4]
            + struct.pack("<II", zlib.crc32(raw) & 0xFFFFFFFF, len(raw) & 0xFFFFFFFF))


def to_store(m: pb.Message, max_body: int = 4 * 1024 * 1024) -> tuple[Message, int]:
    """A sent message as the store keeps it, and the queue the client chose; ``max_body``
    bounds a GZIP body's decompression."""
    sp = m.system_properties
    topic = m.topic.name
    if not topic:
        raise WireError(pb.ILLEGAL_TOPIC, "the message has no topic")
    if not sp.message_id:
        raise WireError(pb.ILLEGAL_MESSAGE_ID, "the message has no message_id")
    if sp.body_encoding not in (pb.IDENTITY, pb.GZIP, pb.ENCODING_UNSPECIFIED):
        raise WireError(pb.BAD_REQUEST, f"body encoding {sp.body_encoding} is not IDENTITY or GZIP")
    body = gunzip(m.body, max_body) if sp.body_encoding == pb.GZIP else bytes(m.body)
    props: dict[str, str] = {}
    for key, value in m.user_properties.items():
        if key in _SYSTEM:
            raise WireError(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {key!r} is a reserved name")
        props[key] = value
    if sp.HasField("tag"):
        props[PROPERTY_TAGS] = sp.tag
    if sp.keys:
        props[PROPERTY_KEYS] = " ".join(sp.keys)
    props[PROPERTY_UNIQ_KEY] = sp.message_id
    if sp.HasField("message_group"):
        if not sp.message_group:
            raise WireError(pb.ILLEGAL_MESSAGE_GROUP, "the message group is empty")
        props[SHARDING_KEY] = sp.message_group
    if sp.HasField("lite_topic"):
        check_lite_topic(sp.lite_topic)
        props[LITE_TOPIC] = sp.lite_topic
        props[PROPERTY_INNER_MULTI_DISPATCH] = lite_queue(topic, sp.lite_topic)
    if sp.HasField("delivery_timestamp"):
        props[DELIVER_MS] = str(sp.delivery_timestamp.ToMilliseconds())
    if sp.HasField("trace_context") and sp.trace_context:
        props[TRACE_CONTEXT] = sp.trace_context
    if sp.message_type == pb.TRANSACTION:
        props[TRAN_MSG] = "true"
        props[PGROUP] = transaction_group(topic)
        if sp.HasField("orphaned_transaction_recovery_duration"):
            props[CHECK_IMMUNITY] = str(max(1, sp.orphaned_transaction_recovery_duration.seconds))
    born = sp.born_timestamp.ToMilliseconds() if sp.HasField("born_timestamp") else 0
    return Message(topic=topic, body=body, properties=props, born_timestamp=born), sp.queue_id


def from_store(sm: StoredMessage, *, receipt_handle: str, attempt: int, invisible_ms: int) -> pb.Message:
    """A stored message as a 5.x consumer receives it (``attempt`` counts deliveries from 1)."""
    props = sm.properties
    body, encoding = sm.body, pb.IDENTITY
    if sm.sysflag & COMPRESSED_FLAG:
        try:
            body, encoding = zlib_to_gzip(sm.body), pb.GZIP
        except zlib.error:
            pass  # not zlib after all: the bytes as stored (the digest still says what they are)
    out = pb.Message(body=body)
    out.topic.name = sm.topic
    for key, value in props.items():
        if key not in _SYSTEM and not key.startswith(_HELD_PREFIX):
            out.user_properties[key] = value
    sp = out.system_properties
    if PROPERTY_TAGS in props:
        sp.tag = props[PROPERTY_TAGS]
    sp.keys.extend(props.get(PROPERTY_KEYS, "").split())
    sp.message_id = props.get(PROPERTY_UNIQ_KEY) or sm.msg_id
    sp.body_digest.type = pb.CRC32
    sp.body_digest.checksum = format(zlib.crc32(body) & 0xFFFFFFFF, "08X")
    sp.body_encoding = encoding
    if LITE_TOPIC in props:
        sp.message_type = pb.LITE
        sp.lite_topic = props[LITE_TOPIC]
    elif SHARDING_KEY in props:
        sp.message_type = pb.FIFO
        sp.message_group = props[SHARDING_KEY]
    elif DELIVER_MS in props:
        sp.message_type = pb.DELAY
        sp.delivery_timestamp.FromMilliseconds(int(props[DELIVER_MS]))
    else:
        sp.message_type = pb.NORMAL
    sp.born_timestamp.FromMilliseconds(sm.born_timestamp)
    sp.born_host = _host(sm.born_host)
    sp.store_timestamp.FromMilliseconds(sm.store_timestamp)
    sp.store_host = _host(sm.store_host)
    sp.queue_id = sm.queue_id
    sp.queue_offset = sm.queue_offset
    sp.receipt_handle = receipt_handle
    sp.invisible_duration.FromMilliseconds(invisible_ms)
    sp.delivery_attempt = attempt
    if TRACE_CONTEXT in props:
        sp.trace_context = props[TRACE_CONTEXT]
    return out


def orphan_from_store(sm: StoredMessage) -> pb.Message:
    """A pending transaction's half (or its check copy) as a 5.x producer's checker sees it:
    in its real topic, typed TRANSACTION."""
    out = from_store(sm, receipt_handle="", attempt=1, invisible_ms=0)
    out.topic.name = sm.properties.get(REAL_TOPIC, sm.topic)
    sp = out.system_properties
    sp.message_type = pb.TRANSACTION
    for field in ("receipt_handle", "invisible_duration", "delivery_attempt"):
        sp.ClearField(field)
    return out


def _host(raw: bytes) -> str:
    try:
        host, port = unpack_host(raw)
    except ValueError:
        return ""
    return f"{host}:{port}"
