"""The message a producer hands the store, and the decoding of stored
entries in RocketMQ 4.x message layout (magic V1); `core.store.encoder`
writes them.

The same bytes are a commit-log entry, a PULL / QUERY / VIEW response body
item, and what Spark decodes. Layout (big-endian, IPv4 hosts)::

    0  TOTALSIZE int32           56 STORETIMESTAMP int64
    4  MAGICCODE int32           64 STOREHOST 4 ip + int32 port
    8  BODYCRC int32 (& 0x7FFFFFFF)  72 RECONSUMETIMES int32
    12 QUEUEID int32             76 PREPAREDTRANSACTIONOFFSET int64
    16 FLAG int32                84 BODY int32 length + bytes
    20 QUEUEOFFSET int64         .. TOPIC int8 length + bytes
    28 PHYSICALOFFSET int64      .. PROPERTIES int16 length + UTF-8 text
    36 SYSFLAG int32
    40 BORNTIMESTAMP int64
    48 BORNHOST 4 ip + int32 port

An IPv6 born or store host takes 16 address bytes instead of 4 and sets
SYSFLAG bit 0x10 or 0x20; every later field moves by 12.

Invariants kept here:
- ``TOTALSIZE == entry_length(sysflag, len(body), len(topic), len(props))``
  for every entry the encoder writes, and `decode_message` (like the commit
  log's `check_entry`) rejects any entry where it is not (that is how a torn
  or corrupt entry is told from a good one).
- Properties text is ``k\\x01v`` items joined by ``\\x02`` with no trailing
  separator; parsing accepts only items of >= 3 characters whose ``\\x01`` is
  neither first nor last, like ``MessageDecoder.string2messageProperties``.
- A BLANK filler is ``[int32 remaining][int32 BLANK_MAGIC]``; it is never a
  message and readers move to the next segment when they meet it.
- Compiled (message.pxd), `new_message` fills a Message's slots in C; the
  slots' offsets are also where the encoder reads a Message's fields.
- Nothing here does I/O: functions take and return bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field


try:
    import cython
except ImportError:  # a pure-Python install: nothing here is compiled
    from . import _cython_shadow as cython

from .message_format import (  # noqa: F401 - re-exported: the format is read through this module too
    MAGIC_V1, MAGIC_V2, BLANK_MAGIC, COMPRESSED_FLAG, MULTI_TAGS_FLAG, TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_MASK,
    BORNHOST_V6_FLAG, STOREHOST_V6_FLAG, TOTALSIZE_POS, MAGIC_POS, BODYCRC_POS, QUEUEID_POS, FLAG_POS,
    QUEUEOFFSET_POS, PHYSICALOFFSET_POS, SYSFLAG_POS, BORNTIMESTAMP_POS, BORNHOST_POS, MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES, PROPERTY_SEPARATOR, NAME_VALUE_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_WAIT,
    PROPERTY_DELAY, PROPERTY_UNIQ_KEY, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID, PROPERTY_TRAN_MSG,
    PROPERTY_PGROUP, PROPERTY_CLUSTER, PROPERTY_RETRY_TOPIC, PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_MAX_RECONSUME_TIMES, PROPERTY_MQTT_TOPIC, PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_INNER_DISPATCH_REF, DISPATCH_REF_TOPIC, MULTI_DISPATCH_INLINE_BYTES, MULTI_DISPATCH_REF_BYTES,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET, MessageFormatError, TIMER_TOPIC, PROPERTY_TIMER_OUT_MS, TIMER_TRIGGERS,
    queue_tags_code, tags_code, cached_tags_code, body_crc, encode_properties, decode_properties, entry_length, pack_host,
    unpack_host, offset_msg_id, parse_offset_msg_id, multi_dispatch_queues, parse_dispatch_ref,
)

_HEAD_V4 = struct.Struct(">iiiiiqqiq4siq4siiqi")  # TOTALSIZE .. BODY length
_HEAD_BORN = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_HEAD_V4_HOSTS = struct.Struct(">iiiiiqqiq8sq8siqi")  # TOTALSIZE .. BODY length, IPv4 hosts (message_from_entry)


@dataclass(slots=True)
class Message:
    """What a producer hands the store; offsets and store time are stamped on append.

    ``born_host`` / ``store_host`` are packed with `pack_host`. ``properties``
    keeps insertion order, which is the order written to disk.
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    # The sender's own object for its put and stored hooks (the MQTT gateway
    # passes the PUBLISH it came from): never stored, compared or copied.
    note: object = field(default=None, compare=False, repr=False)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return self.properties.get(PROPERTY_KEYS, "").split()

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)


