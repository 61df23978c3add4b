"""`HANode`: one broker's place in its replication group, across role changes.

A broker process runs its parts (store, remoting, HA link, MQTT edge) for
one role at a time; a role change stops them and starts them again in the
new role over the same data directory (`gateway.broker_node` runs that
loop).  `HANode` is what outlives a run: the configured identity, the
current role and epoch (`EpochTable`), where the master is, and a pending
change or cut.

Rules kept:
- The configured ``brokerId`` is the broker's identity; the registered id
  is 0 while master, else the configured id, or (a configured master now a
  slave) the id it was told to take when demoted.
- A master appends ``[epoch, log end]`` to its epochs before it serves; a
  slave, each time its link opens, compares its epochs with its master's
  (GET_BROKER_EPOCH_CACHE) and, if it holds bytes the master never had, asks
  for a restart with its log cut at the last consistent point.
- NOTIFY_BROKER_ROLE_CHANGED (1008) is obeyed only for a newer epoch (a
  stale order from a deposed controller changes nothing); it is answered
  before the parts stop.
- ``role`` changes only when a change is applied, after the old parts have
  stopped (their store shut down: fsyncs, slow on a loaded disk); until
  then ``next_change`` and ``becoming_master`` tell what is on its way, so
  the etcd controller neither takes a slave that was just elected for one
  that must give the lead up, nor asks again for a change already coming.
"""

from __future__ import annotations

import errno

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import trio

from core.broker import Broker, BrokerConfig, BrokerRole
from core.remoting import RemotingCommand, RequestCode, ResponseCode, decode_json
from core.remoting.client import RemotingClient, RemotingConnectionError, RemotingTimeoutError

from .epochs import EpochTable, consistent_point
from .master import HAService
from .slave import HAClient, RestartForCut

log = logging.getLogger("mqgate.ha")


@dataclass(frozen=True)
class RoleChange:
    role: BrokerRole
    epoch: int
    master_addr: str = ""  # remoting address of the new master (for a slave)
    master_ha_addr: str = ""
    broker_id: int = 0  # the id a slave registers with (0 = its configured one)
    reason: str = ""


