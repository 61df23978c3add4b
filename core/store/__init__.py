"""core/store: a RocketMQ 4.x-layout message store (commit log, consume queues,
index files, checkpoint, crash recovery).  No trio, no sockets: every call
is synchronous.  Calls that block on the disk (`MessageStore.put`,
`wait_flushed`, `flush`, `start`, `shutdown`, `delete_expired`,
`delete_queue`) belong in a worker thread (``trio.to_thread.run_sync``);
`append`, `append_batch` and the reads take a few microseconds and may run on
the event loop.  Every method is thread-safe.

The facade, `MessageStore(config: StoreConfig)`:

- ``start() -> RecoveryReport``; ``shutdown()`` (flush, checkpoint, remove
  ``abort``).  `StoreLockedError` if another process has the directory,
  `CorruptSegmentError` (``.path``, ``.offset``, ``.file_offset``,
  ``.reason``) if the log is corrupt before its tail and
  ``truncate_on_corruption`` is off.
- ``append(msg: Message | EncodedMessage) -> PutResult`` (no fsync);
  ``append_batch(msgs) -> PutResult`` (one lock, consecutive queue offsets,
  ``msg_ids`` list, ``msg_id`` comma-joined); ``put(msg or list) -> PutResult``
  (append, then the group commit when SYNC_FLUSH; FLUSH_DISK_TIMEOUT after
  syncFlushTimeout).  PutResult: ``status`` (`PutStatus`), ``physical_offset``,
  ``queue_offset``, ``wrote_bytes``, ``store_timestamp``, ``queue_id``,
  ``msg_num``, ``end_offset`` (pass to ``wait_flushed``), ``msg_id``, ``msg_ids``,
  ``ok``. ``append_many(encoded) -> (status, rows, store_timestamp)``:
  independent encoded messages under one lock, a ``(physical_offset,
  queue_offset)`` row each, None for one the store refuses.
- ``wait_flushed(offset, timeout_s=None) -> bool`` (group commit, shared
  fsync); ``flush_log() -> flushed_offset`` (the log alone: what a SYNC_FLUSH
  ack needs); ``flush() -> flushed_offset`` (log, then queues, index,
  checkpoint: the broker calls it every flushIntervalConsumeQueue ms in
  either flush mode, and ``flush_log`` every flushIntervalCommitLog ms in
  between in ASYNC_FLUSH).
- ``add_dispatch_listener(cb)`` / ``remove_dispatch_listener(cb)``:
  ``cb(topic, queue_id, next_queue_offset)`` once per queue an append call
  wrote to (multi-dispatch queues included), with its newest offset, on the
  appending thread, after the store lock is released.
- ``get_messages(topic, queue_id, offset, max_count=32, tag_codes=None,
  max_bytes=256 KiB) -> GetResult``: ``status`` (`GetMessageStatus`),
  ``messages`` (raw entries = pull body items), ``queue_offsets``,
  ``next_begin_offset``, ``min_offset``, ``max_offset``, ``body``.
- ``min_offset(topic, qid)``, ``max_offset(topic, qid)`` (next to assign),
  ``offset_by_time(topic, qid, ts_ms)``, ``earliest_store_time(topic=None,
  qid=0)``, ``store_time(topic, qid, offset)``, ``read_at(physical_offset)``,
  ``read_by_msg_id(offset_msg_id)``, ``query_by_key(topic, key, max_num=32,
  begin_ts=0, end_ts=max) -> QueryResult``, ``topics()``, ``queue_ids(topic)``,
  ``min_phy_offset``, ``max_phy_offset``, ``flushed_offset``.
- Replication (`core.store.replica`): ``read_log(offset, max_bytes)`` (a
  master's raw bytes, inside one segment), ``append_replica(offset, data)``
  (a slave writes them at its log's end and dispatches complete entries;
  `ReplicaError` otherwise), ``dispatched_offset``; ``truncate_log(root,
  segment_size, offset)`` cuts a stopped store (a deposed master rejoining).
- ``delete_queue(topic, queue_id)`` (an ended session's queue);
  ``delete_expired(now_ms=None) -> [deleted segment paths]``.

On-disk layout under ``storePathRootDir``: ``commitlog/<20-digit offset>``,
``consumequeue/<topic dir>/<queue id>/<20-digit byte offset>`` (topic dir:
`dir_name`, see `core.store.names`), ``index/<yyyyMMddHHmmssSSS>``,
``checkpoint``, ``abort``, ``lock``.

Multi-dispatch: a message with property ``INNER_MULTI_DISPATCH=a,b`` also
gets a unit in consume queue ("a", 0) and ("b", 0) (session queues), pointing
at the same entry.  The topic `DELETE_QUEUE_TOPIC` is reserved for the
markers ``delete_queue`` writes; `append` refuses it.

Errors: puts answer a `PutStatus`, reads a `GetMessageStatus`; the only
exceptions are the `StoreError` subclasses (see `core.store.errors`) and the
operating system's ``OSError``.
"""

from .config import CQ_UNIT_SIZE, FlushDiskType, StoreConfig
from .errors import (
    CorruptSegmentError,
    GetMessageStatus,
    PutStatus,
    ReplicaError,
    StoreClosedError,
    StoreConfigError,
    StoreError,
    StoreLockedError,
)
from .message import (
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_MQTT_TOPIC,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_OUT_MS,
    Message,
    MessageFormatError,
    StoredMessage,
    decode_message,
    encode_properties,
    decode_messages,
    entry_properties,
    new_message,
    offset_msg_id,
    pack_host,
    parse_offset_msg_id,
    roomy_properties,
    tags_code,
)
from .encoder import EncodedMessage, encode_message
from .java_hash import java_string_hash
from .latency import LatencyHistogram
from .names import dir_name
from .replica import truncate_log
from .results import GetResult, PutResult, QueryResult, RecoveryReport
from .store import DELETE_QUEUE_TOPIC, MessageStore
from .timer_wheel import MAX_DELAY_FIELD_MS, PRECISIONS_MS, ROLL_WINDOW_MARGIN_SLOTS

__all__ = [
    "CQ_UNIT_SIZE",
    "LatencyHistogram",
    "DELETE_QUEUE_TOPIC",
    "MAX_DELAY_FIELD_MS",
    "PRECISIONS_MS",
    "PROPERTY_INNER_MULTI_DISPATCH",
    "PROPERTY_MQTT_TOPIC",
    "PROPERTY_REAL_TOPIC",
    "PROPERTY_TIMER_OUT_MS",
    "ROLL_WINDOW_MARGIN_SLOTS",
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
    "ReplicaError",
    "StoreClosedError",
    "StoreConfig",
    "StoreConfigError",
    "StoreError",
    "StoreLockedError",
    "StoredMessage",
    "decode_message",
    "encode_properties",
    "decode_messages",
    "dir_name",
    "encode_message",
    "entry_properties",
    "java_string_hash",
    "new_message",
    "offset_msg_id",
    "pack_host",
    "parse_offset_msg_id",
    "roomy_properties",
    "tags_code",
    "truncate_log",
]
