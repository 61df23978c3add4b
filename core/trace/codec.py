"""Message trace records in RocketMQ's trace data format (a pure codec).

RocketMQ's Java client (``TraceDataEncoder``) writes trace records as text
into the trace topic (``RMQ_SYS_TRACE_TOPIC`` unless a custom one is set):
one record per line-like chunk ended by FIELD_SPLITOR (U+0002), the fields of
a record separated by CONTENT_SPLITOR (U+0001), the record's kind first.
The message carrying a batch of records is keyed by every traced message id
and every key of the traced messages, so that a query by key on the trace
topic (the index file) finds all records of one message.

Rules kept here:

- Field order, separators and value spellings are the Java client's:
  booleans ``true``/``false``, ``MessageType`` and ``ConsumeReturnType`` by
  ordinal, ``LocalTransactionState`` by name, a missing string as Java's
  ``String.valueOf(null)``: ``null``. A record our encoder writes is read by
  ``TraceDataEncoder.decoderFromTraceDataString`` and back by `decode`.
- Java's decoder reads a fixed prefix of each record and ignores fields past
  it. MQTT records (written by the gateway) use that room: the reference
  fields come first, then ``client id, QoS, MQTT topic`` (Pub, SubBefore) or
  the delivery outcome (SubAfter). Their group is ``%MQTT%`` + client id.
  Our own clients use the first of those too: Pub and SubBefore records
  carry the client id (Java's decoder reads Pub's as ``clientHost``).
- The separators cannot occur inside a value: they are replaced by a space
  when encoding (the Java client writes them unescaped, which breaks its own
  decoder).
- `decode` never raises on a record it does not understand: it skips it
  (a trace topic may hold records of newer clients), and a malformed number
  makes the record skipped too; `decode_strict` raises `TraceFormatError`.
- No I/O, no clock: times are given by the caller (ms since the epoch).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
DEFAULT_REGION = "DefaultRegion"
TRACE_GROUP_PREFIX = "_INNER_TRACE_PRODUCER"
KEY_SEPARATOR = " "
MQTT_GROUP_PREFIX = "%MQTT%"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_KEYS = "KEYS"          # the traced message's keys, space-separated
PROPERTY_UNIQ_KEY = "UNIQ_KEY"  # the traced message's id


class TraceFormatError(ValueError):
    """A record that does not follow the reference layout."""


class TraceType(enum.Enum):
    Pub = "Pub"
    Recall = "Recall"
    SubBefore = "SubBefore"
    SubAfter = "SubAfter"
    EndTransaction = "EndTransaction"


class MessageType(enum.IntEnum):
    """``org.apache.rocketmq.common.message.MessageType``; written by ordinal."""

    Normal_Msg = 0
    Trans_Msg_Half = 1
    Trans_msg_Commit = 2
    Delay_Msg = 3
    Order_Msg = 4


class ConsumeReturnType(enum.IntEnum):
    """The SubAfter context code (``ConsumeReturnType`` ordinal)."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


class DeliveryOutcome(enum.Enum):
    """How an MQTT delivery ended (the gateway's SubAfter extension field)."""

    ACKED = "acked"
    DROPPED = "dropped"      # the session queue's limit dropped it
    EXPIRED = "expired"      # message expiry interval passed before delivery

    @property
    def context_code(self) -> ConsumeReturnType:
        return {DeliveryOutcome.ACKED: ConsumeReturnType.SUCCESS,
                DeliveryOutcome.DROPPED: ConsumeReturnType.FAILED,
                DeliveryOutcome.EXPIRED: ConsumeReturnType.TIME_OUT}[self]


TRANSACTION_STATES = ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW")


@dataclass(frozen=True, slots=True, kw_only=True)
class PubRecord:
    """A send: producer group, time, cost, status, broker, ids, tags, keys."""

    timestamp: int
    group: str
    topic: str
    msg_id: str
    region: str = DEFAULT_REGION
    tags: str | None = None
    keys: str | None = None
    store_host: str = ""
    body_length: int = 0
    cost_ms: int = 0
    msg_type: MessageType = MessageType.Normal_Msg
    offset_msg_id: str = ""
    success: bool = True
    client_host: str | None = None
    # MQTT extension (after the reference fields)
    mqtt_qos: int | None = None
    mqtt_topic: str | None = None
    type = TraceType.Pub


@dataclass(frozen=True, slots=True, kw_only=True)
class SubBeforeRecord:
    """A consumption starts: group, time, request id, message id, retry count."""

    timestamp: int
    group: str
    request_id: str
    msg_id: str
    region: str = DEFAULT_REGION
    retry_times: int = 0
    keys: str | None = None
    # MQTT extension
    client_id: str | None = None
    mqtt_qos: int | None = None
    mqtt_topic: str | None = None
    type = TraceType.SubBefore