class HANode:
    def __init__(self, config: BrokerConfig, root: str | Path):
        self.config = config
        self.root = Path(root)
        self.epochs = EpochTable(self.root).load()
        self.role = config.broker_role
        self.slave_id = config.broker_id or 1
        self.told_master_addr = ""
        self.told_master_ha_addr = ""
        self.cut_to: int | None = None  # truncate the log here before the next run
        self.next_epoch = 0  # a promotion's epoch, recorded once the store is open
        self.service: HAService | None = None
        self.client: HAClient | None = None
        self.broker: Broker | None = None
        self.registrar = None  # set by the process loop: masterAddr / haServerAddr answers
        self.rc: RemotingClient | None = None
        self.controller = None  # core.ha.controller.Controller when etcd is configured
        self.metadata = None  # core.ha.metadata.SlaveMetadataSync on a slave
        self._change: RoleChange | None = None  # requested, not yet taken by the process loop
        self._applying: RoleChange | None = None  # taken (the parts stopping), not yet applied
        self._changed = trio.Event()
        self.changes = 0
        self.own_addr = ""  # the remoting address this broker registers

    # ---------------------------------------------------------------- identity

    @property
    def is_master(self) -> bool:
        return self.role is not BrokerRole.SLAVE

    @property
    def next_change(self) -> RoleChange | None:
        """The newest change requested or under way (the parts stopping), not yet applied."""
        return self._change if self._change is not None else self._applying

    @property
    def becoming_master(self) -> bool:
        """The next change (``next_change``) gives this broker a master role."""
        change = self.next_change
        return change is not None and change.role is not BrokerRole.SLAVE

    def run_config(self) -> BrokerConfig:
        """The config of the next run: role, and the id to register with."""
        return self.config.replace(broker_role=self.role, broker_id=0 if self.is_master else self.slave_id)

    # ---------------------------------------------------------------- changes

    def request_change(self, change: RoleChange) -> None:
        self._change = change
        self._changed.set()

    async def wait_change(self) -> RoleChange:
        await self._changed.wait()
        self._changed = trio.Event()
        change, self._change = self._change, None
        self._applying = change
        return change

    def apply(self, change: RoleChange) -> None:
        """Take ``change`` for the next run (called between runs)."""
        self._applying = None
        self.changes += 1
        if change.role is not BrokerRole.SLAVE:
            self.role = change.role
            self.next_epoch = change.epoch
        else:
            self.role = BrokerRole.SLAVE
            if change.broker_id:
                self.slave_id = change.broker_id
            self.told_master_addr = change.master_addr or self.told_master_addr
            self.told_master_ha_addr = change.master_ha_addr or self.told_master_ha_addr
        log.warning("role change: now %s (epoch %d)%s", self.role.name, change.epoch,
                    f": {change.reason}" if change.reason else "")

    # ---------------------------------------------------------------- where the master is

    def master_addr(self) -> str | None:
        learned = getattr(self.registrar, "master_addr", None) if self.registrar is not None else None
        return learned or self.told_master_addr or None

    def master_ha_addr(self) -> str | None:
        if self.config.ha_master_address:
            return self.config.ha_master_address
        learned = getattr(self.registrar, "ha_server_addr", None) if self.registrar is not None else None
        return learned or self.told_master_ha_addr or None

    # ---------------------------------------------------------------- the parts of one run

    async def start_master(self, nursery: trio.Nursery, broker: Broker, host: str | None) -> str:
        """Record the epoch, serve the HA port; returns the HA address to register."""
        cfg = broker.config
        self.broker = broker
        recovered = await broker.recover_topics_from_store()
        if recovered:
            log.warning("topics %s had queues in the replicated log but no config (created on the old master "
                        "after the last metadata sync): recreated", ", ".join(recovered))
        epoch = max(self.next_epoch, 1)
        if epoch > self.epochs.epoch:  # a first master opens epoch 1, so rejoins can be compared
            self.epochs.begin(epoch, broker.store.max_phy_offset)
        self.service = HAService.from_config(broker.store, cfg)
        wanted = cfg.ha_port_for(cfg.listen_port)
        try:
            port = await nursery.start(self.service.serve, host, wanted)
        except OSError as exc:
            if cfg.ha_listen_port >= 0 or exc.errno != errno.EADDRINUSE:
                raise
            # haListenPort was not set and listen port + 1 is taken: slaves learn
            # the real port from the name server (the haServerAddr of the registration)
            log.warning("HA port %d (listen port + 1) is in use; serving replication on a free port "
                        "(set haListenPort to fix it)", wanted)
            port = await nursery.start(self.service.serve, host, 0)
        broker.add_dispatch_listener(self.service.notify_written)
        if cfg.broker_role is BrokerRole.SYNC_MASTER:
            broker.replicator = self.service
        log.info("replication: master (epoch %d), HA port %d", self.epochs.epoch, port)
        return f"{cfg.broker_ip1}:{port}"

    async def start_slave(self, nursery: trio.Nursery, broker: Broker) -> None:
        self.broker = broker
        self.client = HAClient.from_config(broker.store, self.master_ha_addr, broker.config)
        self.client.before_link = self._check_epochs
        await nursery.start(self.client.run)
        log.info("replication: slave (id %d) of %s", self.slave_id, self.master_ha_addr() or "a master not known yet")

    async def find_newer_master(self, namesrv_addrs: list[str]) -> None:
        """At start, without etcd: a configured master whose group already has
        another master of a newer or equal epoch registered (it was failed over
        while this one was down) starts as that master's slave instead."""
        if not self.is_master or self.rc is None:
            return
        for ns in namesrv_addrs:
            try:
                resp = await self.rc.invoke(ns, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout=3.0)
                table = decode_json(resp.body or b"{}").get("brokerAddrTable") or {}
                addrs = (table.get(self.config.broker_name) or {}).get("brokerAddrs") or {}
                addr = {int(k): v for k, v in addrs.items()}.get(0)
                if not addr:
                    continue
                st = await self.rc.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS), timeout=3.0)
            except (RemotingConnectionError, RemotingTimeoutError, OSError, ValueError):
                continue
            if st.code != ResponseCode.SUCCESS:
                continue
            other = json.loads(st.body)
            if other.get("role") != "SLAVE" and other.get("epoch", 0) >= self.epochs.epoch and addr != self.own_addr:
                self.apply(RoleChange(BrokerRole.SLAVE, other["epoch"], addr, other.get("haAddr", ""),
                                      int(other.get("configuredBrokerId") or 1),
                                      f"{addr} is master of {self.config.broker_name} at epoch {other['epoch']}"))
                return

    def stopped(self) -> None:
        self.service = self.client = self.broker = self.metadata = None

    async def _check_epochs(self) -> None:
        """Before a link opens: cut what the master never had, or adopt its epochs."""
        addr = self.master_addr()
        if not addr or self.rc is None:
            return  # a plain 4.x pair without a name server: nothing to compare with
        try:
            resp = await self.rc.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE), timeout=3.0)
        except (RemotingConnectionError, RemotingTimeoutError, OSError) as e:
            raise OSError(f"epochs of master {addr}: {e}") from None
        if resp.code != ResponseCode.SUCCESS:
            return  # a master without epochs (RocketMQ 4.x): follow it as 4.x does
        data = json.loads(resp.body)
        theirs = [tuple(e) for e in data.get("epochs", [])]
        store = self.broker.store
        end = store.max_phy_offset
        point = consistent_point(self.epochs.entries, end, theirs, int(data.get("maxOffset", 0)))
        if point < end:
            self.cut_to = max(point, 0)
            self.request_change(RoleChange(BrokerRole.SLAVE, self.epochs.epoch,
                                           reason=f"log ends at {end}, master {addr} agrees up to {point}: cutting"))
            raise RestartForCut(f"cut to {self.cut_to}")
        self.epochs.follow(theirs, end)

    # ---------------------------------------------------------------- status

    def status(self) -> dict:
        broker = self.broker
        store = broker.store if broker is not None else None
        out = {
            "brokerName": self.config.broker_name,
            "configuredBrokerId": self.config.broker_id,
            "brokerId": 0 if self.is_master else self.slave_id,
            "role": self.role.name,
            "haAddr": f"{self.config.broker_ip1}:{self.service.port}" if self.service and self.service.port else "",
            "epoch": self.epochs.epoch,
            "epochs": [list(e) for e in self.epochs.entries],
            "minOffset": store.min_phy_offset if store else -1,
            "maxOffset": store.max_phy_offset if store else -1,
            "slaves": self.service.status() if self.service else [],
            "master": self.client.status() if self.client else None,
            "metadata": self.metadata.status() if self.metadata else None,
        }
        if self.controller is not None:
            out["controller"] = self.controller.status()
        return out


