"""One gateway node among several: the cluster-wide trie, retained index and session moves.

Used by ``mqgate gateway`` (``MQTTGateway(..., cluster=ClusterSync(...))``);
``mqgate serve`` has none. Every node tails the meta topic
(``gateway.meta``) that all nodes write, and so knows every session of the
cluster:

* A session of another node is a *stub* in this node's router
  (``Session.node`` = that node's id): its subscriptions are in the trie,
  it has no connection. A publish on this node that matches a persistent
  stub adds the stub's session queue to ``INNER_MULTI_DISPATCH``; one that
  matches a non-persistent stub adds that node's *node queue*
  (``node_queue_name``), once per node. So every publish is stored once,
  and wildcards need no registration.
* Each node long-polls its node queue and hands what it reads to its own
  connected non-persistent sessions that match (the router's trie), and
  long-polls the session queue of each connected persistent session
  (``BrokerBackend.watch_queue``).
* Non-persistent sessions announce their subscriptions with ``"live"``
  records keyed ``<node>/<client id>``; persistent ones are the ``"sess"``
  records (with ``"node"``). ``"ret"`` records keep one retained index
  per cluster.
* Session moves follow the order of the meta log (the broker's append
  order decides which write is last): a ``"sess"`` or ``"live"`` record of
  another node about a client id connected here closes the connection
  here (0x8E, a takeover: its will follows the specification), and the
  session becomes a stub; an offline session of this node that another
  node takes loses its expiry and will timers here.
* With etcd (``gateway.owners``) the owner key decides instead: a
  CONNECT runs inside ``claim``, a ``"rel"`` record naming this node asks it
  to close that client's connection (0x8E) and release the key once the
  session's final record is written, and a record of another node never
  closes a connection here (that node wrote it without owning the id).
  ``wait_release`` does not wait then.
* Before a CONNECT decides about its client id, ``catch_up`` reads the meta
  queue to its end; a read that fails (the home broker does not answer)
  raises ``MetaUnavailable`` and the CONNECT is refused (0x88, 3.1.1: 3),
  never decided on what the tail had seen so far.
* A node's own records come back through the tail and are skipped
  (``mqgateNode`` property), except by the image of the meta records
  (``gateway.node_meta_log``), which holds every node's, in queue order:
  the leader compacts them; snapshot records (``mqgateSnapOf``) are
  skipped by every tail.
* A node the brokers no longer list (``gateway.membership``) is dead: every
  node forgets its non-persistent stubs, and the leader publishes the wills
  of its clients once their Will Delay Interval has passed (counted from
  the disconnect the record names, else from now), unless the client id
  came back meanwhile (a newer ``"will"`` record replaces the old one).
  Its persistent sessions stay, for their clients to resume on any node,
  until their expiry interval has passed (counted the same way): then the
  leader ends them (a will still waiting is published then, as the
  specification asks when a session ends first).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from core.broker import PERM_READ, PERM_WRITE, PullStatus
from core.store import decode_message
from gateway.mapping import now_ms
from gateway.membership import Membership
from gateway.meta import META_TOPIC, SNAP, decode_record, record
from gateway.meta_log import CompactionSettings
from gateway.node_meta_log import P_SNAP_OF, NodeMetaLog
from gateway.nodes import P_NODE, P_SHARE_PICKS, node_queue_name
from gateway.owners import ClientOwners
from gateway.remote_backend import returned_after_waiting
from gateway.sessions import Delivery, Session, SubOptions
from gateway.wills import will_from_record

if TYPE_CHECKING:
    from gateway.app import MQTTGateway
    from gateway.remote_backend import RemoteBackend

log = logging.getLogger("mqgate.gateway")
RETRY_PAUSE = 1.0
RELEASE_WAIT = 2.0  # seconds a CONNECT waits for another node to release a session (wait_release; [mqtt] releaseWait)
NEVER = 0xFFFFFFFF  # a session expiry interval that never ends


# Answers about the meta queue itself (entries, its end, an offset moved by
# retention); any other status says nothing about what it holds.
_QUEUE_ANSWERS = frozenset({PullStatus.FOUND, PullStatus.PULL_NOT_FOUND, PullStatus.PULL_OFFSET_MOVED,
                            PullStatus.PULL_RETRY_IMMEDIATELY})


class MetaUnavailable(Exception):
    """The meta records could not be read to their end now (the home broker
    did not answer): what this node knows of other nodes' sessions may be stale."""


