"""A `Message` encoded once into its commit-log entry (RocketMQ 4.x, magic V1).

The layout is in `core.store.message`'s docstring; the format's constants
and the properties text are in `core.store.message_format`. Encoding the
variable part (body, topic, properties) and the body CRC is the expensive
step of an append; it happens here, outside the append lock, and the store
then stamps the offsets and store time in place (`EncodedMessage.stamp`).

Invariants kept here:
- ``TOTALSIZE == entry_length(sysflag, len(body), len(topic), len(props))``
  for every entry written (`core.store.commitlog.check_entry` and
  `core.store.message.decode_message` reject any entry where it is not).
- Properties text is ``k\\x01v`` items joined by ``\\x02`` with no trailing
  separator, in the properties' insertion order.
- A multi-dispatch list longer than ``MULTI_DISPATCH_INLINE_BYTES`` keeps
  that much in the entry; the rest goes into reference records
  (``DISPATCH_REF_TOPIC``) that travel with it (``dispatch_refs``).
- A BLANK filler is ``[int32 remaining][int32 BLANK_MAGIC]``; it is never a
  message.
- Compiled (encoder.pxd), the usual entry is written in C; the pure-Python
  path writes the same bytes and fields for every message.
- Nothing here does I/O: functions take and return bytes.
"""

from __future__ import annotations

import struct
import zlib

try:
    import cython
except ImportError:  # a pure-Python install: nothing here is compiled
    from . import _cython_shadow as cython

from .message import Message
from .message_format import (
    BLANK_MAGIC, BORNHOST_V6_FLAG, DISPATCH_REF_TOPIC, MAGIC_V1, MAX_PROPERTIES_BYTES, MAX_TOPIC_BYTES,
    MULTI_DISPATCH_INLINE_BYTES, MULTI_DISPATCH_REF_BYTES, NAME_VALUE_SEPARATOR, PROPERTY_INNER_DISPATCH_REF,
    PROPERTY_INNER_MULTI_DISPATCH, PROPERTY_KEYS, PROPERTY_SEPARATOR, PROPERTY_TAGS, PROPERTY_UNIQ_KEY,
    QUEUEID_POS, QUEUEOFFSET_POS, STOREHOST_V6_FLAG, TIMER_TOPIC, body_crc, cached_tags_code, encode_properties,
    entry_length, multi_dispatch_queues, queue_tags_code,
)

_SHORT = struct.Struct(">h")
_BLANK = struct.Struct(">ii")
BLANK_SIZE = _BLANK.size

_crc32 = zlib.crc32  # a module global: no attribute lookup per message
_MAX_INLINE_PROPERTIES = 64  # compiled, `_encode_common` keeps this many properties' text at hand (encoder.pxd)
# the names `_encode_common` compares as C literals, while they are these
_LITERALS_HOLD = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_INNER_MULTI_DISPATCH, DISPATCH_REF_TOPIC,
                  TIMER_TOPIC) == ("TAGS", "KEYS", "UNIQ_KEY", "INNER_MULTI_DISPATCH", "%MQGATE%DISPATCH",
                                   "rmq_sys_wheel_timer")


@cython.no_gc  # its fields hold strings, bytes and tuples of these: no cycle to find
@cython.freelist(64)
@cython.cclass
class EncodedMessage:
    """A message encoded once, with offsets and store time patched at append.

    Encoding the variable part (body, topic, properties) and the CRC is the
    expensive step; it happens outside the append lock. `stamp` then writes
    QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP in place.

    Compiled (encoder.pxd), the usual entry is written by `_encode_common`
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
        encoder.pxd, message.pxd and _bigendian.pxd): a str topic, a bytes body, str properties without an
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
