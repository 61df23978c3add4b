"""What send, pull and query return: closed sets of statuses with their wire codes.

Each status carries the remoting response code the processors answer with
(reference 2.3), so a processor writes ``status.code`` and a remark and
never re-derives the mapping. Send statuses with ``stored == True`` are
the four RocketMQ ``SendStatus`` values: the message is in the log.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from core.store.encoder import EncodedMessage
from core.store.message import StoredMessage, decode_messages, offset_msg_id


class SendStatus(enum.Enum):
    SEND_OK = (0, True)
    FLUSH_DISK_TIMEOUT = (10, True)
    FLUSH_SLAVE_TIMEOUT = (12, True)
    SLAVE_NOT_AVAILABLE = (11, True)
    SYSTEM_ERROR = (1, False)
    SYSTEM_BUSY = (2, False)
    MESSAGE_ILLEGAL = (13, False)
    SERVICE_NOT_AVAILABLE = (14, False)
    NO_PERMISSION = (16, False)
    TOPIC_NOT_EXIST = (17, False)

    @property
    def code(self) -> int:
        return self.value[0]

    @property
    def stored(self) -> bool:
        return self.value[1]


_SEND_OK = SendStatus.SEND_OK


@dataclass(slots=True)
class SendResult:
    """One send's outcome. ``msg_id`` is the offset id (comma-joined for a
    batch, computed on first use); ``uniq_key`` the client id (UNIQ_KEY)."""

    status: SendStatus
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    uniq_key: str | None = None
    physical_offset: int = -1
    store_timestamp: int = 0
    msg_count: int = 0
    remark: str = ""
    _put: object = None  # the store's PutResult, or the EncodedMessage of a single entry, for ids

    @property
    def ok(self) -> bool:
        # SEND_OK by identity first: an Enum property is two Python-level
        # descriptor calls (stored, value), and this runs for every message
        status = self.status
        return status is _SEND_OK or status.stored

    @property
    def msg_id(self) -> str:
        put = self._put
        if put is None:
            return ""
        if put.__class__ is EncodedMessage:
            return offset_msg_id(put.store_host, self.physical_offset)
        return put.msg_id

    @property
    def msg_ids(self) -> list[str]:
        put = self._put
        if put is None:
            return []
        if put.__class__ is EncodedMessage:
            return [self.msg_id]
        return put.msg_ids


class PullStatus(enum.Enum):
    FOUND = 0
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    SYSTEM_ERROR = 1
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    SERVICE_NOT_AVAILABLE = 14

    @property
    def code(self) -> int:
        return self.value


@dataclass(slots=True)
class PullResult:
    """A pull outcome; ``entries`` are stored entries, byte for byte (a PULL body is their join)."""

    status: PullStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    entries: list[bytes] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)  # of each entry in the queue read
    store_status: str = ""  # GetMessageStatus name: the response remark
    suggest_which_broker_id: int = 0
    remark: str = ""

    @property
    def body(self) -> bytes:
        return b"".join(self.entries)

    @property
    def message_count(self) -> int:
        return len(self.entries)

    def messages(self) -> list[StoredMessage]:
        return decode_messages(self.body)


@dataclass(slots=True)
class QueryResult:
    """QUERY_MESSAGE: matching entries and the index's last update."""

    entries: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phy_offset: int = 0

    @property
    def body(self) -> bytes:
        return b"".join(self.entries)

    def messages(self) -> list[StoredMessage]:
        return decode_messages(self.body)
