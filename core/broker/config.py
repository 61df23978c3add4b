"""Broker settings, named as RocketMQ names them.

Every field carries the RocketMQ key it stands for (``BrokerConfig`` /
``MessageStoreConfig`` in 4.9.x) in its metadata; that camelCase key is what
the TOML configuration file uses. Rules kept here:

- `BrokerConfig.from_dict` accepts the camelCase key (or the Python field
  name), coerces the value to the field's type (TOML already gives ints and
  booleans; strings such as ``"true"`` or ``"10911"`` from command-line
  flags are accepted too) and rejects unknown keys with a `ConfigError`
  that names the key and suggests the closest known one.
- Durations keep RocketMQ's units (milliseconds, except ``fileReservedTime``
  in hours, where we also accept fractions) so that a value copied from a ``broker.conf`` means the same here.
- A config object is never mutated by the broker after it starts.
- Keys both configs have (flushDiskType, flushIntervalCommitLog,
  syncFlushTimeout, maxMessageSize, fileReservedTime) are owned by
  `BrokerConfig`: `store_config_for` copies them into the `StoreConfig` the
  broker opens, and `configs_from_dict` splits one flat table of RocketMQ
  keys (the TOML file's) between the two.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
from dataclasses import dataclass, field
import re
import socket
from typing import Any

from core.store import FlushDiskType, StoreConfig, StoreError  # FlushDiskType: one enum for store and broker


class ConfigError(ValueError):
    """A configuration key or value the broker cannot use."""


class BrokerRole(enum.Enum):
    """``brokerRole``: a master takes writes; SYNC_MASTER waits for a slave ack."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