def ha_routes(node: HANode, route: Callable) -> dict[int, object]:
    """Remoting routes of the HA requests; ``route(fn)`` wraps a handler ``fn(channel, req)``."""

    async def ha_status(channel, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(node.status()).encode())

    async def epoch_cache(channel, req: RemotingCommand) -> RemotingCommand:
        store = node.broker.store if node.broker else None
        body = {"epochs": [list(e) for e in node.epochs.entries], "maxOffset": store.max_phy_offset if store else 0}
        return req.make_response(ResponseCode.SUCCESS, body=json.dumps(body).encode())

    async def role_changed(channel, req: RemotingCommand) -> RemotingCommand:
        role_text = req.get_str("role", "").upper()
        epoch = req.get_long("epoch", 0)
        if role_text not in ("MASTER", "SLAVE"):
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"role must be MASTER or SLAVE, not {role_text!r}")
        if role_text == "MASTER" and epoch <= node.epochs.epoch:
            return req.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"epoch {epoch} is not after this broker's epoch {node.epochs.epoch}")
        if node.controller is not None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, "failover is automatic here (etcdEndpoints is set): "
                                     "stop the master to fail over, or clear etcdEndpoints")
        role = node.config.ha_promote_role if role_text == "MASTER" else BrokerRole.SLAVE
        node.request_change(RoleChange(role, epoch, req.get_str("masterAddr", ""), req.get_str("masterHaAddr", ""),
                                       req.get_long("brokerId", 0), req.get_str("reason", "") or "ordered by an operator"))
        return req.make_response(ResponseCode.SUCCESS)

    return {
        RequestCode.GET_BROKER_HA_STATUS: route(ha_status),
        RequestCode.GET_BROKER_EPOCH_CACHE: route(epoch_cache),
        RequestCode.NOTIFY_BROKER_ROLE_CHANGED: route(role_changed),
    }