# where `new_message` puts a Message's fields, and the encoder's `_encode_common` finds them (message.pxd)
if cython.compiled:
    _AT_TOPIC = _slot_offset(Message, "topic")
    _AT_BODY = _slot_offset(Message, "body")
    _AT_QUEUE_ID = _slot_offset(Message, "queue_id")
    _AT_FLAG = _slot_offset(Message, "flag")
    _AT_PROPERTIES = _slot_offset(Message, "properties")
    _AT_SYSFLAG = _slot_offset(Message, "sysflag")
    _AT_BORN_TS = _slot_offset(Message, "born_timestamp")
    _AT_BORN_HOST = _slot_offset(Message, "born_host")
    _AT_STORE_HOST = _slot_offset(Message, "store_host")
    _AT_RECONSUME = _slot_offset(Message, "reconsume_times")
    _AT_PREPARED = (_slot_offset(Message, "prepared_transaction_offset")
                    if all((_AT_TOPIC, _AT_BODY, _AT_QUEUE_ID, _AT_FLAG, _AT_PROPERTIES, _AT_SYSFLAG, _AT_BORN_TS,
                            _AT_BORN_HOST, _AT_STORE_HOST, _AT_RECONSUME)) else 0)
    _AT_NOTE = _slot_offset(Message, "note")
    # `new_message` fills a Message's slots itself only while they are exactly these, with no
    # __post_init__ to run (else it calls the class, as the pure build does)
    _NEW_BY_SLOTS = (bool(_AT_PREPARED) and bool(_AT_NOTE) and not hasattr(Message, "__post_init__")
                     and getattr(Message, "__slots__", None) == (
                         "topic", "body", "queue_id", "flag", "properties", "sysflag", "born_timestamp", "born_host",
                         "store_host", "reconsume_times", "prepared_transaction_offset", "note"))

_DEFAULT_BORN_HOST = Message.__dataclass_fields__["born_host"].default
_DEFAULT_STORE_HOST = Message.__dataclass_fields__["store_host"].default


def new_message(topic: str, body: bytes, base_properties: dict, born_timestamp: int, note: object) -> Message:
    """``Message(topic, body, properties=base_properties.copy(), born_timestamp=born_timestamp,
    note=note)``, every other field at its default: how the MQTT gateway makes
    the message of each PUBLISH from the properties it keeps per topic.
    Compiled (message.pxd), the object is allocated and its twelve slots
    filled in C, not through the dataclass's Python ``__init__`` (~2k
    instructions; a dict's copy keeps its table: see `roomy_properties`)."""
    if cython.compiled:
        if _NEW_BY_SLOTS and type(base_properties) is dict:
            props = PyDict_Copy(base_properties)
            m = PyType_GenericAlloc(cython.cast(cython.pointer(PyTypeObject), Message), 0)
            _put_slot(m, _AT_TOPIC, topic)
            _put_slot(m, _AT_BODY, body)
            _put_slot(m, _AT_QUEUE_ID, 0)
            _put_slot(m, _AT_FLAG, 0)
            _put_slot(m, _AT_PROPERTIES, props)
            _put_slot(m, _AT_SYSFLAG, 0)
            _put_slot(m, _AT_BORN_TS, born_timestamp)
            _put_slot(m, _AT_BORN_HOST, _DEFAULT_BORN_HOST)
            _put_slot(m, _AT_STORE_HOST, _DEFAULT_STORE_HOST)
            _put_slot(m, _AT_RECONSUME, 0)
            _put_slot(m, _AT_PREPARED, 0)
            _put_slot(m, _AT_NOTE, note)
            return m
    props = base_properties.copy()
    return Message(topic, body, 0, 0, props, 0, born_timestamp, _DEFAULT_BORN_HOST, _DEFAULT_STORE_HOST, 0, 0, note)


