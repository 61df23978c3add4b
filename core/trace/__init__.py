"""core.trace: message trace records in RocketMQ's trace data format (see `core.trace.codec`).

The public face for the gateway and the admin tool::

    encode(records) -> (body text, keys)      # one trace message: records and its index keys
    decode(body) -> [record, ...]             # skips what it cannot read; decode_strict raises
    PubRecord, SubBeforeRecord, SubAfterRecord, EndTransactionRecord
    TraceBatch(max_size).add_all(records) -> [(body, keys), ...]
    TRACE_TOPIC, DEFAULT_REGION, MessageType, ConsumeReturnType, DeliveryOutcome, mqtt_group, is_mqtt_group
"""

from core.trace.codec import (
    CONTENT_SPLITOR,
    DEFAULT_REGION,
    FIELD_SPLITOR,
    KEY_SEPARATOR,
    MQTT_GROUP_PREFIX,
    PROPERTY_KEYS,
    PROPERTY_MSG_REGION,
    PROPERTY_UNIQ_KEY,
    PROPERTY_TRACE_SWITCH,
    TRACE_GROUP_PREFIX,
    TRACE_TOPIC,
    TRANSACTION_STATES,
    ConsumeReturnType,
    DeliveryOutcome,
    EndTransactionRecord,
    MessageType,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceBatch,
    TraceFormatError,
    TraceRecord,
    TraceType,
    decode,
    decode_record,
    decode_strict,
    encode,
    encode_record,
    is_mqtt_group,
    mqtt_group,
    record_keys,
)

__all__ = [
    "CONTENT_SPLITOR", "DEFAULT_REGION", "FIELD_SPLITOR", "KEY_SEPARATOR", "MQTT_GROUP_PREFIX", "PROPERTY_KEYS", "PROPERTY_MSG_REGION", "PROPERTY_UNIQ_KEY",
    "PROPERTY_TRACE_SWITCH", "TRACE_GROUP_PREFIX", "TRACE_TOPIC", "TRANSACTION_STATES", "ConsumeReturnType",
    "DeliveryOutcome", "EndTransactionRecord", "MessageType", "PubRecord", "SubAfterRecord", "SubBeforeRecord",
    "TraceBatch", "TraceFormatError", "TraceRecord", "TraceType", "decode", "decode_record", "decode_strict", "encode",
    "encode_record", "is_mqtt_group", "mqtt_group", "record_keys",
]
