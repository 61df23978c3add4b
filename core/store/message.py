"""One commit-log entry in RocketMQ 4.x message layout (magic V1).

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
  for every entry we write, and `check_entry` rejects any entry where it is
  not (that is how a torn or corrupt entry is told from a good one).
- Properties text is ``k\\x01v`` items joined by ``\\x02`` with no trailing
  separator; parsing accepts only items of >= 3 characters whose ``\\x01`` is
  neither first nor last, like ``MessageDecoder.string2messageProperties``.
- A BLANK filler is ``[int32 remaining][int32 BLANK_MAGIC]``; it is never a
  message and readers move to the next segment when they meet it.
- Nothing here does I/O: functions take and return bytes.
"""

from __future__ import annotations

import struct
import zlib
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
_BLANK = struct.Struct(">ii")
BLANK_SIZE = _BLANK.size


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


_crc32 = zlib.crc32  # a module global: no attribute lookup per message
_MAX_INLINE_PROPERTIES = 64  # compiled, `_encode_common` keeps this many properties' text at hand (message.pxd)
# the names `_encode_common` compares as C literals, while they are these
_LITERALS_HOLD = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_INNER_MULTI_DISPATCH, DISPATCH_REF_TOPIC,
                  TIMER_TOPIC) == ("TAGS", "KEYS", "UNIQ_KEY", "INNER_MULTI_DISPATCH", "%MQGATE%DISPATCH",
                                   "rmq_sys_wheel_timer")

if cython.compiled:  # where `_encode_common` finds a Message's fields (message.pxd)
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


