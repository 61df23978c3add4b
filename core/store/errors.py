"""The store's closed set of errors and statuses.

Two kinds of outcome, never mixed:

- A *put* never raises for a bad message or a slow disk: it answers a
  `PutStatus` whose names are RocketMQ's ``PutMessageStatus`` one for one, so
  the broker maps them to send statuses without a table of guesses.
- A *read* answers a `GetMessageStatus` (RocketMQ's ``GetMessageStatus``).
- Everything else that can go wrong is one of the `StoreError` subclasses
  below, and only those.  ``OSError`` from the operating system (disk gone,
  permission denied) is not wrapped: it propagates unchanged.

The closed list:

=========================  =====================================================
`CorruptSegmentError`      a bad entry with valid data after it, found during
                           recovery; carries ``path`` (the segment file) and
                           ``offset`` (absolute log offset; ``file_offset`` is
                           the position inside the file).  The store refuses to
                           start unless ``StoreConfig.truncate_on_corruption``.
`StoreConfigError`         a configuration the files on disk contradict (segment
                           size differs from the files) or an invalid value.
`StoreLockedError`         another process holds ``<root>/lock``.
`StoreClosedError`         a call before `start()` or after `shutdown()`.
`ReplicaError`             replicated bytes that cannot be taken: a chunk not at
                           the log's end, crossing a segment, or holding an
                           invalid entry (``offset`` says where; nothing past
                           it is kept).
=========================  =====================================================
"""

from __future__ import annotations

import enum


class StoreError(Exception):
    """Base of every error the store raises on its own account."""


class CorruptSegmentError(StoreError):
    """An invalid entry in the commit log with valid entries after it."""

    def __init__(self, path: str, offset: int, file_offset: int, reason: str):
        super().__init__(f"corrupt commit log entry in {path} at offset {offset} (file position {file_offset}): {reason}")
        self.path = path
        self.offset = offset
        self.file_offset = file_offset
        self.reason = reason


class StoreConfigError(StoreError):
    """The configuration is invalid or contradicts the files on disk."""


class StoreLockedError(StoreError):
    """Another process has the store open (``<root>/lock`` is held)."""


class StoreClosedError(StoreError):
    """The store is not started, or already shut down."""


class ReplicaError(StoreError):
    """Replicated bytes the replica's log cannot take (see `MessageStore.append_replica`)."""

    def __init__(self, offset: int, reason: str):
        super().__init__(f"replicated data at offset {offset} refused: {reason}")
        self.offset = offset
        self.reason = reason


class PutStatus(enum.Enum):
    """RocketMQ ``PutMessageStatus`` (4.9.x), same names."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"  # (sic, RocketMQ's spelling)
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    LMQ_CONSUME_QUEUE_NUM_EXCEEDED = "LMQ_CONSUME_QUEUE_NUM_EXCEEDED"

    @property
    def ok(self) -> bool:
        """True when the message is stored (possibly with a flush/slave timeout)."""
        return self in _STORED


_STORED = frozenset({PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE})


class GetMessageStatus(enum.Enum):
    """RocketMQ ``GetMessageStatus``, same names (reference 2.5 for their meaning)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