# Names that hold a place in `roomy_properties`' table; never a real property (a \x01 in a name
# cannot be stored, so no message carries one).
_ROOM = ("\x01room-1", "\x01room-2")


def roomy_properties(items: dict) -> dict:
    """A dict equal to ``items``, in the same order, whose table has room for
    two more entries: the broker adds CLUSTER and UNIQ_KEY to every message
    it stamps, and a copy of a dict keeps its table (``dict.copy``), so the
    copies `new_message` makes of it do not grow (a resize, ~0.8k
    instructions per message) when they go in. How: made with two
    placeholders more, then those removed (a dict does not shrink on
    removal). Only the cost depends on this CPython behaviour, never the
    order or the content."""
    d = {}
    for name, value in items.items():  # one by one: a copy (dict(items)) would keep items' own table
        d[name] = value
    for name in _ROOM:
        d[name] = None
    for name in _ROOM:
        del d[name]
    return d


@dataclass(slots=True)
class StoredMessage:
    """A decoded entry (``MessageExt``)."""

    topic: str
    body: bytes
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sysflag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    properties: dict[str, str]
    size: int
    body_crc: int

    @property
    def msg_id(self) -> str:
        """The offset message id (what Java calls offsetMsgId)."""
        return offset_msg_id(self.store_host, self.physical_offset)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return self.properties.get(PROPERTY_KEYS, "").split()

    @property
    def transaction_type(self) -> int:
        return self.sysflag & TRANSACTION_MASK

    def to_message(self) -> Message:
        return Message(
            topic=self.topic, body=self.body, queue_id=self.queue_id, flag=self.flag,
            properties=dict(self.properties), sysflag=self.sysflag, born_timestamp=self.born_timestamp,
            born_host=self.born_host, store_host=self.store_host, reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
        )


def decode_message(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False) -> StoredMessage:
    """Decode the entry at ``pos``; raise `MessageFormatError` if it is not one."""
    view = memoryview(buf)
    end = len(view)
    if end - pos < _HEAD_BORN.size:
        raise MessageFormatError("truncated entry header", pos)
    size, magic, crc, queue_id, flag, qoff, poff, sysflag, born_ts = _HEAD_BORN.unpack_from(view, pos)
    if magic == BLANK_MAGIC:
        raise MessageFormatError("blank filler, not a message", pos)
    if magic != MAGIC_V1:
        raise MessageFormatError(f"bad magic 0x{magic & 0xFFFFFFFF:08X}", pos)
    if size < 0 or pos + size > end:
        raise MessageFormatError(f"entry size {size} runs past the end of the data", pos)
    try:
        p = pos + _HEAD_BORN.size
        born_len = 20 if sysflag & BORNHOST_V6_FLAG else 8
        born_host = bytes(view[p : p + born_len])
        p += born_len
        (store_ts,) = struct.unpack_from(">q", view, p)
        p += 8
        store_len = 20 if sysflag & STOREHOST_V6_FLAG else 8
        store_host = bytes(view[p : p + store_len])
        p += store_len
        reconsume, prepared, body_len = struct.unpack_from(">iqi", view, p)
        p += 16
        if body_len < 0 or p + body_len > pos + size:
            raise MessageFormatError(f"body length {body_len} does not fit the entry", pos)
        body = bytes(view[p : p + body_len])
        p += body_len
        topic_len = view[p]
        p += 1
        topic = bytes(view[p : p + topic_len]).decode()
        p += topic_len
        (props_len,) = _SHORT.unpack_from(view, p)
        p += 2
        if props_len < 0 or p + props_len > pos + size:
            raise MessageFormatError(f"properties length {props_len} does not fit the entry", pos)
        props = decode_properties(bytes(view[p : p + props_len]).decode())
        p += props_len
        if p - pos != size or entry_length(sysflag, body_len, topic_len, props_len) != size:
            raise MessageFormatError(f"total size {size} disagrees with the field lengths", pos)
    except (struct.error, IndexError) as e:  # a length that points past the data
        raise MessageFormatError(f"entry fields run past the end of the data ({e})", pos) from None
    except UnicodeDecodeError:
        raise MessageFormatError("topic or properties are not UTF-8", pos) from None
    if check_crc and body_crc(body) != crc:
        raise MessageFormatError("body CRC mismatch", pos)
    return StoredMessage(
        topic=topic, body=body, queue_id=queue_id, flag=flag, queue_offset=qoff, physical_offset=poff,
        sysflag=sysflag, born_timestamp=born_ts, born_host=born_host, store_timestamp=store_ts,
        store_host=store_host, reconsume_times=reconsume, prepared_transaction_offset=prepared,
        properties=props, size=size, body_crc=crc,
    )


