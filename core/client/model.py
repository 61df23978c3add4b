"""What the client hands around: messages, queues, send results, listener answers.

Rules kept here:

- A `Message` is what a producer sends: topic, body, and the properties
  RocketMQ defines (``TAGS``, ``KEYS``, ``DELAY``, ``WAIT``...) plus user
  properties, all strings. Setting ``tags``/``keys``/``delay_level`` writes
  the property, so the properties dict is the single source of truth.
- A `MessageExt` is what a consumer gets. ``msg_id`` is the producer's
  ``UNIQ_KEY`` when there is one, else the broker's offset id (as the Java
  client shows it); ``offset_msg_id`` is always the broker's. A message
  that came back through ``%RETRY%<group>`` shows its original topic
  (``RETRY_TOPIC``), as the Java consumer restores it.
- `MessageQueue` orders like Java's (topic, broker name, queue id), which
  is the order rebalancing allocates in.
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass, field

from core.store.message import (
    COMPRESSED_FLAG,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    StoredMessage,
)

__all__ = [
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "SendResult",
    "SendStatus",
]


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, d: dict) -> "MessageQueue":
        return cls(str(d["topic"]), str(d["brokerName"]), int(d["queueId"]))

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


class Message:
    """A message to send. ``Message("T", b"body", tags="A", keys=["k1"], delay_level=3)``."""

    __slots__ = ("topic", "body", "flag", "properties")

    def __init__(
        self,
        topic: str,
        body: bytes | str = b"",
        *,
        tags: str | None = None,
        keys: str | list[str] | tuple[str, ...] | None = None,
        delay_level: int = 0,
        flag: int = 0,
        properties: dict[str, str] | None = None,
    ) -> None:
        self.topic = topic
        self.body = body.encode() if isinstance(body, str) else bytes(body)
        self.flag = flag
        self.properties: dict[str, str] = {k: str(v) for k, v in (properties or {}).items()}
        if tags:
            self.tags = tags
        if keys:
            self.keys = keys
        if delay_level:
            self.delay_level = delay_level

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        self._set(PROPERTY_TAGS, value)

    @property
    def keys(self) -> list[str]:
        return self.properties.get(PROPERTY_KEYS, "").split()

    @keys.setter
    def keys(self, value: str | list[str] | tuple[str, ...] | None) -> None:
        self._set(PROPERTY_KEYS, value if isinstance(value, str) or value is None else " ".join(value))

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(PROPERTY_DELAY, "0") or 0)

    @delay_level.setter
    def delay_level(self, value: int) -> None:
        self._set(PROPERTY_DELAY, str(int(value)) if value else None)

    def put_property(self, name: str, value: str) -> "Message":
        self.properties[name] = str(value)
        return self

    def _set(self, name: str, value: str | None) -> None:
        if value is None or value == "":
            self.properties.pop(name, None)
        else:
            self.properties[name] = value

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, body={self.body[:40]!r}, properties={self.properties!r})"


@dataclass(slots=True)
class MessageExt:
    """A consumed message (Java ``MessageExt``)."""

    topic: str
    body: bytes
    queue: MessageQueue
    queue_offset: int
    commit_log_offset: int
    flag: int
    sysflag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    properties: dict[str, str] = field(default_factory=dict)
    offset_msg_id: str = ""

    @property
    def msg_id(self) -> str:
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def queue_id(self) -> int:
        return self.queue.queue_id

    @property
    def broker_name(self) -> str:
        return self.queue.broker_name

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return self.properties.get(PROPERTY_KEYS, "").split()

    @classmethod
    def from_stored(cls, m: StoredMessage, broker_name: str) -> "MessageExt":
        body = m.body
        if m.sysflag & COMPRESSED_FLAG:
            try:
                body = zlib.decompress(body)
            except zlib.error:
                pass  # keep the raw bytes: better than dropping the message
        return cls(
            topic=m.topic, body=body, queue=MessageQueue(m.topic, broker_name, m.queue_id),
            queue_offset=m.queue_offset, commit_log_offset=m.physical_offset, flag=m.flag, sysflag=m.sysflag,
            born_timestamp=m.born_timestamp, born_host=m.born_host, store_timestamp=m.store_timestamp,
            store_host=m.store_host, reconsume_times=m.reconsume_times, properties=m.properties,
            offset_msg_id=m.msg_id,
        )

    def restore_retry_topic(self, group_retry_topic: str) -> None:
        """A message pulled from ``%RETRY%<group>`` shows its original topic."""
        original = self.properties.get(PROPERTY_RETRY_TOPIC)
        if original and self.topic == group_retry_topic:
            self.topic = original

    def __repr__(self) -> str:
        return (f"MessageExt(topic={self.topic!r}, queue={self.queue}, offset={self.queue_offset}, "
                f"msg_id={self.msg_id!r}, body={self.body[:40]!r})")


class SendStatus(enum.Enum):
    SEND_OK = 0
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12

    @classmethod
    def from_code(cls, code: int) -> "SendStatus | None":
        try:
            return cls(code)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class SendResult:
    """``msg_id`` is the UNIQ_KEY (comma-joined for a batch); ``offset_msg_id`` the broker's id."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is SendStatus.SEND_OK


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class MessageModel(enum.Enum):
    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(enum.Enum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
