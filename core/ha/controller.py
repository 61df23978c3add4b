"""`Controller`: automatic failover of a broker group through etcd.

Every broker of a group (``brokerName``) that has ``etcdEndpoints`` runs one.
Nothing is decided between brokers directly: etcd holds the group's state
under ``<etcdKeyPrefix>/<cluster>/<brokerName>/``:

- ``leader``: the master: configured id, remoting and HA addresses, epoch;
  attached to the master's lease, so it disappears when the master stops
  renewing it (``haLeaseTtlMs``).
- ``epoch``: the group's epoch counter; only a successful election moves it.
- ``replicas/<configured id>``: each live broker's role, epoch and log end,
  attached to its own lease, refreshed every ``PUBLISH_S``.
- ``confirmed``: the highest log offset a SYNC_MASTER acknowledged.

Rules kept:
- An election is one etcd transaction: it succeeds only if no leader key
  exists and the epoch is still the one the candidate read; it writes the
  leader key (with the candidate's lease) and epoch + 1 together.  So two
  masters never hold the same epoch, and a stale candidate loses.
- A candidate campaigns only if it is the live replica with the most log
  (ties: the lowest configured id), and never with less log than
  ``confirmed``: no acknowledged SYNC write is left behind.  It waits
  ``ELECTION_WAIT_S`` after the leader vanished so every live replica can
  publish its final offset.
- A master fences itself: when it cannot renew its lease before
  ``last renewal sent + TTL - FENCE_MARGIN_S`` (etcd expires the key no
  earlier than that), it stops acknowledging writes at once and becomes a
  slave.  No new master can be elected before the key expires, so a cut-off
  master has stopped acknowledging before another exists.
- A slave follows whoever the leader key names; when it names a broker that
  is not its current master, the slave's parts restart to follow it (once:
  not again while that change is under way, ``HANode.next_change``).
- A slave the leader key names gives the lead up (deletes the key), unless
  its promotion is under way (``HANode.becoming_master``): the slave's parts
  stop before the role is taken, and that can outlast a round of the watch
  (a loaded disk's fsyncs). Giving up a lead just won made the new master
  fence itself ("the leader key is gone") right after it opened its MQTT
  listener, and again at every election while stops stayed slow.
"""

from __future__ import annotations

import json
import logging
import math
import time

import trio

from core.broker import BrokerRole

from .etcd import Compare, EtcdClient, EtcdError, EtcdUnavailable, LeaseNotFound, Op
from .node import RoleChange

log = logging.getLogger("mqgate.ha.controller")

PUBLISH_S = 0.5
ELECTION_WAIT_S = 0.6
FENCE_MARGIN_S = 0.3