def _here(sess: Session) -> bool:
    """A connected non-persistent session of this node (one the node queue serves)."""
    return sess.node is None and sess.queue is None and sess.conn is not None


class ClusterSync:
    def __init__(self, backend: RemoteBackend, node_id: str, owners: ClientOwners | None = None,
                 release_wait: float = RELEASE_WAIT, compaction: CompactionSettings = CompactionSettings()) -> None:
        self.backend = backend
        self.meta_log = NodeMetaLog(backend, compaction)  # the image of the meta records; compacted by the leader
        self.node_id = node_id
        self.owners = owners  # etcd decides who owns a client id (else the meta records' order)
        self.release_wait = release_wait
        self.node_queue = node_queue_name(node_id)
        self.gw: MQTTGateway | None = None
        self.meta_offset = 0
        self.applied = 0  # records of other nodes applied (for tests and status)
        self.members = Membership(backend.api, lambda: backend.home_addr, node_id, backend.group_addrs)
        self.wills: dict[str, dict] = {}  # client id -> "will" record of another node
        self.in2: dict[str, list] = {}  # client id -> inbound QoS 2 packet ids awaiting PUBREL, on another node
        self._wills_due: set[str] = set()  # client ids whose will this node (the leader) will publish
        self._ends_due: set[str] = set()  # client ids whose session this node (the leader) will end
        self._applied = trio.Event()  # set (and replaced) at each record of another node applied

    # ---- running ---------------------------------------------------------------------------

    async def run(self, gw: MQTTGateway, meta_end: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.gw = gw
        self.meta_offset = meta_end
        await self.backend.prepare_queue(self.node_queue)
        async with trio.open_nursery() as nursery:
            if self.owners is not None:
                await nursery.start(self.owners.run, self._lease_lost)
            await nursery.start(self.members.run)  # heartbeats first: a poll before it does not list this node
            await self.members.poll()
            nursery.start_soon(self._act_for_dead_nodes)
            nursery.start_soon(self._tail_meta)
            nursery.start_soon(self.meta_log.run, self)
            for qid in self.backend.queue_ids(self.node_queue):  # one long poll per broker group
                nursery.start_soon(self._read_node_queue, qid, self.backend.max_offset(self.node_queue, qid))
            task_status.started()

    async def _tail_meta(self) -> None:
        while True:
            start = self.meta_offset
            result = await self.backend.long_poll(META_TOPIC, start, 256)
            self._apply_read(start, result)
            if not returned_after_waiting(result) and self.meta_offset == start:
                log.warning("gateway meta records: read at %d answered %s %s", start, result.status.name,
                            result.remark)
                if "TOPIC_NOT_EXIST" in result.remark:
                    await self._recreate_meta_topic()
                await trio.sleep(RETRY_PAUSE)

    async def _recreate_meta_topic(self) -> None:
        """A slave promoted before it copied the meta topic's config holds its
        records (the commit log is replicated) but answers TOPIC_NOT_EXIST:
        create the topic there again, or no record is ever read (and every
        CONNECT is refused, ``catch_up``)."""
        try:
            await self.backend.ensure_topic(META_TOPIC, 1, PERM_READ | PERM_WRITE)
            log.warning("gateway meta records: topic %s created again on broker %s", META_TOPIC,
                        self.backend.home_addr)
        except Exception as e:  # noqa: BLE001 - the home broker is away: the next failed read tries again
            log.warning("gateway meta records: topic %s not created: %s", META_TOPIC, e)

    def _apply_read(self, start: int, result) -> None:
        """Apply what a read from ``start`` found, skipping what a concurrent
        read (``catch_up``) applied already: each record once, in log order."""
        for i, raw in enumerate(result.entries):
            if start + i >= self.meta_offset:
                self._apply_raw(raw)
                self.meta_offset = start + i + 1
        if not result.entries and result.next_begin_offset > self.meta_offset:
            self.meta_offset = result.next_begin_offset
        self.meta_log.tail_moved(self.meta_offset, self.members.leader)

    async def catch_up(self) -> None:
        """Apply every record up to the end of the meta queue now (before a
        CONNECT decides about its client id: a session that just left
        another node is known here). ``MetaUnavailable`` if a read fails
        first: an empty answer with an error status is not the end, and a
        CONNECT decided on what this node knew might resume a stale session."""
        while True:
            start = self.meta_offset
            result = await self.backend.read_queue(META_TOPIC, 0, start, 256)
            if result.status not in _QUEUE_ANSWERS:
                raise MetaUnavailable(f"gateway meta records not read from offset {start}: "
                                      f"{result.status.name} {result.remark}".rstrip())
            self._apply_read(start, result)
            if not result.entries and self.meta_offset == start:
                return

    def _apply_raw(self, raw: bytes) -> None:
        try:
            msg = decode_message(raw)
            if P_SNAP_OF in msg.properties:  # a snapshot record (gateway.node_meta_log): a value held already
                return
            own = msg.properties.get(P_NODE) == self.node_id
            kind, key, value = decode_record(msg.body)
            self.meta_log.observe(kind, key, value, msg.body)  # every node's records, in queue order
            if own or kind == SNAP:  # a compaction's marker: no state of its own
                return
            self.apply(kind, key, value)
        except Exception:  # noqa: BLE001 - one bad record must not stop the tail
            log.exception("gateway meta record from another node not applied")

    async def _read_node_queue(self, qid: int, offset: int) -> None:
        backend = self.backend
        router = self.gw.router
        while True:
            result = await backend.long_poll(self.node_queue, offset, 64, qid)
            if not returned_after_waiting(result):
                if result.status is not PullStatus.SERVICE_NOT_AVAILABLE and result.next_begin_offset != offset:
                    offset = result.next_begin_offset  # moved (retention, or a promoted slave's queue end)
                await trio.sleep(RETRY_PAUSE)
                continue
            for raw in result.entries:
                out = router.decoded(raw)
                if out is not None:
                    picks = decode_message(raw).properties.get(P_SHARE_PICKS, "")
                    self._deliver_here(out, set(picks.split(",")) if picks else ())
            offset = max(result.next_begin_offset, offset + len(result.entries))

    def _deliver_here(self, out, share_picks) -> None:
        """A message from this node's queue: to the matching connected
        non-persistent sessions here; through a ``$share`` group only to the
        member the publishing node picked (this node's own pick is not used)."""
        router = self.gw.router
        done = set()
        for sess, qos, rap, ids, group in router.targets(out.topic, out.client_id):
            if group is None and _here(sess):
                sess.enqueue(Delivery(out, min(qos, out.qos), rap and out.retain, ids, None))
                done.add(sess.client_id)
        for cid in share_picks:
            sess = router.sessions.get(cid)
            if sess is None or cid in done or not _here(sess):
                continue
            m = sess.match(out)
            if m is not None:
                sess.enqueue(Delivery(out, m[0], m[1], m[2], "$share"))

    # ---- dead nodes ------------------------------------------------------------------------------

    async def _act_for_dead_nodes(self) -> None:
        while True:
            self._forget_dead()
            changed = self.members.changed
            await changed.wait()

    def _forget_dead(self) -> None:
        if not self.members.known:
            return  # the meta records are read before the first poll: every other node would look dead
        alive = self.members.alive
        router = self.gw.router
        for sess in [s for s in router.sessions.values() if s.node is not None and s.node not in alive]:
            if not sess.persistent:
                router.remove_session(sess)
        if not self.members.leader:
            return
        now = now_ms()
        for sess in [s for s in router.sessions.values() if s.node is not None and s.node not in alive]:
            if sess.persistent and sess.client_id not in self._ends_due and sess.expiry < NEVER:
                gone = (sess.record or {}).get("gone")
                delay = sess.expiry - ((now - gone) / 1000 if gone else 0)
                self._ends_due.add(sess.client_id)
                self.gw._nursery.start_soon(self._end_dead_session, sess, max(0.0, delay))
        for cid, value in list(self.wills.items()):
            if value.get("node") in alive or cid in self._wills_due:
                continue
            gone = value.get("gone")
            delay = (value.get("will_delay_interval") or 0) - ((now - gone) / 1000 if gone else 0)
            self._wills_due.add(cid)
            self.gw._nursery.start_soon(self._will_of_dead_node, cid, value, max(0.0, delay))

    async def _will_of_dead_node(self, cid: str, value: dict, delay: float) -> None:
        try:
            await trio.sleep(delay)
            await self.members.poll()  # a node this node had not seen yet is alive, not dead
            if self.wills.get(cid) is not value or value.get("node") in self.members.alive or not self.members.leader:
                return  # the client came back (a newer record), another node published it, or its node lives
            sess = self.gw.router.sessions.get(cid)
            if sess is not None and (sess.conn is not None or (sess.node is not None and sess.node in self.members.alive)):
                return
            del self.wills[cid]
            log.info("client %s: will published for dead gateway node %s", cid, value.get("node"))
            with trio.CancelScope(shield=True):
                await self.gw.wills.publish(cid, will_from_record(value))
        finally:
            self._wills_due.discard(cid)

    async def _end_dead_session(self, sess: Session, delay: float) -> None:
        cid = sess.client_id
        try:
            await trio.sleep(delay)
            await self.members.poll()
            if (self.gw.router.sessions.get(cid) is not sess or sess.node in self.members.alive
                    or not self.members.leader):
                return  # resumed somewhere, or its node lives after all
            will = self.wills.pop(cid, None)
            if will is not None:
                sess.pending_will = will_from_record(will)
            log.info("session %s of dead gateway node %s expired", cid, sess.node)
            with trio.CancelScope(shield=True):
                await self.gw.end_session(sess)
        finally:
            self._ends_due.discard(cid)

    # ---- records of other nodes ----------------------------------------------------------------

    async def wait_release(self, cid: str) -> None:
        """Before a CONNECT takes a persistent session that another (live) node
        shows connected: wait, at most ``release_wait``, for that node's next
        record of it. A client that has just disconnected there is released
        within milliseconds (its record carries its flows in flight); one
        still connected there is taken over after the wait."""
        if self.owners is not None:
            return  # the owner key was taken: the old owner has written its final record
        deadline = trio.current_time() + self.release_wait
        router = self.gw.router
        while trio.current_time() < deadline:
            stub = router.sessions.get(cid)
            if (stub is None or stub.node is None or not stub.persistent or stub.node not in self.members.alive
                    or (stub.record or {}).get("gone") is not None):
                return
            applied = self._applied
            with trio.move_on_at(deadline):
                await applied.wait()

    # ---- ownership in etcd --------------------------------------------------------------------

    @asynccontextmanager
    async def claim(self, cid: str, clean_start: bool):
        """Around a CONNECT: own ``cid`` first when etcd decides (``OwnerUnavailable``)."""
        if self.owners is None:
            yield
            return

        async def ask(cid: str, owner: str) -> None:
            log.info("client %s: asking gateway node %s to release it", cid, owner)
            try:  # not stored (logged): the key still goes with the owner's lease, or the CONNECT is refused
                await self.gw.write_records([record("rel", cid, {"node": owner, "by": self.node_id,
                                                                 "clean": clean_start})])
            except Exception as e:  # noqa: BLE001 - the broker unreachable: as above
                log.warning("client %s: release request to gateway node %s not stored: %s", cid, owner, e)

        async with self.owners.claim(cid, ask):
            yield

    async def _release_for(self, cid: str, value: dict) -> None:
        """Another node asks for ``cid``: close its connection here (its close
        writes the final record and releases the key), or release at once."""
        with trio.move_on_after(self.owners.take_wait):
            await self.owners.claims_done(cid)  # a CONNECT under way here ends first
        sess = self.gw.router.sessions.get(cid)
        if sess is not None and sess.node is None and sess.conn is not None:
            log.info("client %s: released to gateway node %s", cid, value.get("by", "?"))
            sess.conn.kick(0x8E, ends_session=bool(value.get("clean")))
        else:
            await self.owners.release(cid)

    def _lease_lost(self) -> None:
        """The etcd lease is gone: the client ids may be owned elsewhere now."""
        for sess in list(self.gw.router.sessions.values()):
            if sess.node is None and sess.conn is not None:
                sess.conn.kick(0x9C)  # Use another server

    def apply(self, kind: str, key: str, value) -> None:
        gw = self.gw
        self.applied += 1
        self._applied.set()
        self._applied = trio.Event()
        if kind == "rel":
            if (self.owners is not None and isinstance(value, dict) and value.get("node") == self.node_id
                    and gw._nursery is not None):
                gw._nursery.start_soon(self._release_for, key, value)
        elif kind == "ret":
            if value is None:
                gw.retained.clear(key)
            else:
                gw.retained.set(key, int(value[0]), int(value[1]))
        elif kind == "in2":
            if value:
                self.in2[key] = value
            else:
                self.in2.pop(key, None)
        elif kind == "will":
            if value is None:
                self.wills.pop(key, None)
            else:
                self.wills[key] = value
                if value.get("node") not in self.members.alive and self.gw._nursery is not None:
                    self._forget_dead()  # its node may be gone already (the leader checks again when due)
        elif kind == "sess":
            self._session_record(key, value, persistent=True)
        elif kind == "live":
            node, _, cid = key.partition("/")
            if value is None:
                sess = gw.router.sessions.get(cid)
                if sess is not None and sess.node == node:
                    gw.router.remove_session(sess)
            else:
                self._session_record(cid, dict(value, node=node), persistent=False)

    def _session_record(self, cid: str, value, *, persistent: bool) -> None:
        gw = self.gw
        router = gw.router
        sess = router.sessions.get(cid)
        if sess is not None and sess.node is None:
            # ours: another node has the client id now
            if sess.conn is not None and self.owners is not None:
                log.warning("client %s: a record of gateway node %s ignored: the client id is owned here",
                            cid, (value or {}).get("node", "?"))
                return
            gw._cancel_timers(sess)
            sess.pending_will = None
            if sess.conn is not None:
                log.info("client %s: taken over on gateway node %s", cid, (value or {}).get("node", "?"))
                # a record that ends the session (the new connection starts clean) ends it here too
                sess.conn.kick(0x8E, ends_session=value is None)
                gw._nursery.start_soon(self._stub_after_close, sess, value, persistent)
                return
        self._replace_with_stub(cid, value, persistent)

    async def _stub_after_close(self, sess: Session, value, persistent: bool) -> None:
        conn = sess.conn
        if conn is not None:
            with trio.move_on_after(10):
                await conn.done.wait()
        if self.gw.router.sessions.get(sess.client_id) is sess:
            self._replace_with_stub(sess.client_id, value, persistent)

    def _replace_with_stub(self, cid: str, value, persistent: bool) -> None:
        router = self.gw.router
        old = router.sessions.get(cid)
        if old is not None:
            router.remove_session(old)
        if value is None:
            return
        stub = Session(self.gw, cid, expiry=int(value.get("exp", 1)) if persistent else 0, version=int(value.get("v", 4)))
        stub.node = str(value.get("node") or "?")
        stub.record = value
        for text, opts in (value.get("subs") or {}).items():
            options = SubOptions(*opts)
            stub.subscribe(text, options)
            router.trie.subscribe(cid, text, options)
        router.add_session(stub)
