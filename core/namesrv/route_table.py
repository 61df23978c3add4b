"""The name server's tables: which brokers are alive and which serve each topic.

Modelled on RocketMQ 4.9.x ``RouteInfoManager`` (reference sections 3.1, 9).
Pure bookkeeping: no sockets, no clock (callers pass ``now`` in ms).

Invariants kept here:
- A broker address appears at most once in a broker name's ``addrs`` map:
  re-registering the same address under another id (slave promoted to
  master) first removes the old id.
- Only master registrations (broker id 0) change topic queue data, and they
  replace that broker name's queue data for every topic it serves: a topic
  the master no longer lists loses that broker (it loses its route once no
  broker serves it).
- ``live`` holds exactly the registered addresses; removing the last address
  of a broker name removes the name from its cluster and its queue data
  from every topic.
- Each name server is independent: nothing here talks to another one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable

MASTER_ID = 0
BROKER_EXPIRED_MS = 120_000  # RouteInfoManager.BROKER_CHANNEL_EXPIRED_TIME


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """What a broker registers per topic (``TopicConfig``)."""

    topic_name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, name: str, d: dict[str, Any]) -> "TopicConfig":
        return cls(
            topic_name=str(d.get("topicName") or name),
            read_queue_nums=int(d.get("readQueueNums", 8)),
            write_queue_nums=int(d.get("writeQueueNums", 8)),
            perm=int(d.get("perm", 6)),
            topic_filter_type=str(d.get("topicFilterType") or "SINGLE_TAG"),
            topic_sys_flag=int(d.get("topicSysFlag", d.get("topicSynFlag", 0)) or 0),
            order=_as_bool(d.get("order", False)),
        )


def _as_bool(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1")
    return bool(v)


@dataclass(frozen=True, slots=True)
class DataVersion:
    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> "DataVersion":
        d = d or {}
        counter = d.get("counter", 0)
        if isinstance(counter, dict):  # Java writes AtomicLong as a bare number; be lenient
            counter = counter.get("value", 0)
        return cls(timestamp=int(d.get("timestamp", 0)), counter=int(counter or 0))


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # int keys: the JSON writer decides whether they are quoted (reference 1.6)
        return {"brokerAddrs": dict(sorted(self.addrs.items())), "brokerName": self.broker_name, "cluster": self.cluster}


@dataclass(slots=True)
class BrokerLive:
    last_update_ms: int
    data_version: DataVersion
    channel: Hashable | None
    ha_server_addr: str


@dataclass(frozen=True, slots=True)
class RegisterResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


class RouteTable:
    """Brokers, clusters and topic routes of one name server."""

    def __init__(self) -> None:
        self.topic_queues: dict[str, dict[str, QueueData]] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, BrokerLive] = {}
        self.filter_servers: dict[str, list[str]] = {}

    # ---- registration ----

    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        data_version: DataVersion,
        topic_configs: dict[str, TopicConfig] | None,
        filter_servers: list[str] | None = None,
        channel: Hashable | None = None,
        now_ms: int,
    ) -> RegisterResult:
        self.clusters.setdefault(cluster, set()).add(broker_name)
        bd = self.brokers.get(broker_name)
        first = bd is None
        if bd is None:
            bd = self.brokers[broker_name] = BrokerData(cluster, broker_name)
        for bid in [k for k, a in bd.addrs.items() if a == broker_addr and k != broker_id]:
            del bd.addrs[bid]
        old = bd.addrs.get(broker_id)
        bd.addrs[broker_id] = broker_addr
        first = first or old is None

        prev = self.live.get(broker_addr)
        if broker_id == MASTER_ID and topic_configs is not None:
            if first or prev is None or prev.data_version != data_version:
                self._replace_queue_data(broker_name, topic_configs)
        self.live[broker_addr] = BrokerLive(now_ms, data_version, channel, ha_server_addr)
        if filter_servers:
            self.filter_servers[broker_addr] = list(filter_servers)
        else:
            self.filter_servers.pop(broker_addr, None)

        if broker_id != MASTER_ID:
            master = bd.addrs.get(MASTER_ID)
            if master is not None and master in self.live:
                return RegisterResult(self.live[master].ha_server_addr, master)
        return RegisterResult()

    def _replace_queue_data(self, broker_name: str, topic_configs: dict[str, TopicConfig]) -> None:
        for topic in list(self.topic_queues):
            if topic not in topic_configs:
                self._remove_topic_broker(topic, broker_name)
        for tc in topic_configs.values():
            self.topic_queues.setdefault(tc.topic_name, {})[broker_name] = QueueData(
                broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag
            )

    def _remove_topic_broker(self, topic: str, broker_name: str) -> None:
        qmap = self.topic_queues.get(topic)
        if qmap is not None:
            qmap.pop(broker_name, None)
            if not qmap:
                del self.topic_queues[topic]

    def unregister_broker(self, *, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        self.live.pop(broker_addr, None)
        self.filter_servers.pop(broker_addr, None)
        bd = self.brokers.get(broker_name)
        if bd is not None and bd.addrs.get(broker_id) == broker_addr:
            del bd.addrs[broker_id]
        self._drop_empty_broker(broker_name, cluster)

    def _drop_empty_broker(self, broker_name: str, cluster: str | None) -> None:
        bd = self.brokers.get(broker_name)
        if bd is None or bd.addrs:
            return
        del self.brokers[broker_name]
        for cname in [cluster] if cluster else list(self.clusters):
            names = self.clusters.get(cname)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.clusters[cname]
        for topic in list(self.topic_queues):
            self._remove_topic_broker(topic, broker_name)

    def remove_broker_addr(self, broker_addr: str) -> bool:
        """Forget one broker address (channel closed or expired); True if it was known."""
        known = self.live.pop(broker_addr, None) is not None
        self.filter_servers.pop(broker_addr, None)
        for bd in list(self.brokers.values()):
            for bid in [k for k, a in bd.addrs.items() if a == broker_addr]:
                del bd.addrs[bid]
                known = True
            self._drop_empty_broker(bd.broker_name, bd.cluster)
        return known

    def on_channel_closed(self, channel: Hashable) -> list[str]:
        """Remove the brokers registered through ``channel``; their addresses."""
        gone = [addr for addr, lv in self.live.items() if lv.channel is not None and lv.channel == channel]
        for addr in gone:
            self.remove_broker_addr(addr)
        return gone

    def expire(self, now_ms: int, max_idle_ms: int = BROKER_EXPIRED_MS) -> list[str]:
        """Remove brokers not registered for more than ``max_idle_ms``; their addresses."""
        gone = [addr for addr, lv in self.live.items() if now_ms - lv.last_update_ms > max_idle_ms]
        for addr in gone:
            self.remove_broker_addr(addr)
        return gone

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """DELETE_TOPIC_IN_NAMESRV: forget the topic's queue data (only that of
        ``cluster``'s brokers when given); True if there was any. A broker that
        still has the topic brings it back when its data version changes."""
        qmap = self.topic_queues.get(topic)
        if qmap is None:
            return False
        names = set(qmap) if not cluster else set(qmap) & self.clusters.get(cluster, set())
        for name in names:
            self._remove_topic_broker(topic, name)
        return bool(names)

    # ---- queries ----

    def route(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData as a JSON-ready dict (int keys in brokerAddrs), or None."""
        qmap = self.topic_queues.get(topic)
        if not qmap:
            return None
        broker_datas = []
        filter_table: dict[str, list[str]] = {}
        for name in sorted(qmap):
            bd = self.brokers.get(name)
            if bd is None or not bd.addrs:
                continue
            broker_datas.append(bd.to_json())
            for addr in bd.addrs.values():
                if addr in self.filter_servers:
                    filter_table[addr] = self.filter_servers[addr]
        if not broker_datas:
            return None
        return {
            "brokerDatas": broker_datas,
            "filterServerTable": filter_table,
            "queueDatas": [qmap[n].to_json() for n in sorted(qmap)],
        }

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {name: bd.to_json() for name, bd in sorted(self.brokers.items())},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.clusters.items())},
        }

    def topic_list(self) -> list[str]:
        return sorted(self.topic_queues)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self.clusters.get(cluster, set())
        return sorted(t for t, qmap in self.topic_queues.items() if names.intersection(qmap))
