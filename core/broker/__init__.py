"""core.broker: the in-process broker API (topics, send, pull, long polling, offsets).

The MQTT gateway and the RocketMQ remoting processors call this; nothing
else in the broker is imported across rooms.

Configuration::

    BrokerConfig.from_dict({"brokerName": ..., "flushDiskType": "SYNC_FLUSH", ...})  # RocketMQ keys, strict
    broker_cfg, store_cfg = configs_from_dict(flat_toml_table)   # broker + store keys in one table
    BrokerConfig.keys() -> {rocketmqKey: description}

Lifecycle::

    async with open_broker(broker_cfg, store_cfg) as broker:
        ...                                   # or: broker = await nursery.start(Broker(cfg, scfg).run)
    # shutdown: persists topics/groups/offsets, flushes, store.shutdown() (clean marker)

Send (the `Message` is stamped in place: store host, CLUSTER, UNIQ_KEY, born time; WAIT removed)::

    await broker.send(msg, queue_id=None, *, default_topic="TBW102", default_topic_queue_nums=None, internal=False) -> SendResult
    await broker.send_many([(msg, queue_id_or_None), ...]) -> list[SendResult]   # one flush wait for all
    await broker.send_batch([msg, ...], queue_id=None) -> SendResult             # RocketMQ batch, one queue
    broker.add_put_hook(hook, when=None)                                          # hook(msg) before encoding (each batch item too); when: property names it needs
    broker.add_stored_hook(hook, *, topics=None)                                  # hook(msg, result) after the append (each batch item too); topics: names or a predicate
    TopicHooks(): add(hook, topics=None), for_topic(topic) -> hooks in order     # the same rules for another backend's stored hooks
    SendResult: status (SendStatus: .code, .stored), topic, queue_id, queue_offset, msg_id,
                uniq_key, physical_offset, store_timestamp, msg_count, remark; .ok

Pull and waiting::

    await broker.pull(group, topic, queue_id, offset, max_count=32, subscription="*", *,
                      suspend_timeout_ms=None, commit_offset=None, expression_type="TAG") -> PullResult
    await broker.read_queue(topic, queue_id, offset, max_count=32, tag_codes=None) -> PullResult  # no checks
    PullResult: status (PullStatus: .code), next_begin_offset, min_offset, max_offset,
                entries (raw stored entries), body, message_count, messages(), store_status, remark
    await broker.wait_for_messages(topic, queue_id, offset, deadline=inf) -> bool   # trio-clock deadline
    broker.queue_changed(topic, queue_id) -> trio.Event                              # set at next append
    broker.add_dispatch_listener(cb)  /  remove_dispatch_listener(cb)              # cb(topic, qid, next_offset), once per queue per append call

Offsets, groups, topics::

    broker.commit_offset(group, topic, queue_id, offset); broker.query_offset(...) -> int | None
    broker.get_group(group) -> SubscriptionGroupConfig | None;  broker.groups (SubscriptionGroupTable)
    broker.get_topic(name) -> TopicConfig | None;  broker.topics (TopicTable: data_version, all(), add_listener)
    await broker.update_topic(TopicConfig(...));  await broker.ensure_topic(name, queue_nums=1, perm=6)
    await broker.delete_topic(name) -> bool;  await broker.delete_queue(topic, queue_id);  await broker.persist()

Queries::

    broker.min_offset(topic, qid); broker.max_offset(topic, qid)
    await broker.offset_by_time(topic, qid, ts_ms); await broker.earliest_store_time(topic, qid)
    await broker.earliest_message_time(); await broker.store_time(topic, qid, offset)   # -1 if none
    await broker.query_message(topic, key, max_num=32, begin_ts=0, end_ts=...) -> QueryResult
    await broker.read_at(physical_offset) -> bytes | None;  await broker.view_message(msg_id) -> StoredMessage | None
    await broker.delete_expired()

Observability and wiring: broker.running, broker.flush_count, broker.flushed_offset,
broker.recovery_report, broker.store (the MessageStore), broker.store_host, broker.root,
broker.config_dir, broker.replicator (core/ha sets it on a SYNC_MASTER).

Records (msgpack ``[kind, key, value]`` in queue 0 of a system topic; gateway metadata, event rules)::

    record_message(topic, kind, key, value) -> Message;  await replay_records(broker, topic, kinds) -> (state, skipped)
    async for raw in queue_entries(broker, topic, start, end): ...;  parse_record(body, kinds) -> (kind, key, value)

Names: `validate_topic`, `mqtt_level_to_topic`, `mqtt_topic_to_topic`, `topic_to_mqtt_level`,
`retry_topic`, `dlq_topic`; tag and SQL92 expressions: `parse_subscription` -> `SubscriptionData`
(SQL92 alone: `compile_sql92` -> `Sql92Filter`, `Sql92Error`; `property_filter_refusal` is 4.x's remark
when ``enablePropertyFilter`` is off).
"""

