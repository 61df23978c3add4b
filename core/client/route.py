"""Topic routes from the name server, turned into the queues a client uses.

Rules kept here (Java ``MQClientInstance.topicRouteData2TopicPublishInfo``
and ``topicRouteData2TopicSubscribeInfo``):

- Publish queues: for each queue data (sorted by broker name) whose perm
  has WRITE and whose broker has a master (broker id 0), queues
  ``0..writeQueueNums-1``. An ``orderTopicConf`` (``"broker-a:4;broker-b:4"``)
  replaces that list when set.
- Subscribe queues: for each queue data with READ, ``0..readQueueNums-1``.
- A new topic has no route yet; a producer then uses the TBW102 route with
  the queue count capped at ``defaultTopicQueueNums`` (4), and the broker
  creates the topic on the first send (`for_new_topic`).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.client.model import MessageQueue

__all__ = ["PERM_READ", "PERM_WRITE", "BrokerData", "QueueData", "TopicRoute"]

PERM_READ = 4
PERM_WRITE = 2
MASTER_ID = 0


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(frozen=True, slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    addrs: dict  # broker id (int) -> "ip:port"

    @property
    def master_addr(self) -> str | None:
        return self.addrs.get(MASTER_ID)


@dataclass(frozen=True, slots=True)
class TopicRoute:
    topic: str
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    @classmethod
    def from_json(cls, topic: str, doc: dict) -> "TopicRoute":
        qds = tuple(
            QueueData(str(q["brokerName"]), int(q.get("readQueueNums", 0)), int(q.get("writeQueueNums", 0)),
                      int(q.get("perm", 6)), int(q.get("topicSysFlag", q.get("topicSynFlag", 0)) or 0))
            for q in doc.get("queueDatas") or ()
        )
        bds = tuple(
            BrokerData(str(b.get("cluster", "")), str(b["brokerName"]),
                       {int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()})
            for b in doc.get("brokerDatas") or ()
        )
        return cls(topic, qds, bds, doc.get("orderTopicConf") or None)

    def for_new_topic(self, topic: str, default_queue_nums: int) -> "TopicRoute":
        """The TBW102 route re-labelled for ``topic`` with at most ``default_queue_nums`` queues."""
        qds = tuple(
            QueueData(q.broker_name, min(default_queue_nums, q.read_queue_nums),
                      min(default_queue_nums, q.write_queue_nums), q.perm, q.topic_sys_flag)
            for q in self.queue_datas
        )
        return TopicRoute(topic, qds, self.broker_datas)

    def broker_addrs(self) -> dict[str, str]:
        """broker name -> master address (brokers without a master are left out)."""
        return {b.broker_name: b.master_addr for b in self.broker_datas if b.master_addr}

    def subscribe_addrs(self) -> dict[str, str]:
        """broker name -> where to read: the master, else its lowest-id slave
        (4.x ``findBrokerAddressInSubscribe``: consumers go on reading, and
        committing offsets, from a slave while the master is gone)."""
        return {b.broker_name: b.master_addr or b.addrs[min(b.addrs)] for b in self.broker_datas if b.addrs}

    def all_addrs(self) -> set[str]:
        return {addr for b in self.broker_datas for addr in b.addrs.values()}

    def publish_queues(self) -> list[MessageQueue]:
        if self.order_topic_conf:
            out = []
            for item in self.order_topic_conf.split(";"):
                name, _, nums = item.partition(":")
                if name and nums.isdigit():
                    out.extend(MessageQueue(self.topic, name, i) for i in range(int(nums)))
            return out
        masters = self.broker_addrs()
        out = []
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if q.perm & PERM_WRITE and q.broker_name in masters:
                out.extend(MessageQueue(self.topic, q.broker_name, i) for i in range(q.write_queue_nums))
        return out

    def subscribe_queues(self) -> list[MessageQueue]:
        out = []
        for q in self.queue_datas:
            if q.perm & PERM_READ:
                out.extend(MessageQueue(self.topic, q.broker_name, i) for i in range(q.read_queue_nums))
        return sorted(out)
