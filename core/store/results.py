"""Result records of the store facade: `PutResult`, `GetResult`, `QueryResult`, `RecoveryReport`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import CorruptSegmentError, GetMessageStatus, PutStatus
from .message import offset_msg_id


class PutResult:
    """What an append answers (RocketMQ ``PutMessageResult`` + ``AppendMessageResult``).

    ``physical_offset`` is the first entry's commit-log offset (wroteOffset),
    ``queue_offset`` its consume-queue offset (logicsOffset), ``wrote_bytes``
    the bytes of all entries, ``end_offset`` the log position to pass to
    `MessageStore.wait_flushed`.  ``msg_id`` is the offset message id (a
    comma-joined list for a batch, as the send reply wants it); ``msg_ids``
    the list.  Ids are computed on first use.
    """

    __slots__ = ("status", "physical_offset", "queue_offset", "wrote_bytes", "store_timestamp", "queue_id", "msg_num", "end_offset", "_host", "_offsets")

    def __init__(self, status: PutStatus, physical_offset: int = -1, queue_offset: int = -1, wrote_bytes: int = 0,
                 store_timestamp: int = 0, queue_id: int = -1, msg_num: int = 0, end_offset: int = -1,
                 encoded=None, offsets: list[int] | None = None):
        self.status = status
        self.physical_offset = physical_offset
        self.queue_offset = queue_offset
        self.wrote_bytes = wrote_bytes
        self.store_timestamp = store_timestamp
        self.queue_id = queue_id
        self.msg_num = msg_num
        self.end_offset = end_offset
        self._host = encoded  # the EncodedMessage, read for its store host on demand
        self._offsets = offsets

    @property
    def ok(self) -> bool:
        return self.status.ok

    @property
    def physical_offsets(self) -> list[int]:
        if self._offsets is not None:
            return self._offsets
        return [self.physical_offset] if self.physical_offset >= 0 else []

    @property
    def store_host(self) -> bytes:
        enc = self._host
        return b"" if enc is None else enc.store_host

    @property
    def msg_ids(self) -> list[str]:
        host = self.store_host
        return [offset_msg_id(host, p) for p in self.physical_offsets]

    @property
    def msg_id(self) -> str:
        return ",".join(self.msg_ids)

    def __repr__(self) -> str:
        return (f"PutResult({self.status.name}, physical_offset={self.physical_offset}, queue_offset={self.queue_offset}, "
                f"wrote_bytes={self.wrote_bytes}, msg_num={self.msg_num})")


@dataclass(slots=True)
class GetResult:
    """Entries of one queue read (RocketMQ ``GetMessageResult``).

    ``messages`` are the raw stored entries (each a pull body item, unchanged
    bytes of the log); ``queue_offsets[i]`` is the offset of ``messages[i]``
    in the queue that was read (for a multi-dispatch queue this differs from
    the QUEUEOFFSET field inside the entry, which belongs to the entry's own
    topic).  ``next_begin_offset``, ``min_offset`` and ``max_offset`` follow
    reference 2.5.
    """

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[bytes] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)

    @property
    def body(self) -> bytes:
        return b"".join(self.messages)

    @property
    def buffer_total_size(self) -> int:
        return sum(map(len, self.messages))


@dataclass(slots=True)
class QueryResult:
    """Entries found by key (QUERY_MESSAGE), newest first."""

    messages: list[bytes]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int


@dataclass
class RecoveryReport:
    """What `MessageStore.start` found and did."""

    abnormal_exit: bool = False
    log_min_offset: int = 0
    log_max_offset: int = 0
    verified_from: int = 0  # commit-log offset where entry checking started
    replayed_from: int = -1  # where re-dispatch to queues/index started (-1: none needed)
    replayed_entries: int = 0
    truncated_bytes_at: int | None = None  # log end, when something after it was cut
    truncated_file: str | None = None  # the segment cut there (or the first one deleted past it)
    torn_hole: tuple[str, int, int] | None = None  # (file, offset, next valid entry): a hole past the flushed offset
    corruption: CorruptSegmentError | None = None  # set when truncate_on_corruption cut at it
    cq_units_dropped: int = 0
    index_files_dropped: int = 0
    queues: int = 0

    def __str__(self) -> str:
        """One line for the start-up log: how the last run ended and what recovery did."""
        parts = ["after a crash" if self.abnormal_exit else "after a clean shutdown",
                 f"log {self.log_min_offset}..{self.log_max_offset}", f"{self.queues} queues"]
        if self.replayed_entries:
            parts.append(f"{self.replayed_entries} entries re-dispatched from {self.replayed_from}")
        if self.truncated_bytes_at is not None:
            parts.append(f"torn tail cut at {self.truncated_bytes_at} in {self.truncated_file}")
        if self.torn_hole is not None:
            parts.append(f"(a page written after the last flush never reached the disk at offset "
                         f"{self.torn_hole[1]}; the unacknowledged entries from {self.torn_hole[2]} on were dropped)")
        if self.corruption is not None:
            parts.append(f"cut at corruption: {self.corruption}")
        if self.cq_units_dropped or self.index_files_dropped:
            parts.append(f"{self.cq_units_dropped} queue units and {self.index_files_dropped} index files dropped")
        return ", ".join(parts)
