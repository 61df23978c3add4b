"""Which gateway node owns a client id: etcd decides (``mqgate gateway --etcd``, issue 20).

Without etcd, the order of the meta records decides (``gateway.cluster``),
which lets two nodes run one client id for a moment. With etcd, a client id
has one owner key, ``<etcdKeyPrefix>/gateway/<brokerClusterName>/owner/<client id>``,
whose value is the owning node's id, put with that node's lease:

* Each node holds one lease of ``ttl`` seconds (``[mqtt] ownerLeaseTtl``, 5), renewed every third of
  it. A node whose renewals have failed for a whole TTL counts its lease as
  lost: it closes the connections it owns (they may be owned elsewhere by
  now, ``on_lost``) and grants itself a new lease. A SIGKILLed node's keys go
  when its lease expires, ``ttl`` after its last renewal.
* A CONNECT runs inside ``claim``: the key is taken in a transaction (absent,
  or already this node's), and only then is the session read and the
  CONNACK sent. When another node owns it, this node asks that node once to
  release it (``ask``: a ``"rel"`` meta record, ``gateway.cluster``) and tries
  the transaction again until ``take_wait`` (TTL + 3 s) has passed: then the CONNECT is
  refused (``OwnerUnavailable``), never run beside the other owner. etcd not
  answering refuses it too. Two CONNECTs racing on two nodes: one
  transaction wins, the other asks and waits.
* The owner releases (``release``) after its connection is closed and the
  session's final record is written; never while a CONNECT of the same
  client id is under way here (a takeover on one node keeps the key). The
  delete is a transaction on the value, so a node never deletes another
  node's key.
* ``close`` (node stop, after the drain) revokes the lease: every key of the
  node goes at once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from core.ha import Compare, EtcdClient, EtcdError, KeyValue, LeaseNotFound, Op

log = logging.getLogger("mqgate.gateway")

OWNER_TTL = 5  # seconds a node's lease lives without renewal
TAKE_MARGIN = 3.0  # a CONNECT waits for another node's key at most the TTL plus this (``take_wait``)
ETCD_TIMEOUT = 1.0  # seconds per etcd request (a CONNECT is refused after it when etcd is silent)
_FIRST_PAUSE = 0.02  # seconds between the transactions of a waiting CONNECT, doubling ...
_MAX_PAUSE = 0.25  # ... up to this


class OwnerUnavailable(Exception):
    """A CONNECT cannot own its client id now (one line: why)."""


def owner_prefix(key_prefix: str, cluster: str) -> str:
    return f"{key_prefix.rstrip('/')}/gateway/{cluster}/owner/"


class ClientOwners:
    """This node's lease and the client ids it owns in etcd."""

    def __init__(self, etcd: EtcdClient, prefix: str, node_id: str, ttl: int = OWNER_TTL) -> None:
        self.etcd = etcd
        self.prefix = prefix
        self.node_id = node_id
        self.ttl = ttl
        self.take_wait = ttl + TAKE_MARGIN  # seconds a CONNECT waits for another node's key to go
        self.lease = 0  # 0: none (not granted yet, or lost)
        self._claims: dict[str, int] = {}  # client id -> CONNECTs under way here
        self._claims_changed = trio.Event()

    def key(self, cid: str) -> str:
        return self.prefix + cid

    # ---- the lease ----------------------------------------------------------------------------

    async def run(self, on_lost: Callable[[], None], *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self._grant()
        task_status.started()
        renewed = trio.current_time()
        while True:
            await trio.sleep(self.ttl / 3)
            if not self.lease:
                if await self._grant():
                    renewed = trio.current_time()
                continue
            asked = trio.current_time()
            try:
                await self.etcd.lease_keepalive(self.lease)
                renewed = asked
                continue
            except LeaseNotFound:
                why = "etcd says it is gone"
            except EtcdError as e:
                if trio.current_time() - renewed < self.ttl:
                    log.warning("gateway node %s: etcd lease not renewed: %s", self.node_id, e)
                    continue
                why = f"not renewed for {self.ttl} s ({e})"
            log.warning("gateway node %s: etcd lease %x lost (%s): closing its clients", self.node_id, self.lease,
                        why)
            self.lease = 0
            on_lost()

    async def _grant(self) -> bool:
        try:
            self.lease = await self.etcd.lease_grant(self.ttl)
        except EtcdError as e:
            log.warning("gateway node %s: no etcd lease (CONNECTs are refused until etcd answers): %s",
                        self.node_id, e)
            return False
        log.info("gateway node %s: client ids owned under etcd lease %x (TTL %d s)", self.node_id, self.lease,
                 self.ttl)
        return True

    async def close(self) -> None:
        """Revoke the lease: every owner key of this node goes."""
        lease, self.lease = self.lease, 0
        if lease:
            try:
                await self.etcd.lease_revoke(lease)
            except EtcdError as e:
                log.warning("gateway node %s: etcd lease not revoked (its keys go in %d s): %s", self.node_id,
                            self.ttl, e)

    # ---- owning -------------------------------------------------------------------------------

    @asynccontextmanager
    async def claim(self, cid: str, ask: Callable[[str, str], Awaitable[None]]):
        """Own ``cid`` for a CONNECT (``OwnerUnavailable`` if not within ``take_wait``)."""
        self._claims[cid] = self._claims.get(cid, 0) + 1
        try:
            await self._take(cid, ask)
            yield
        finally:
            n = self._claims.pop(cid) - 1
            if n:
                self._claims[cid] = n
            self._claims_changed.set()
            self._claims_changed = trio.Event()

    async def _take(self, cid: str, ask: Callable[[str, str], Awaitable[None]]) -> None:
        key, me = self.key(cid), self.node_id
        deadline = trio.current_time() + self.take_wait
        asked = None
        pause = _FIRST_PAUSE
        while True:
            if not self.lease:
                raise OwnerUnavailable("this gateway node has no etcd lease (etcd unreachable)")
            try:
                r = await self.etcd.txn([Compare.version(key, "=", 0)], [Op.put(key, me, self.lease)], [Op.get(key)])
                if r.succeeded:
                    return
                owner = _owner(r.responses)
                if owner == me:  # ours already (another connection here, or an earlier lease)
                    r = await self.etcd.txn([Compare.value(key, "=", me)], [Op.put(key, me, self.lease)])
                    if r.succeeded:
                        return
                    continue
            except EtcdError as e:
                raise OwnerUnavailable(f"etcd: {e}") from None
            if owner is None:
                continue  # released between the compare and the get
            if owner != asked:
                asked = owner
                await ask(cid, owner)
            if trio.current_time() >= deadline:
                raise OwnerUnavailable(f"client id still owned by gateway node {owner} after {self.take_wait:g} s")
            await trio.sleep(pause)
            pause = min(pause * 2, _MAX_PAUSE)

    def claimed(self, cid: str) -> bool:
        """A CONNECT of ``cid`` is under way here."""
        return cid in self._claims

    async def claims_done(self, cid: str) -> None:
        while cid in self._claims:
            await self._claims_changed.wait()

    async def release(self, cid: str) -> None:
        """Delete the owner key of ``cid`` if it is this node's and no CONNECT
        of it is under way here (a failure is logged: the key then goes when
        another node asks again, or with the lease)."""
        if cid in self._claims:
            return
        key = self.key(cid)
        try:
            await self.etcd.txn([Compare.value(key, "=", self.node_id)], [Op.delete(key)])
        except EtcdError as e:
            log.warning("client %s: owner key not released: %s", cid, e)


def _owner(responses: list) -> str | None:
    """The value of the key a failed transaction's ``Op.get`` read (None: absent)."""
    for resp in responses:
        kvs = (resp.get("response_range") or {}).get("kvs") or []
        if kvs:
            return KeyValue.from_json(kvs[0]).value.decode()
    return None