@dataclass(frozen=True, slots=True, kw_only=True)
class SubAfterRecord:
    """A consumption ends: cost, status, context code (same request id)."""

    request_id: str
    msg_id: str
    cost_ms: int = 0
    success: bool = True
    keys: str | None = None
    context_code: int = 0
    timestamp: int | None = None
    group: str | None = None
    # MQTT extension
    outcome: DeliveryOutcome | None = None
    type = TraceType.SubAfter


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTransactionRecord:
    """A transaction's end: the half message's id and the state sent."""

    timestamp: int
    group: str
    topic: str
    msg_id: str
    transaction_id: str
    transaction_state: str
    region: str = DEFAULT_REGION
    tags: str | None = None
    keys: str | None = None
    store_host: str = ""
    msg_type: MessageType = MessageType.Trans_msg_Commit
    from_transaction_check: bool = False
    type = TraceType.EndTransaction

    def __post_init__(self) -> None:
        if self.transaction_state not in TRANSACTION_STATES:
            raise ValueError(f"transaction_state must be one of {TRANSACTION_STATES}, got {self.transaction_state!r}")


TraceRecord = PubRecord | SubBeforeRecord | SubAfterRecord | EndTransactionRecord


# ------------------------------------------------------------------ encoding

_NO_SEPARATORS = str.maketrans({CONTENT_SPLITOR: " ", FIELD_SPLITOR: " "})


