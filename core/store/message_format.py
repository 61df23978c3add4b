"""The commit-log entry's format: its constants, property names, the
properties text, tags codes, the multi-dispatch properties, hosts and offset
message ids (RocketMQ 4.x, magic V1). `core.store.encoder` encodes and `core.store.message`
decodes whole entries with these; the latter's docstring has the layout.

Invariants kept here:
- Properties text is ``k\\x01v`` items joined by ``\\x02`` with no trailing
  separator; parsing accepts only items of >= 3 characters whose ``\\x01`` is
  neither first nor last, like ``MessageDecoder.string2messageProperties``.
- ``entry_length`` is ``CommitLog.calMsgLength`` for magic V1.
- Nothing here does I/O.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib

from .java_hash import java_string_hash

MAGIC_V1 = -626843481  # 0xDAA320A7 as a Java int
MAGIC_V2 = -626843477  # 0xDAA320AB, RocketMQ 5.x long topics; never written here
BLANK_MAGIC = -875286124  # 0xCBD43194

# SYSFLAG bits (MessageSysFlag)
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20

# Offsets of fixed fields (valid whatever the host sizes, up to BORNHOST)
TOTALSIZE_POS = 0
MAGIC_POS = 4
BODYCRC_POS = 8
QUEUEID_POS = 12
FLAG_POS = 16
QUEUEOFFSET_POS = 20
PHYSICALOFFSET_POS = 28
SYSFLAG_POS = 36
BORNTIMESTAMP_POS = 40
BORNHOST_POS = 48

MAX_PROPERTIES_BYTES = 32767
MAX_TOPIC_BYTES = 127

PROPERTY_SEPARATOR = "\x02"
NAME_VALUE_SEPARATOR = "\x01"

# Well-known property keys (reference section 4.9)
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_PGROUP = "PGROUP"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_MQTT_TOPIC = "mqttTopic"  # ours: the full MQTT topic of a message
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"  # comma-separated extra queues (LMQ)
PROPERTY_INNER_DISPATCH_REF = "INNER_DISPATCH_REF"  # ours: "phys,size,tags" of the entry a reference record serves

# A multi-dispatch list longer than MULTI_DISPATCH_INLINE_BYTES (the property
# block of an entry holds at most 32767 bytes) keeps that much in the entry;
# the rest goes into reference records in DISPATCH_REF_TOPIC written right
# after it, each listing up to MULTI_DISPATCH_REF_BYTES of names and the
# entry's offset, size and tags code. Their units point at the entry.
DISPATCH_REF_TOPIC = "%MQGATE%DISPATCH"
MULTI_DISPATCH_INLINE_BYTES = 16 * 1024
MULTI_DISPATCH_REF_BYTES = 30 * 1024
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"

_PORT = struct.Struct(">i")


class MessageFormatError(ValueError):
    """Bytes that are not a valid entry; ``offset`` is the position in the buffer."""

    def __init__(self, reason: str, offset: int):
        super().__init__(f"{reason} at offset {offset}")
        self.reason = reason
        self.offset = offset


TIMER_TOPIC = "rmq_sys_wheel_timer"  # RocketMQ 5's timer topic (core.timers parks messages there)
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
# what asks for a timer, in the order that decides when several are set (core.timers)
TIMER_TRIGGERS = ("TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELIVER_MS", "__STARTDELIVERTIME")


def queue_tags_code(topic: str, props: dict[str, str]) -> int:
    """The tags code of an entry's consume-queue unit.

    Normally the hash of ``TAGS`` (what tag filters compare). An entry parked
    in the timer topic carries its delivery time (``TIMER_OUT_MS``) instead,
    the way RocketMQ's schedule topic carries the delivery timestamp, so the
    timer service files it from the 20-byte unit without reading the log.
    The rule depends only on the entry, so a replay makes the same units.
    """
    if topic == TIMER_TOPIC:
        try:
            return int(props.get(PROPERTY_TIMER_OUT_MS, 0))
        except ValueError:
            return 0
    return tags_code(props.get(PROPERTY_TAGS))


def tags_code(tags: str | None) -> int:
    """Consume-queue tag hash: 0 for no tags (recent tags are cached: few distinct tags, many messages)."""
    return cached_tags_code(tags) if tags else 0


@functools.lru_cache(maxsize=4096)
def cached_tags_code(tags: str) -> int:
    return java_string_hash(tags)


def body_crc(body: bytes) -> int:
    """``UtilAll.crc32``: CRC32 masked to a non-negative Java int."""
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_properties(props: dict[str, str]) -> str:
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None
    )


def decode_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    if not text:
        return props
    for item in text.split(PROPERTY_SEPARATOR):
        i = item.find(NAME_VALUE_SEPARATOR)
        if len(item) >= 3 and 0 < i < len(item) - 1:
            props[item[:i]] = item[i + 1 :]
    return props


def multi_dispatch_queues(properties: dict[str, str]) -> tuple[str, ...]:
    """The extra queue names of ``INNER_MULTI_DISPATCH`` (each gets a unit in
    consume queue (name, 0)); empty names are ignored, duplicates kept once."""
    text = properties.get(PROPERTY_INNER_MULTI_DISPATCH)
    if not text:
        return ()
    return tuple(dict.fromkeys(n for n in text.split(",") if n))


def parse_dispatch_ref(properties: dict[str, str]) -> tuple[int, int, int] | None:
    """(physical offset, size, tags code) a reference record points at, or None."""
    value = properties.get(PROPERTY_INNER_DISPATCH_REF)
    if not value:
        return None
    try:
        phys, size, tags = (int(v) for v in value.split(","))
    except ValueError:
        return None
    return phys, size, tags


def entry_length(sysflag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """``CommitLog.calMsgLength`` for magic V1."""
    born = 20 if sysflag & BORNHOST_V6_FLAG else 8
    store = 20 if sysflag & STOREHOST_V6_FLAG else 8
    return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8 + 4 + body_len + 1 + topic_len + 2 + props_len


def pack_host(host: str, port: int) -> bytes:
    """``ip:port`` as stored: 4 or 16 address bytes then an int32 port
    (``ValueError`` for a host that is not an IP address)."""
    return ipaddress.ip_address(host).packed + _PORT.pack(port)


def unpack_host(raw: bytes) -> tuple[str, int]:
    return str(ipaddress.ip_address(bytes(raw[:-4]))), _PORT.unpack(raw[-4:])[0]


def offset_msg_id(store_host: bytes, physical_offset: int) -> str:
    """Offset message id: store ip + port + physical offset, uppercase hex."""
    return (store_host + struct.pack(">q", physical_offset)).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[bytes, int]:
    """Inverse of `offset_msg_id`: (packed store host, physical offset)."""
    raw = bytes.fromhex(msg_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"not an offset message id: {msg_id!r}")
    return raw[:-8], struct.unpack(">q", raw[-8:])[0]