@cython.no_gc  # its fields hold strings, bytes and tuples of these: no cycle to find
@cython.freelist(64)
@cython.cclass
class EncodedMessage:
    """A message encoded once, with offsets and store time patched at append.

    Encoding the variable part (body, topic, properties) and the CRC is the
    expensive step; it happens outside the append lock. `stamp` then writes
    QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP in place.

    Compiled (message.pxd), the usual entry is written by `_encode_common`
    straight into its one buffer; anything else, and every error, goes
    through `_encode`, the same code the pure-Python build runs for all.
    Both write the same bytes and fields (tests/core/store/test_encoding.py).
    """

    __slots__ = ("buf", "size", "topic", "queue_id", "tags_code", "keys", "uniq_key", "sysflag", "multi_dispatch",
                 "store_ts_pos", "dispatch_refs")

    def __init__(self, msg: Message):
        if cython.compiled:
            if self._encode_common(msg):
                return
        self._encode(msg)

    def _encode_common(self, msg: Message) -> bool:
        """The usual entry in C (compiled only; the C names come from
        message.pxd and _bigendian.pxd): a str topic, a bytes body, str properties without an
        overflowing multi-dispatch list, IPv4 hosts, numbers of exact type
        int in their Java types' ranges. One buffer of the entry's size,
        written in place, the body copied once. False, with no field set,
        for anything else, errors included: `_encode` then decides."""
        if type(msg) is Message and _AT_PREPARED:  # the fields where they sit (message.pxd): no getattr
            topic = _slot(msg, _AT_TOPIC, "topic")
            body = _slot(msg, _AT_BODY, "body")
            props_obj = _slot(msg, _AT_PROPERTIES, "properties")
            born_host = _slot(msg, _AT_BORN_HOST, "born_host")
            store_host = _slot(msg, _AT_STORE_HOST, "store_host")
            queue_id = _slot(msg, _AT_QUEUE_ID, "queue_id")
            flag_obj = _slot(msg, _AT_FLAG, "flag")
            sysflag_obj = _slot(msg, _AT_SYSFLAG, "sysflag")
            born_obj = _slot(msg, _AT_BORN_TS, "born_timestamp")
            reconsume_obj = _slot(msg, _AT_RECONSUME, "reconsume_times")
            prepared_obj = _slot(msg, _AT_PREPARED, "prepared_transaction_offset")
        else:
            topic = msg.topic
            body = msg.body
            props_obj = msg.properties
            born_host = msg.born_host
            store_host = msg.store_host
            queue_id = msg.queue_id
            flag_obj = msg.flag
            sysflag_obj = msg.sysflag
            born_obj = msg.born_timestamp
            reconsume_obj = msg.reconsume_times
            prepared_obj = msg.prepared_transaction_offset
        if (not _LITERALS_HOLD or type(topic) is not str or type(body) is not bytes or type(props_obj) is not dict
                or type(born_host) is not bytes or type(store_host) is not bytes
                or len(born_host) != 8 or len(store_host) != 8
                or type(queue_id) is not int or type(flag_obj) is not int or type(sysflag_obj) is not int
                or type(born_obj) is not int or type(reconsume_obj) is not int or type(prepared_obj) is not int):
            return False
        props = cython.cast(dict, props_obj)
        # one pass over the properties: their types, their UTF-8 text (kept in `texts`/`lens` for
        # the copy below) and the four the entry's fields read (found by their bytes, as `get`
        # finds them by equality); more than _MAX_INLINE_PROPERTIES go through `_encode`
        tags = keys = uniq_key = dispatch = None
        try:
            qid = queue_id
            flag = flag_obj
            sysflag = sysflag_obj
            born_ts = born_obj
            reconsume = reconsume_obj
            prepared = prepared_obj
            topic_p = PyUnicode_AsUTF8AndSize(topic, cython.address(topic_len))
            props_len = 0
            k = 0
            for name, value in props.items():
                if type(name) is not str or type(value) is not str or k == 2 * _MAX_INLINE_PROPERTIES:
                    return False
                text_p = PyUnicode_AsUTF8AndSize(name, cython.address(n))
                texts[k] = text_p
                lens[k] = n
                props_len += n
                if n == 4:
                    if _same(text_p, b"TAGS", 4):
                        tags = value
                    elif _same(text_p, b"KEYS", 4):
                        keys = value
                elif n == 8 and _same(text_p, b"UNIQ_KEY", 8):
                    uniq_key = value
                elif n == 20 and _same(text_p, b"INNER_MULTI_DISPATCH", 20):
                    dispatch = value
                texts[k + 1] = PyUnicode_AsUTF8AndSize(value, cython.address(n))
                lens[k + 1] = n
                props_len += n + 2
                k += 2
        except (OverflowError, UnicodeEncodeError):
            return False
        if props_len:
            props_len -= 1  # no separator after the last item
        if (not 0 < topic_len <= MAX_TOPIC_BYTES or props_len > MAX_PROPERTIES_BYTES
                or not 0 <= qid <= 0x7FFFFFFF or not -0x80000000 <= flag <= 0x7FFFFFFF
                or not -0x80000000 <= sysflag <= 0x7FFFFFFF or not -0x80000000 <= reconsume <= 0x7FFFFFFF
                or (dispatch is not None and len(dispatch) > MULTI_DISPATCH_INLINE_BYTES)
                or (topic_len == 16 and _same(topic_p, b"%MQGATE%DISPATCH", 16))  # DISPATCH_REF_TOPIC
                or (topic_len == 19 and _same(topic_p, b"rmq_sys_wheel_timer", 19))):  # TIMER_TOPIC
            return False
        sysflag &= ~0x30  # BORNHOST_V6_FLAG | STOREHOST_V6_FLAG (a literal: C arithmetic)
        body_len = len(body)
        size = 91 + body_len + topic_len + props_len
        if size > 0x7FFFFFFF:
            return False
        crc = _crc32(body)
        buf = PyByteArray_FromStringAndSize(cython.NULL, size)
        p = cython.cast(cython.p_uchar, PyByteArray_AS_STRING(buf))
        put_int32(p, size)
        put_int32(p + 4, MAGIC_V1)
        put_int32(p + 8, crc & 0x7FFFFFFF)
        put_int32(p + 12, qid)
        put_int32(p + 16, flag)
        memset(p + 20, 0, 16)  # QUEUEOFFSET, PHYSICALOFFSET: stamped at append
        put_int32(p + 36, sysflag)
        put_int64(p + 40, born_ts)
        memcpy(p + 48, PyBytes_AS_STRING(born_host), 8)
        memset(p + 56, 0, 8)  # STORETIMESTAMP: stamped at append
        memcpy(p + 64, PyBytes_AS_STRING(store_host), 8)
        put_int32(p + 72, reconsume)
        put_int64(p + 76, prepared)
        put_int32(p + 84, body_len)
        memcpy(p + 88, PyBytes_AS_STRING(body), body_len)
        p += 88 + body_len
        p[0] = topic_len
        memcpy(p + 1, topic_p, topic_len)
        p += 1 + topic_len
        p[0] = props_len >> 8
        p[1] = props_len & 0xFF
        p += 2
        for i in range(0, k, 2):  # the text, as `_encode` joins it
            if i:
                p[0] = 2  # PROPERTY_SEPARATOR
                p += 1
            n = lens[i]
            memcpy(p, texts[i], n)
            p[n] = 1  # NAME_VALUE_SEPARATOR
            p += n + 1
            n = lens[i + 1]
            memcpy(p, texts[i + 1], n)
            p += n
        self.buf = buf
        self.size = size
        self.topic = topic
        self.queue_id = queue_id
        self.sysflag = sysflag
        self.store_ts_pos = 56
        self.dispatch_refs = ()
        if not tags:
            self.tags_code = 0
        elif not _java_hash_ucs2(tags, cython.address(tags_hash)):  # text past the BMP: by the Python function
            self.tags_code = cached_tags_code(tags)
        else:
            self.tags_code = tags_hash
        self.keys = keys.split() if keys else []
        self.uniq_key = uniq_key
        self.multi_dispatch = multi_dispatch_queues(props) if dispatch is not None else ()
        return True

    def _encode(self, msg: Message) -> None:
        """Any message, field by field (every message in the pure-Python build)."""
        topic = msg.topic
        topic_b = topic.encode()
        topic_len = len(topic_b)
        if not 0 < topic_len <= MAX_TOPIC_BYTES:
            raise ValueError(f"topic must be 1..{MAX_TOPIC_BYTES} bytes: {topic!r}")
        props = msg.properties
        self.dispatch_refs = ()
        overflow = None
        if (props and topic != DISPATCH_REF_TOPIC
                and len(props.get(PROPERTY_INNER_MULTI_DISPATCH, "")) > MULTI_DISPATCH_INLINE_BYTES):
            props, all_names, overflow = _split_dispatch(msg)
        if props:
            parts = []  # one join of every piece: compiled, 2.6x faster than joining joins
            for name, value in props.items():
                parts.append(name)
                parts.append(_NAME_SEP)
                parts.append(value)
                parts.append(_PROP_SEP)
            parts.pop()
            try:  # every value a str (the usual case)
                text = _EMPTY_STR.join(parts)
            except TypeError:  # None values (skipped) or non-str values
                text = encode_properties(props)
            props_b = text.encode()
            props_len = len(props_b)
            if props_len > MAX_PROPERTIES_BYTES:
                raise ValueError(f"properties are {props_len} bytes, more than {MAX_PROPERTIES_BYTES}")
        else:
            props_b = b""
            props_len = 0
        body = msg.body
        body_len = len(body)
        born_host = msg.born_host
        store_host = msg.store_host
        queue_id = msg.queue_id
        sysflag = msg.sysflag & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)
        if not 0 <= queue_id <= 0x7FFFFFFF:
            raise ValueError(f"queue id {queue_id} is not 0..2**31-1")
        try:
            if len(born_host) == 8 and len(store_host) == 8:
                # the common case in one pack: TOTALSIZE .. BODY length
                size = 91 + body_len + topic_len + props_len
                head = _HEAD_V4_HOSTS.pack(
                    size, MAGIC_V1, zlib.crc32(body) & 0x7FFFFFFF, queue_id, msg.flag, 0, 0, sysflag,
                    msg.born_timestamp, born_host, 0, store_host, msg.reconsume_times, msg.prepared_transaction_offset, body_len)
                self.store_ts_pos = 56
            else:
                if len(born_host) == 20:
                    sysflag |= BORNHOST_V6_FLAG
                if len(store_host) == 20:
                    sysflag |= STOREHOST_V6_FLAG
                size = entry_length(sysflag, body_len, topic_len, props_len)
                head = b"".join((
                    struct.pack(">iiiiiqqiq", size, MAGIC_V1, body_crc(body), queue_id, msg.flag, 0, 0, sysflag, msg.born_timestamp),
                    born_host, _LONG.pack(0), store_host,
                    struct.pack(">iqi", msg.reconsume_times, msg.prepared_transaction_offset, body_len)))
                self.store_ts_pos = 48 + len(born_host)
            buf = self.buf = _EMPTY.join((head, body, _TOPIC_LEN[topic_len], topic_b, _SHORT.pack(props_len), props_b))
        except (struct.error, TypeError) as e:  # a field out of its Java type's range, a body that is not bytes
            raise ValueError(f"message field out of range or of the wrong type: {e}") from None
        if len(buf) != size:
            raise ValueError("host addresses must be 8 or 20 bytes (pack_host)")
        self.size = size
        self.topic = topic
        self.queue_id = queue_id
        self.sysflag = sysflag
        if props:
            if topic == TIMER_TOPIC:
                self.tags_code = queue_tags_code(topic, props)
            else:
                tags = props.get(PROPERTY_TAGS)
                self.tags_code = cached_tags_code(tags) if tags else 0
            keys = props.get(PROPERTY_KEYS)
            self.keys = keys.split() if keys else []
            self.uniq_key = props.get(PROPERTY_UNIQ_KEY)
            self.multi_dispatch = multi_dispatch_queues(props) if PROPERTY_INNER_MULTI_DISPATCH in props else ()
            if overflow:
                self.multi_dispatch = all_names
                self.dispatch_refs = _dispatch_refs(msg, overflow, size, self.tags_code)
        else:
            self.tags_code = 0
            self.keys = []
            self.uniq_key = None
            self.multi_dispatch = ()

    @property
    def store_host(self) -> bytes:
        """The packed STOREHOST field (what offset message ids are made of)."""
        start = 48 + (20 if self.sysflag & BORNHOST_V6_FLAG else 8) + 8
        return bytes(self.buf[start : start + (20 if self.sysflag & STOREHOST_V6_FLAG else 8)])

    def stamp(self, queue_offset: int, physical_offset: int, store_timestamp: int, queue_id: int | None = None) -> bytearray:
        buf = self.buf
        if queue_id is not None:
            struct.pack_into(">i", buf, QUEUEID_POS, queue_id)
            self.queue_id = queue_id
        _QQ.pack_into(buf, QUEUEOFFSET_POS, queue_offset, physical_offset)
        _LONG.pack_into(buf, self.store_ts_pos, store_timestamp)
        return buf

    def point_at(self, physical_offset: int) -> None:
        """A reference record: write the physical offset of the entry it serves
        (its 20 fixed-width digits; the record's CRC covers only the empty body)."""
        i = self.buf.find(_REF_MARK) + len(_REF_MARK)
        self.buf[i:i + 20] = b"%020d" % physical_offset


