"""core/store: a RocketMQ 4.x-layout message store (commit log, consume queues,
index files, checkpoint, crash recovery).  No trio, no sockets: every call
is synchronous; the ones that block on the disk (`MessageStore.put`,
`wait_flushed`, `flush`, `start`, `shutdown`, `delete_expired`) are meant to
run in a worker thread (``trio.to_thread.run_sync``); `append` and the reads
are quick and may run on the event loop.

Use::

    store = MessageStore(StoreConfig(store_path_root_dir="data/store",
                                     flush_disk_type=FlushDiskType.SYNC_FLUSH))
    report = store.start()              # recovery; CorruptSegmentError if needed
    store.add_dispatch_listener(cb)     # cb(topic, queue_id, next_offset)
    r = store.append(Message(topic="T", body=b"x", queue_id=0,
                             properties={"TAGS": "a", "KEYS": "k1 k2"}))
    ok = store.wait_flushed(r.end_offset)   # SYNC_FLUSH: False -> FLUSH_DISK_TIMEOUT
    got = store.get_messages("T", 0, 0, 32, tag_codes={tags_code("a")})
    store.flush()                       # periodically: log, queues, index, checkpoint
    store.shutdown()

On-disk layout under ``storePathRootDir``: ``commitlog/<20-digit offset>``,
``consumequeue/<topic dir>/<queue id>/<20-digit byte offset>`` (topic dir:
see `core.store.names`), ``index/<yyyyMMddHHmmssSSS>``, ``checkpoint``,
``abort``, ``lock``.

Multi-dispatch: a message with property ``INNER_MULTI_DISPATCH=a,b`` also
gets a unit in consume queue ("a", 0) and ("b", 0) (session queues).
``delete_queue`` drops one.  The topic `DELETE_QUEUE_TOPIC` is reserved.

Errors: puts answer a `PutStatus`, reads a `GetMessageStatus`; the only
exceptions are the `StoreError` subclasses (see `core.store.errors`) and the
operating system's ``OSError``.
"""

from .config import CQ_UNIT_SIZE, FlushDiskType, StoreConfig
from .errors import (
    CorruptSegmentError,
    GetMessageStatus,
    PutStatus,
    StoreClosedError,
    StoreConfigError,
    StoreError,
    StoreLockedError,
)
from .message import (
    PROPERTY_INNER_MULTI_DISPATCH,
    EncodedMessage,
    Message,
    MessageFormatError,
    StoredMessage,
    decode_message,
    decode_messages,
    encode_message,
    java_string_hash,
    offset_msg_id,
    pack_host,
    parse_offset_msg_id,
    tags_code,
)
from .names import dir_name
from .results import GetResult, PutResult, QueryResult, RecoveryReport
from .store import DELETE_QUEUE_TOPIC, MessageStore

__all__ = [
    "CQ_UNIT_SIZE",
    "DELETE_QUEUE_TOPIC",
    "PROPERTY_INNER_MULTI_DISPATCH",
    "CorruptSegmentError",
    "EncodedMessage",
    "FlushDiskType",
    "GetMessageStatus",
    "GetResult",
    "Message",
    "MessageFormatError",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "QueryResult",
    "RecoveryReport",
    "StoreClosedError",
    "StoreConfig",
    "StoreConfigError",
    "StoreError",
    "StoreLockedError",
    "StoredMessage",
    "decode_message",
    "decode_messages",
    "dir_name",
    "encode_message",
    "java_string_hash",
    "offset_msg_id",
    "pack_host",
    "parse_offset_msg_id",
    "tags_code",
]