def _s(value: object) -> str:
    """A value as Java's StringBuilder.append writes it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def _join(fields: list) -> str:
    """The fields with CONTENT_SPLITOR between them; separators inside values become spaces
    (checked once on the joined text: the common case pays one count)."""
    texts = list(map(_s, fields))
    line = CONTENT_SPLITOR.join(texts)
    if line.count(CONTENT_SPLITOR) != len(texts) - 1 or FIELD_SPLITOR in line:
        line = CONTENT_SPLITOR.join(t.translate(_NO_SEPARATORS) for t in texts)
    return line + FIELD_SPLITOR


def encode_record(r: TraceRecord) -> str:
    """One record, FIELD_SPLITOR included."""
    if isinstance(r, PubRecord):
        fields = [r.type.value, r.timestamp, r.region, r.group, r.topic, r.msg_id, r.tags or None, r.keys or None, r.store_host,
                  r.body_length, r.cost_ms, int(r.msg_type), r.offset_msg_id, r.success]
        if r.client_host is not None or r.mqtt_qos is not None:
            fields.append(r.client_host if r.client_host is not None else "")
        if r.mqtt_qos is not None:
            fields += [r.mqtt_qos, r.mqtt_topic]
    elif isinstance(r, SubBeforeRecord):
        fields = [r.type.value, r.timestamp, r.region, r.group, r.request_id, r.msg_id, r.retry_times, r.keys or None]
        if r.client_id is not None or r.mqtt_qos is not None:
            fields.append(r.client_id if r.client_id is not None else "")
        if r.mqtt_qos is not None:
            fields += [r.mqtt_qos, r.mqtt_topic]
    elif isinstance(r, SubAfterRecord):
        fields = [r.type.value, r.request_id, r.msg_id, r.cost_ms, r.success, r.keys or None, r.context_code]
        if r.timestamp is not None:
            fields += [r.timestamp, r.group]
        if r.outcome is not None:
            fields.append(r.outcome.value)
    elif isinstance(r, EndTransactionRecord):
        fields = [r.type.value, r.timestamp, r.region, r.group, r.topic, r.msg_id, r.tags or None, r.keys or None, r.store_host,
                  int(r.msg_type), r.transaction_id, r.transaction_state, r.from_transaction_check]
    else:
        raise TypeError(f"not a trace record: {r!r}")
    return _join(fields)


def record_keys(r: TraceRecord) -> list[str]:
    """The index keys of one record: the message id, then each message key."""
    out = [r.msg_id]
    if r.keys and r.keys != "null":
        out += [k for k in r.keys.split(KEY_SEPARATOR) if k]
    return out


def encode(records: list[TraceRecord]) -> tuple[str, list[str]]:
    """A batch: the trace message body (text) and its keys, first-seen order."""
    body = "".join(encode_record(r) for r in records)
    seen: dict[str, None] = {}
    for r in records:
        for k in record_keys(r):
            seen.setdefault(k, None)
    return body, list(seen)


# ------------------------------------------------------------------ decoding

def _opt(text: str) -> str | None:
    return None if text == "null" else text


def _bool(text: str) -> bool:
    # Boolean.parseBoolean: anything but "true" (any case) is false
    return text.lower() == "true"


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise TraceFormatError(f"{what} is not an integer: {text!r}") from None


def _need(line: list[str], n: int) -> None:
    if len(line) < n:
        raise TraceFormatError(f"{line[0]} record has {len(line)} fields, needs {n}")


def decode_record(chunk: str) -> TraceRecord:
    """One record without its FIELD_SPLITOR; `TraceFormatError` if malformed."""
    line = chunk.split(CONTENT_SPLITOR)
    kind = line[0]
    if kind == "Pub":
        _need(line, 13)
        offset_id, success, host = "", True, None
        if len(line) == 13:
            success = _bool(line[12])
        else:
            offset_id, success = line[12], _bool(line[13])
            if len(line) >= 15:
                host = line[14]
        qos = _int(line[15], "QoS") if len(line) >= 17 else None
        return PubRecord(timestamp=_int(line[1], "timestamp"), region=line[2], group=line[3], topic=line[4],
                         msg_id=line[5], tags=_opt(line[6]), keys=_opt(line[7]), store_host=line[8],
                         body_length=_int(line[9], "body length"), cost_ms=_int(line[10], "cost"),
                         msg_type=MessageType(_int(line[11], "message type")), offset_msg_id=offset_id,
                         success=success, client_host=host, mqtt_qos=qos,
                         mqtt_topic=line[16] if qos is not None else None)
    if kind == "SubBefore":
        _need(line, 8)
        mqtt = len(line) >= 11
        return SubBeforeRecord(timestamp=_int(line[1], "timestamp"), region=line[2], group=line[3],
                               request_id=line[4], msg_id=line[5], retry_times=_int(line[6], "retry times"),
                               keys=_opt(line[7]), client_id=line[8] if len(line) >= 9 else None,
                               mqtt_qos=_int(line[9], "QoS") if mqtt else None, mqtt_topic=line[10] if mqtt else None)
    if kind == "SubAfter":
        _need(line, 6)
        ts = _int(line[7], "timestamp") if len(line) >= 9 else None
        outcome = None
        if len(line) >= 10:
            try:
                outcome = DeliveryOutcome(line[9])
            except ValueError:
                raise TraceFormatError(f"unknown delivery outcome {line[9]!r}") from None
        return SubAfterRecord(request_id=line[1], msg_id=line[2], cost_ms=_int(line[3], "cost"),
                              success=_bool(line[4]), keys=_opt(line[5]),
                              context_code=_int(line[6], "context code") if len(line) >= 7 else 0,
                              timestamp=ts, group=line[8] if ts is not None else None, outcome=outcome)
    if kind == "EndTransaction":
        _need(line, 13)
        if line[11] not in TRANSACTION_STATES:
            raise TraceFormatError(f"unknown transaction state {line[11]!r}")
        return EndTransactionRecord(timestamp=_int(line[1], "timestamp"), region=line[2], group=line[3],
                                    topic=line[4], msg_id=line[5], tags=_opt(line[6]), keys=_opt(line[7]),
                                    store_host=line[8], msg_type=MessageType(_int(line[9], "message type")),
                                    transaction_id=line[10], transaction_state=line[11],
                                    from_transaction_check=_bool(line[12]))
    raise TraceFormatError(f"unknown trace record type {kind[:40]!r}")


def decode_strict(data: str | bytes) -> list[TraceRecord]:
    """Every record of a trace message body; the first malformed one raises."""
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    out = []
    for chunk in data.split(FIELD_SPLITOR):
        if chunk:
            try:
                out.append(decode_record(chunk))
            except ValueError as e:  # MessageType(...) out of range too
                raise TraceFormatError(str(e)) from None
    return out


def decode(data: str | bytes) -> list[TraceRecord]:
    """The records of a trace message body that follow the layout; others skipped."""
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    out = []
    for chunk in data.split(FIELD_SPLITOR):
        if chunk:
            try:
                out.append(decode_record(chunk))
            except ValueError:
                continue
    return out


def mqtt_group(client_id: str) -> str:
    return MQTT_GROUP_PREFIX + client_id


def is_mqtt_group(group: str | None) -> bool:
    return bool(group) and group.startswith(MQTT_GROUP_PREFIX)


@dataclass(slots=True)
class TraceBatch:
    """Records bound for one trace topic, cut where the body would pass ``max_size``."""

    max_size: int = 128_000
    bodies: list[tuple[str, list[str]]] = field(default_factory=list)

    def add_all(self, records: list[TraceRecord]) -> list[tuple[str, list[str]]]:
        parts: list[str] = []
        keys: dict[str, None] = {}
        size = 0
        for r in records:
            text = encode_record(r)
            parts.append(text)
            size += len(text)
            for k in record_keys(r):
                keys.setdefault(k, None)
            if size >= self.max_size:
                self.bodies.append(("".join(parts), list(keys)))
                parts, keys, size = [], {}, 0
        if parts:
            self.bodies.append(("".join(parts), list(keys)))
        return self.bodies