def _key(name: str, doc: str, default: Any = dataclasses.MISSING, **kw) -> Any:
    meta = {"key": name, "doc": doc}
    if default is dataclasses.MISSING:
        return field(metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
PERM_PRIORITY = 8


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """The broker's settings; RocketMQ key and meaning next to each field."""

    broker_name: str = _key("brokerName", "name of this master/slave set, shown in routes", "broker-a")
    broker_cluster_name: str = _key("brokerClusterName", "cluster this broker registers in", "DefaultCluster")
    broker_id: int = _key("brokerId", "0 = master, > 0 = slave", 0)
    broker_ip1: str = _key("brokerIP1", "address clients reach this broker at; stored as the store host", "127.0.0.1")
    listen_port: int = _key("listenPort", "remoting port (port 0 disables the listener); stored as the store port", 10911)
    namesrv_addr: str = _key("namesrvAddr", "name servers, 'host:port;host:port'; empty = none", "")
    broker_role: BrokerRole = _key("brokerRole", "ASYNC_MASTER, SYNC_MASTER or SLAVE", BrokerRole.ASYNC_MASTER)
    broker_permission: int = _key("brokerPermission", "4 read | 2 write; a broker without write refuses sends", PERM_READ | PERM_WRITE)
    flush_disk_type: FlushDiskType = _key("flushDiskType", "ASYNC_FLUSH (periodic) or SYNC_FLUSH (ack after fsync)", FlushDiskType.ASYNC_FLUSH)
    flush_interval_commit_log: int = _key("flushIntervalCommitLog", "ms between periodic flushes in ASYNC_FLUSH", 500)
    flush_interval_consume_queue: int = _key("flushIntervalConsumeQueue", "ms between flushes of the consume queues, index and checkpoint (rebuilt from the commit log after a crash)", 1000)
    sync_flush_timeout: int = _key("syncFlushTimeout", "ms a SYNC_FLUSH send waits for fsync before FLUSH_DISK_TIMEOUT", 5000)
    broker_fast_failure_enable: bool = _key("brokerFastFailureEnable", "answer sends that waited too long in the broker, or came while the disk is busy, SYSTEM_BUSY (flow control)", True)
    wait_time_mills_in_send_queue: int = _key("waitTimeMillsInSendQueue", "ms a send may wait in the broker before it is answered SYSTEM_BUSY [TIMEOUT_CLEAN_QUEUE]", 200)
    os_page_cache_busy_time_out_mills: int = _key("osPageCacheBusyTimeOutMills", "ms a commit-log flush may run before new sends are answered SYSTEM_BUSY [PC_SYNCHRONIZED]", 1000)
    auto_create_topic_enable: bool = _key("autoCreateTopicEnable", "create unknown topics on first send from TBW102", True)
    default_topic_queue_nums: int = _key("defaultTopicQueueNums", "queue count of TBW102, so of auto-created topics", 8)
    auto_create_subscription_group: bool = _key("autoCreateSubscriptionGroup", "create unknown consumer groups on first use", True)
    long_polling_enable: bool = _key("longPollingEnable", "park an empty pull until a message lands or its suspend timeout", True)
    short_polling_time_mills: int = _key("shortPollingTimeMills", "ms an empty pull waits when long polling is off", 1000)
    enable_property_filter: bool = _key("enablePropertyFilter", "let consumers filter by SQL92 expressions on message properties; off, such pulls get SYSTEM_ERROR", False)
    max_message_size: int = _key("maxMessageSize", "largest body accepted, bytes (MESSAGE_ILLEGAL above)", 4 * 1024 * 1024)
    file_reserved_time: float = _key("fileReservedTime", "hours a commit-log segment is kept; fractions allowed (0.25 = 15 min; RocketMQ takes whole hours)", 72)
    delete_when: str = _key("deleteWhen", "hours of the day ('04', '01;04') when expired segments are deleted; '*' = any hour", "04")
    clean_resource_interval: int = _key("cleanResourceInterval", "ms between retention checks", 10000)
    flush_consumer_offset_interval: int = _key("flushConsumerOffsetInterval", "ms between consumer offset persists", 5000)
    default_query_max_num: int = _key("defaultQueryMaxNum", "results of a message-id query", 32)
    reject_transaction_message: bool = _key("rejectTransactionMessage", "refuse TRAN_MSG sends with NO_PERMISSION", False)
    cluster_topic_enable: bool = _key("clusterTopicEnable", "create a topic named after the cluster", True)
    broker_topic_enable: bool = _key("brokerTopicEnable", "create a topic named after the broker", True)
    trace_topic_enable: bool = _key("traceTopicEnable", "create the message trace topic (msgTraceTopicName) at start", False)
    region_id: str = _key("regionId", "region written in each native send's MSG_REGION property and answer (trace records carry it)", "DefaultRegion")
    trace_on: bool = _key("traceOn", "TRACE_ON written in each native send's properties and answer; false tells tracing clients to skip", True)
    msg_trace_topic_name: str = _key("msgTraceTopicName", "topic trace records are written to when traceTopicEnable is on", "RMQ_SYS_TRACE_TOPIC")
    notify_consumer_ids_changed_enable: bool = _key("notifyConsumerIdsChangedEnable", "tell a group's members when it changes", True)
    register_name_server_period: int = _key("registerNameServerPeriod", "ms between registrations with the name servers", 30000)
    message_delay_level: str = _key("messageDelayLevel", "delay levels of delayed messages and consumer retries (retry n waits level 3 + n), units ms s m h d", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    # transactions (core/transactions.py): when and how often a pending half message is checked back
    transaction_timeout: int = _key("transactionTimeOut", "ms a half message waits for END_TRANSACTION before its first check", 6000)
    transaction_check_interval: int = _key("transactionCheckInterval", "ms between checks of a half message still unresolved", 60000)
    transaction_check_max: int = _key("transactionCheckMax", "checks that reached a producer before a half message is rolled back", 15)
    # replication (core/ha): RocketMQ 4.x HAService keys, and the failover keys of ours
    ha_listen_port: int = _key("haListenPort", "port a master streams its commit log to slaves on; -1 = listenPort + 1 (0 with listenPort 0: any free port)", -1)
    ha_master_address: str = _key("haMasterAddress", "a slave's master HA address host:port; empty = learned from the name server's REGISTER_BROKER answer", "")
    ha_slave_fallbehind_max: int = _key("haSlaveFallbehindMax", "bytes a slave may lag before a SYNC_MASTER answers SLAVE_NOT_AVAILABLE", 256 * 1024 * 1024)
    slave_timeout: int = _key("slaveTimeout", "ms a SYNC_MASTER send waits for a slave before FLUSH_SLAVE_TIMEOUT", 3000)
    ha_send_heartbeat_interval: int = _key("haSendHeartbeatInterval", "ms between a slave's offset reports and a master's empty frames when idle", 5000)
    ha_housekeeping_interval: int = _key("haHousekeepingInterval", "ms of silence after which either side of a replication link closes it", 20000)
    ha_transfer_batch_size: int = _key("haTransferBatchSize", "largest commit-log chunk in one replication frame, bytes", 32 * 1024)
    access_message_in_memory_max_ratio: int = _key("accessMessageInMemoryMaxRatio", "percent of RAM: a pull further behind than this is pointed at a slave (suggestWhichBrokerId)", 40)
    slave_read_enable: bool = _key("slaveReadEnable", "a master may point slow consumers at a slave, and a slave keeps serving them", False)
    etcd_endpoints: str = _key("etcdEndpoints", "etcd client URLs 'http://h:p;http://h:p' for automatic failover; empty = failover by `mqgate admin ha promote`", "")
    ha_lease_ttl_ms: int = _key("haLeaseTtlMs", "ms a master's etcd lease lives without renewal; a slave is promoted after it lapses", 3000)
    ha_promote_role: BrokerRole = _key("haPromoteRole", "the role a promoted slave takes: SYNC_MASTER or ASYNC_MASTER", BrokerRole.SYNC_MASTER)
    etcd_key_prefix: str = _key("etcdKeyPrefix", "prefix of every key this broker group keeps in etcd", "/mqgate")

    def __post_init__(self) -> None:
        positive = ("flush_interval_commit_log", "flush_interval_consume_queue", "sync_flush_timeout", "default_topic_queue_nums", "short_polling_time_mills",
                    "wait_time_mills_in_send_queue", "os_page_cache_busy_time_out_mills",
                    "max_message_size", "clean_resource_interval", "flush_consumer_offset_interval", "default_query_max_num",
                    "register_name_server_period", "transaction_timeout", "transaction_check_interval",
                    "transaction_check_max", "ha_slave_fallbehind_max", "slave_timeout", "ha_send_heartbeat_interval",
                    "ha_housekeeping_interval", "ha_transfer_batch_size", "ha_lease_ttl_ms")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{_KEY_OF[name]} must be > 0, got {getattr(self, name)!r}")
        if not 0 <= self.file_reserved_time < math.inf:
            raise ConfigError(f"fileReservedTime must be a number of hours >= 0, got {self.file_reserved_time!r}")
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort must be 0..65535, got {self.listen_port!r}")
        if self.broker_id < 0:
            raise ConfigError(f"brokerId must be >= 0, got {self.broker_id!r}")
        if not -1 <= self.ha_listen_port <= 65535:
            raise ConfigError(f"haListenPort must be -1..65535, got {self.ha_listen_port!r}")
        if not 1 <= self.access_message_in_memory_max_ratio <= 100:
            raise ConfigError(f"accessMessageInMemoryMaxRatio must be 1..100, got {self.access_message_in_memory_max_ratio!r}")
        if self.ha_promote_role is BrokerRole.SLAVE:
            raise ConfigError("haPromoteRole must be SYNC_MASTER or ASYNC_MASTER, not SLAVE")
        if not self.region_id or not self.region_id.isprintable():
            raise ConfigError(f"regionId must be printable text (it is stored in message properties), got {self.region_id!r}")
        if not re.fullmatch(r"[%|a-zA-Z0-9_-]{1,127}", self.msg_trace_topic_name):
            raise ConfigError(f"msgTraceTopicName must be a topic name (1..127 of [%|a-zA-Z0-9_-]), got {self.msg_trace_topic_name!r}")
        self.delete_hours()  # validates deleteWhen
        try:
            socket.inet_pton(socket.AF_INET6 if ":" in self.broker_ip1 else socket.AF_INET, self.broker_ip1)
        except OSError:
            raise ConfigError(f"brokerIP1 must be an IP address (it is stored in every message), got {self.broker_ip1!r}") from None

    @classmethod
    def keys(cls) -> dict[str, str]:
        """RocketMQ key -> one-line description, for `--help` and docs."""
        return {f.metadata["key"]: f.metadata["doc"] for f in dataclasses.fields(cls)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BrokerConfig:
        """Build from RocketMQ-named keys; unknown keys raise `ConfigError`."""
        kwargs: dict[str, Any] = {}
        for key, raw in values.items():
            name = _FIELD_OF.get(key) or (key if key in _KEY_OF else None)
            if name is None:
                near = difflib.get_close_matches(key, list(_FIELD_OF), n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise ConfigError(f"unknown broker configuration key {key!r}{hint}")
            kwargs[name] = _coerce(key, _TYPE_OF[name], raw)
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """RocketMQ-named keys and plain values (enums by name)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.metadata["key"]] = v.value if isinstance(v, enum.Enum) else v
        return out

    def replace(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    def ha_port_for(self, bound_listen_port: int) -> int:
        """The HA port to bind, given the remoting port actually bound (0 = any free port)."""
        if self.ha_listen_port >= 0:
            return self.ha_listen_port
        return bound_listen_port + 1 if self.listen_port else 0

    def etcd_endpoint_list(self) -> list[str]:
        return [e.strip() for e in self.etcd_endpoints.split(";") if e.strip()]

    def delete_hours(self) -> frozenset[int] | None:
        """Hours of ``deleteWhen``; None means any hour."""
        text = self.delete_when.strip()
        if text == "*":
            return None
        try:
            hours = frozenset(int(h) for h in text.split(";") if h.strip())
        except ValueError:
            raise ConfigError(f"deleteWhen must be hours like '04' or '01;04' or '*', got {self.delete_when!r}") from None
        if not hours or any(not 0 <= h <= 23 for h in hours):
            raise ConfigError(f"deleteWhen hours must be 0..23, got {self.delete_when!r}")
        return hours


_FIELD_OF = {f.metadata["key"]: f.name for f in dataclasses.fields(BrokerConfig)}
_KEY_OF = {f.name: f.metadata["key"] for f in dataclasses.fields(BrokerConfig)}
_TYPE_OF = {f.name: f.type for f in dataclasses.fields(BrokerConfig)}
_ENUMS = {"BrokerRole": BrokerRole, "FlushDiskType": FlushDiskType}


def _coerce(key: str, type_name: str, raw: Any) -> Any:
    try:
        if type_name in _ENUMS:
            enum_cls = _ENUMS[type_name]
            if isinstance(raw, enum_cls):
                return raw
            return enum_cls(str(raw).strip().upper())
        if type_name == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off"):
                return False
            raise ValueError(raw)
        if type_name == "int":
            if isinstance(raw, bool):
                raise ValueError(raw)
            return int(raw)
        if type_name == "float":
            if isinstance(raw, bool):
                raise ValueError(raw)
            value = float(raw)
            return int(value) if value.is_integer() else value
        if type_name == "str":
            if not isinstance(raw, (str, int)):
                raise ValueError(raw)
            return str(raw)
    except ValueError:
        pass
    else:
        raise AssertionError(f"no coercion for {type_name}")
    raise ConfigError(f"bad value for {key}: {raw!r} (expected {type_name})")


# Keys both configs have; the broker's value is the one used.
SHARED_STORE_FIELDS = ("flush_disk_type", "flush_interval_commit_log", "sync_flush_timeout", "max_message_size", "file_reserved_time")


def store_config_for(config: BrokerConfig, store_config: StoreConfig) -> StoreConfig:
    """``store_config`` with the shared keys taken from ``config``."""
    return dataclasses.replace(store_config, **{name: getattr(config, name) for name in SHARED_STORE_FIELDS})


def _snake(camel: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", camel).lower()


def _store_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(StoreConfig)}


def configs_from_dict(values: dict[str, Any]) -> tuple[BrokerConfig, StoreConfig]:
    """Split one table of RocketMQ keys (``storePathRootDir``, ``brokerName``,
    ``mappedFileSizeCommitLog``...) into the broker's and the store's configs.
    Unknown keys raise `ConfigError` naming the closest known key."""
    store_fields = _store_fields()
    broker_values: dict[str, Any] = {}
    store_values: dict[str, Any] = {}
    for key, raw in values.items():
        if key in _FIELD_OF or key in _KEY_OF:
            broker_values[key] = raw
            continue
        name = _snake(key)
        if name not in store_fields:
            known = list(_FIELD_OF) + [_camel(n) for n in store_fields]
            near = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"unknown configuration key {key!r}{hint}; every key is listed in docs/CONFIG.md")
        default = getattr(StoreConfig(), name)
        type_name = type(default).__name__
        store_values[name] = _coerce(key, type_name, raw) if type_name in ("bool", "int", "str") else raw
    broker = BrokerConfig.from_dict(broker_values)
    store = StoreConfig(**store_values)
    try:
        store.validate()
    except (ValueError, StoreError) as e:
        raise ConfigError(str(e)) from None
    return broker, store_config_for(broker, store)


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(w.upper() if w in ("crc",) else w.capitalize() for w in rest)