def message_from_entry(raw: bytes) -> tuple[Message, int]:
    """The `Message` to store again from one whole entry (a fired timer):
    every field but the offsets, and the entry's store timestamp.
    The common entry (IPv4 hosts) in one unpack, without a `StoredMessage`;
    anything else through `decode_message` (which raises `MessageFormatError`)."""
    if len(raw) >= 91:
        (size, magic, _crc, queue_id, flag, _qoff, _poff, sysflag, born_ts, born_host, store_ts, store_host,
         reconsume, prepared, body_len) = _HEAD_V4_HOSTS.unpack_from(raw, 0)
        b = 88 + body_len
        if (magic == MAGIC_V1 and not sysflag & (BORNHOST_V6_FLAG | STOREHOST_V6_FLAG) and size == len(raw)
                and 0 <= body_len and b + 3 <= size):
            t = b + 1 + raw[b]
            if t + 2 <= size:
                props_end = t + 2 + ((raw[t] << 8) | raw[t + 1])
                if props_end == size:
                    try:
                        topic, props = raw[b + 1 : t].decode(), decode_properties(raw[t + 2 : props_end].decode())
                    except UnicodeDecodeError:
                        raise MessageFormatError("topic or properties are not UTF-8", 0) from None
                    return Message(topic, raw[88:b], queue_id, flag, props, sysflag, born_ts,
                                   born_host, store_host, reconsume, prepared), store_ts
    m = decode_message(raw)
    return m.to_message(), m.store_timestamp


def entry_properties(raw: bytes) -> dict[str, str]:
    """The properties of one whole entry, without decoding the rest (what a
    broker-side property filter reads); `MessageFormatError` if it is not one."""
    if len(raw) >= 91 and not raw[39] & (BORNHOST_V6_FLAG | STOREHOST_V6_FLAG):  # low byte of SYSFLAG
        b = 88 + int.from_bytes(raw[84:88], "big", signed=True)
        if 88 <= b and b + 3 <= len(raw):
            t = b + 1 + raw[b]
            if t + 2 <= len(raw):
                end = t + 2 + ((raw[t] << 8) | raw[t + 1])
                if end == len(raw):
                    return decode_properties(raw[t + 2:end].decode())
    return decode_message(raw).properties


def decode_messages(buf: bytes | bytearray | memoryview) -> list[StoredMessage]:
    """Decode concatenated entries (a PULL / QUERY response body)."""
    out = []
    pos = 0
    while pos < len(buf):
        m = decode_message(buf, pos)
        out.append(m)
        pos += m.size
    return out


def decode_segment(buf: bytes | bytearray | memoryview) -> list[StoredMessage]:
    """The entries of one commit-log segment file's bytes: up to its BLANK
    filler or the first unwritten (zero) header."""
    out = []
    pos = 0
    n = len(buf)
    while pos + 8 <= n:
        size, magic = struct.unpack_from(">ii", buf, pos)
        if size <= 0 or magic == BLANK_MAGIC:
            break
        m = decode_message(buf, pos)
        out.append(m)
        pos += m.size
    return out