def _split_dispatch(msg: Message) -> tuple[dict[str, str], tuple[str, ...], list[list[str]]]:
    """Split a long ``INNER_MULTI_DISPATCH``: (the properties the entry keeps,
    every queue name, the chunks of names for reference records)."""
    names = multi_dispatch_queues(msg.properties)
    chunks: list[list[str]] = [[]]
    used = 0
    budget = MULTI_DISPATCH_INLINE_BYTES
    for name in names:
        n = len(name.encode()) + 1
        if used + n > budget and chunks[-1]:
            chunks.append([])
            used = 0
            budget = MULTI_DISPATCH_REF_BYTES
        chunks[-1].append(name)
        used += n
    props = dict(msg.properties)
    props[PROPERTY_INNER_MULTI_DISPATCH] = ",".join(chunks[0])
    return props, names, chunks[1:]


def _dispatch_refs(msg: Message, chunks: list[list[str]], size: int, tags: int) -> tuple["EncodedMessage", ...]:
    return tuple(
        EncodedMessage(Message(DISPATCH_REF_TOPIC, b"", properties={
            PROPERTY_INNER_DISPATCH_REF: "%020d,%d,%d" % (0, size, tags),  # offset set by point_at
            PROPERTY_INNER_MULTI_DISPATCH: ",".join(chunk)},
            born_timestamp=msg.born_timestamp, born_host=msg.born_host, store_host=msg.store_host))
        for chunk in chunks)


_HEAD_V4_HOSTS = struct.Struct(">iiiiiqqiq8sq8siqi")
_PROP_SEP = PROPERTY_SEPARATOR
_NAME_SEP = NAME_VALUE_SEPARATOR
_LONG = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_EMPTY = bytearray()
_EMPTY_STR = ""
_TOPIC_LEN = [bytes((n,)) for n in range(256)]
_REF_MARK = (PROPERTY_INNER_DISPATCH_REF + NAME_VALUE_SEPARATOR).encode()


def encode_message(msg: Message, queue_offset: int = 0, physical_offset: int = 0, store_timestamp: int = 0) -> bytes:
    """The stored bytes of one message (a convenience over `EncodedMessage`)."""
    return bytes(EncodedMessage(msg).stamp(queue_offset, physical_offset, store_timestamp))


def encode_blank(remaining: int) -> bytes:
    """End-of-segment filler: the rest of the segment is not a message."""
    return _BLANK.pack(remaining, BLANK_MAGIC)


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