from .broker import LMQ_TOPIC_PREFIX, Broker, Replicator, open_broker
from .config import (
    PERM_INHERIT, PERM_PRIORITY, PERM_READ, PERM_WRITE, BrokerConfig, BrokerRole, ConfigError, FlushDiskType,
    configs_from_dict, store_config_for,
)
from .hooks import TopicHooks
from .offsets import ConsumerOffsetTable, SubscriptionGroupConfig, SubscriptionGroupTable
from .records import parse_record, queue_entries, record_message, replay_records
from .results import PullResult, PullStatus, QueryResult, SendResult, SendStatus
from .sql92 import Sql92Error, Sql92Filter, compile_sql92
from .subscription import (
    EXPRESSION_SQL92, EXPRESSION_TAG, SUB_ALL, SubscriptionData, SubscriptionParseError, parse_subscription,
    property_filter_refusal,
)
from .topic_names import mqtt_level_to_topic, mqtt_topic_to_topic, topic_to_mqtt_level
from .topics import (
    DEFAULT_TOPIC, DLQ_GROUP_TOPIC_PREFIX, OFFSET_MOVED_EVENT, RETRY_GROUP_TOPIC_PREFIX, SCHEDULE_QUEUE_NUMS,
    SCHEDULE_TOPIC, SELF_TEST_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, DataVersion, TopicConfig,
    TopicFilterType, TopicTable, dlq_topic, is_system_topic, retry_topic, validate_topic,
)

__all__ = [
    "Broker", "open_broker", "Replicator", "LMQ_TOPIC_PREFIX", "TopicHooks",
    "BrokerConfig", "BrokerRole", "FlushDiskType", "ConfigError", "configs_from_dict", "store_config_for",
    "PERM_READ", "PERM_WRITE", "PERM_INHERIT", "PERM_PRIORITY",
    "SendResult", "SendStatus", "PullResult", "PullStatus", "QueryResult",
    "SubscriptionData", "SubscriptionParseError", "parse_subscription", "SUB_ALL",
    "EXPRESSION_TAG", "EXPRESSION_SQL92", "property_filter_refusal", "compile_sql92", "Sql92Filter", "Sql92Error",
    "TopicConfig", "TopicFilterType", "TopicTable", "DataVersion", "validate_topic", "is_system_topic",
    "retry_topic", "dlq_topic", "DEFAULT_TOPIC", "RETRY_GROUP_TOPIC_PREFIX", "DLQ_GROUP_TOPIC_PREFIX",
    "SCHEDULE_TOPIC", "SCHEDULE_QUEUE_NUMS", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
    "TRANS_HALF_TOPIC", "TRANS_OP_HALF_TOPIC",
    "mqtt_level_to_topic", "mqtt_topic_to_topic", "topic_to_mqtt_level",
    "SubscriptionGroupConfig", "SubscriptionGroupTable", "ConsumerOffsetTable",
    "record_message", "replay_records", "queue_entries", "parse_record",
]