class Controller:
    def __init__(self, node, config):
        self.node = node
        self.config = config
        self.me = config.broker_id
        self.ttl_s = max(2, math.ceil(config.ha_lease_ttl_ms / 1000))
        base = f"{config.etcd_key_prefix.rstrip('/')}/{config.broker_cluster_name}/{config.broker_name}"
        self.k_leader = f"{base}/leader"
        self.k_epoch = f"{base}/epoch"
        self.k_confirmed = f"{base}/confirmed"
        self.k_replicas = f"{base}/replicas/"
        self.etcd = EtcdClient(config.etcd_endpoint_list(), timeout=min(1.0, self.ttl_s / 3))
        self.lease = 0
        self.valid_until = 0.0  # monotonic time before which this broker's lease surely lives
        self.leader: dict | None = None
        self.leader_rev = 0  # create revision of the leader key this broker wrote when elected
        self.fencing = False
        self.elections_won = 0
        self._published_confirmed = -1

    # ---------------------------------------------------------------- status

    def status(self) -> dict:
        return {"etcd": self.config.etcd_endpoints, "lease": self.lease, "leaseTtlS": self.ttl_s,
                "leaseValidForMs": max(0, int((self.valid_until - time.monotonic()) * 1000)),
                "leader": self.leader, "electionsWon": self.elections_won}

    # ---------------------------------------------------------------- lifetime

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with self.etcd:
            await self._grant_until_done()
            await self._initial_role()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keepalive_loop)
                nursery.start_soon(self._fence_watch)
                task_status.started()
                await self._watch_loop()

    async def _grant_until_done(self) -> None:
        while True:
            try:
                sent = time.monotonic()
                self.lease = await self.etcd.lease_grant(self.ttl_s)
                self.valid_until = sent + self.ttl_s - FENCE_MARGIN_S
                return
            except EtcdError as e:
                log.warning("etcd %s: %s; retrying", self.config.etcd_endpoints, e)
                await trio.sleep(1)

    async def _initial_role(self) -> None:
        """Before the first run: a slave, following the leader if there is one.
        Elections happen once the store is open (the log end is known)."""
        node = self.node
        node.role = BrokerRole.SLAVE
        while True:
            try:
                leader = await self._read_leader()
                break
            except EtcdError as e:
                log.warning("etcd %s: %s; retrying", self.config.etcd_endpoints, e)
                await trio.sleep(1)
        self.leader = leader
        if leader is not None and leader.get("id") != self.me:
            self._follow(leader, initial=True)

    # ---------------------------------------------------------------- leases and fencing

    async def _keepalive_loop(self) -> None:
        while True:
            await trio.sleep(self.ttl_s / 3)
            sent = time.monotonic()
            try:
                await self.etcd.lease_keepalive(self.lease)
                self.valid_until = sent + self.ttl_s - FENCE_MARGIN_S
            except LeaseNotFound:
                log.warning("etcd lease %x expired", self.lease)
                self._fence("the lease expired")
                await self._grant_until_done()
            except EtcdError as e:
                log.warning("renewing the etcd lease failed: %s", e)

    async def _fence_watch(self) -> None:
        while True:
            await trio.sleep(0.05)
            if time.monotonic() >= self.valid_until:
                self._fence("etcd did not renew the lease in time")

    def _fence(self, why: str) -> None:
        node = self.node
        if not node.is_master or self.fencing:
            return
        self.fencing = True
        if node.broker is not None:
            node.broker.fenced = True  # no acknowledgement from here on
        log.error("fenced: %s; this master stops acknowledging writes and becomes a slave", why)
        node.request_change(RoleChange(BrokerRole.SLAVE, node.epochs.epoch, reason=f"fenced: {why}"))

    # ---------------------------------------------------------------- watching

    async def _read_leader(self) -> dict | None:
        kv = await self.etcd.get(self.k_leader)
        if kv is None:
            return None
        try:
            value = json.loads(kv.value)
        except ValueError:
            return None
        return value if isinstance(value, dict) and "id" in value else None

    async def _watch_loop(self) -> None:
        gone_since = None
        while True:
            await trio.sleep(PUBLISH_S)
            node = self.node
            if not node.is_master:
                self.fencing = False
            try:
                await self._publish()
                leader = await self._read_leader()
            except EtcdError as e:
                if not isinstance(e, EtcdUnavailable):
                    log.warning("etcd: %s", e)
                continue  # the fence watch acts if this lasts
            self.leader = leader
            if leader is not None:
                gone_since = None
                if leader["id"] == self.me:
                    # elected, the slave's parts still stopping: the lead is ours, keep it
                    if not node.is_master and not node.becoming_master:
                        log.warning("etcd names this broker leader but it is a slave: giving the lead up")
                        await self._resign()
                    continue
                if node.is_master:
                    self._fence(f"etcd names {leader.get('addr')} (id {leader['id']}) master")
                    continue
                self._follow(leader)
                continue
            if node.is_master:
                self._fence("the leader key is gone")
                continue
            gone_since = gone_since or time.monotonic()
            if time.monotonic() - gone_since >= ELECTION_WAIT_S and node.broker is not None:
                if await self._campaign():
                    gone_since = None

    async def _publish(self) -> None:
        node = self.node
        store = node.broker.store if node.broker is not None else None
        value = {"id": self.me, "addr": node.own_addr, "role": node.role.name, "epoch": node.epochs.epoch,
                 "offset": store.dispatched_offset if store is not None else -1, "ts": int(time.time() * 1000)}
        mine = Op.put(self.k_replicas + str(self.me), json.dumps(value), lease=self.lease)
        if not node.is_master or self.fencing or node.broker is None or not self.leader_rev:
            await self.etcd.txn([], [mine])
            return
        ops = [mine, Op.put(self.k_leader, json.dumps(self._leader_value()), lease=self.lease)]
        service = node.service
        if service is not None and service.confirmed > self._published_confirmed:
            ops.append(Op.put(self.k_confirmed, str(service.confirmed)))
        # the leader value (addresses known now) and confirmed offset are written only while this broker leads
        if (await self.etcd.txn([Compare.create_revision(self.k_leader, "=", self.leader_rev)], ops, [mine])).succeeded:
            if service is not None:
                self._published_confirmed = max(self._published_confirmed, service.confirmed)

    def _leader_value(self) -> dict:
        node = self.node
        port = node.service.port if node.service is not None else None
        return {"id": self.me, "addr": node.own_addr, "haAddr": f"{self.config.broker_ip1}:{port}" if port else "",
                "epoch": node.epochs.epoch}

    def _follow(self, leader: dict, initial: bool = False) -> None:
        node = self.node
        if not leader.get("addr") or not leader.get("haAddr"):
            return  # just elected: its addresses come with its next publish
        slave_id = self.me or int(leader["id"]) or 1
        if (not node.is_master and node.told_master_addr == leader["addr"] and node.slave_id == slave_id
                and node.told_master_ha_addr == leader["haAddr"] and not initial):
            return
        change = RoleChange(BrokerRole.SLAVE, int(leader.get("epoch", 0)), leader["addr"], leader["haAddr"],
                            slave_id, f"etcd names {leader['addr']} (id {leader['id']}) master")
        if not initial and node.next_change == change:
            return  # asked for already, the parts still stopping: a second ask would restart them again
        if initial:
            node.apply(change)
        else:
            node.request_change(change)

    async def _resign(self) -> None:
        kv = await self.etcd.get(self.k_leader)
        if kv is not None:
            await self.etcd.txn([Compare.mod_revision(self.k_leader, "=", kv.mod_revision)], [Op.delete(self.k_leader)])

    # ---------------------------------------------------------------- elections

    async def _campaign(self) -> bool:
        """Try to lead: only the live replica with the newest epoch and most log, never below ``confirmed``."""
        node = self.node
        try:
            epoch_kv = await self.etcd.get(self.k_epoch)
            epoch = int(epoch_kv.value) if epoch_kv is not None else 0
            confirmed_kv = await self.etcd.get(self.k_confirmed)
            confirmed = int(confirmed_kv.value) if confirmed_kv is not None else 0
            replicas = [json.loads(kv.value) for kv in await self.etcd.get_prefix(self.k_replicas)]
        except (EtcdError, ValueError) as e:
            log.warning("election: etcd: %s", e)
            return False
        mine = node.broker.store.dispatched_offset
        if mine < confirmed:
            log.error("election: this broker holds %d bytes of log, less than the %d a SYNC master acknowledged: "
                      "it will not take the lead", mine, confirmed)
            return False
        me = (node.epochs.epoch, mine, -self.me)
        for r in replicas:
            if r.get("id") != self.me and (int(r.get("epoch", 0)), int(r.get("offset", -1)), -int(r.get("id", 0))) > me:
                return False  # a live replica with a newer epoch, more log or a lower id should lead
        new_epoch = max(epoch, node.epochs.epoch) + 1
        compare = [Compare.create_revision(self.k_leader, "=", 0),
                   Compare.value(self.k_epoch, "=", str(epoch).encode()) if epoch_kv is not None
                   else Compare.create_revision(self.k_epoch, "=", 0)]
        value = {"id": self.me, "addr": node.own_addr, "haAddr": "", "epoch": new_epoch}
        try:
            result = await self.etcd.txn(compare, [Op.put(self.k_leader, json.dumps(value), lease=self.lease),
                                                   Op.put(self.k_epoch, str(new_epoch))])
        except EtcdError as e:
            log.warning("election: etcd: %s", e)
            return False
        if not result.succeeded:
            return False
        kv = await self.etcd.get(self.k_leader)
        self.leader_rev = kv.create_revision if kv is not None else 0
        self.elections_won += 1
        log.warning("elected master of %s at epoch %d (log end %d)", self.config.broker_name, new_epoch, mine)
        role = self.config.ha_promote_role if self.config.broker_role is BrokerRole.SLAVE else self.config.broker_role
        node.request_change(RoleChange(role, new_epoch, reason="elected through etcd"))
        return True
