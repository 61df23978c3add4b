"""The broker groups a gateway node uses, and which of them holds what.

Rules kept here (``gateway.remote_backend`` relies on them):

* The groups are those of the name server's cluster table when the node
  starts, in name order: a group's *index* is its place there, the same on
  every node that saw the same table. The *home* group is index 0 (the
  first name); ``find`` waits, up to 30 s, for it to have a master rather
  than take another. A group that registers later is not used until the
  node restarts (it is logged once).
* ``group_for``: an MQTT publish (a ``mqttTopic`` property) goes to index
  ``crc32(MQTT topic) % number of groups``, so one topic stays on one
  group; anything else (meta records) and delayed messages go home.
* A light queue (``%LMQ%...``) is one queue per group (queue 0 on each
  broker): its reader's ``queue_ids`` are the group indexes. Any other
  topic is read on the home group with its own queue ids (``where``).
* ``addr`` is the group's master now (None while it has none); ``refresh``
  takes a newer cluster table (after a failover, the promoted master).
"""

from __future__ import annotations

import logging
import zlib

import trio

from core.broker import LMQ_TOPIC_PREFIX
from core.client import ClientApi, MQClientError
from core.store import Message
from gateway.mapping import P_TIMER_DELAY, P_TOPIC

log = logging.getLogger("mqgate.gateway")

_ONE = range(1)


def masters_of(table: dict) -> dict[str, str | None]:
    """Broker name -> master address (None: no master now) of a cluster table."""
    out = {}
    for name, data in table.items():
        addrs = (data or {}).get("brokerAddrs") or {}
        out[name] = addrs.get("0", addrs.get(0))
    return out


class BrokerGroups:
    def __init__(self, api: ClientApi, namesrv: list[str], node_id: str) -> None:
        self.api = api
        self.namesrv = namesrv
        self.node_id = node_id
        self.masters: dict[str, str | None] = {}  # every broker name of the last cluster table -> its master
        self.order: list[str] = []  # group index -> broker name (the groups at start)
        self.home_addr = ""

    @property
    def home_name(self) -> str:
        return self.order[0] if self.order else ""

    async def find(self) -> None:
        """Take the groups of the cluster table once the home group has a master."""
        last = None
        with trio.move_on_after(30):
            while True:
                for ns in self.namesrv:
                    try:
                        info = await self.api.get_cluster_info(ns)
                    except Exception as e:  # noqa: BLE001 - try the next name server
                        last = e
                        continue
                    masters = masters_of(info.get("brokerAddrTable") or {})
                    if not masters:
                        last = "no broker is registered"
                        continue
                    # the first name, master or not yet: every node must choose the same group
                    name = sorted(masters)[0]
                    if masters[name]:
                        self.masters, self.order, self.home_addr = masters, sorted(masters), masters[name]
                        log.info("gateway node %s: home broker %s at %s", self.node_id, name, self.home_addr)
                        for other in self.order[1:]:
                            log.info("gateway node %s: broker group %s (master %s)", self.node_id, other,
                                     masters[other])
                        return
                    last = f"broker {name} has no master now"
                await trio.sleep(0.2)
        raise MQClientError(f"no broker found through name servers {';'.join(self.namesrv)}: {last}")

    async def refresh(self) -> None:
        """Ask the name servers for every group's master now."""
        for ns in self.namesrv:
            try:
                info = await self.api.get_cluster_info(ns)
            except Exception:  # noqa: BLE001 - the next name server
                continue
            masters = masters_of(info.get("brokerAddrTable") or {})
            if masters:
                self._take(masters)
            return

    def _take(self, masters: dict[str, str | None]) -> None:
        for name in sorted(set(masters) - set(self.masters)):
            if name not in self.order:
                log.warning("gateway node %s: broker group %s registered after this node started: not used "
                            "until the node restarts (docs/CLUSTER.md)", self.node_id, name)
        self.masters = masters
        master = masters.get(self.home_name)
        if master and master != self.home_addr:
            log.warning("gateway node %s: broker %s now at %s (was %s)", self.node_id, self.home_name, master,
                        self.home_addr)
            self.home_addr = master

    def addr(self, index: int) -> str | None:
        """The master of group ``index`` now; the home group's last known one."""
        if index == 0:
            return self.home_addr
        return self.masters.get(self.order[index]) if index < len(self.order) else None

    def addrs(self) -> list[str]:
        """The masters of every group now (the home one first)."""
        return [a for a in map(self.addr, range(len(self.order))) if a]

    def group_for(self, msg: Message) -> int:
        props = msg.properties
        topic = props.get(P_TOPIC)
        if topic is None or len(self.order) < 2 or P_TIMER_DELAY in props:
            return 0
        return zlib.crc32(topic.encode()) % len(self.order)

    def queue_ids(self, topic: str) -> range:
        return range(len(self.order)) if topic.startswith(LMQ_TOPIC_PREFIX) else _ONE

    def where(self, topic: str, queue_id: int) -> tuple[int, str, int]:
        """(group index, broker name, queue id at that broker) of a reader's queue."""
        if topic.startswith(LMQ_TOPIC_PREFIX):
            return queue_id, self.order[queue_id], 0
        return 0, self.home_name, queue_id
