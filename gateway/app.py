"""The MQTT gateway: sessions, wills, retained messages and listeners, on a broker.

Entry point for ``mqgate serve`` (the lead's ``gateway/serve.py``)::

    await nursery.start(partial(run_mqtt_gateway, broker, cfg.mqtt, host=cfg.host,
                                mqtt_port=cfg.mqtt_port, ws_port=cfg.ws_port))
    # started() value: {"tcp": 1883, "ws": 8083, ...}  (listener name -> bound port)

``settings`` is the ``[mqtt]`` table (see ``gateway.settings`` for every key
and default; an unknown key is a ``ConfigError``). Port 0 turns a listener
off. Tests pass ``listeners=[ListenerSpec(transport="tcp", ephemeral=True)]``
instead, which binds OS-chosen ports (host and ports are then ignored), and
may use ``MQTTGateway`` directly to look at its state::

    gw = MQTTGateway(broker, GatewaySettings.from_dict({...}))
    ports = await nursery.start(gw.run, [ListenerSpec(transport="tcp", ephemeral=True)])

Rules kept here:

* The gateway installs one put hook and one dispatch listener on the broker
  (``gateway.router``) and replays its meta records (``gateway.meta``,
  ``gateway.restore``) before the listeners open: offline sessions, their
  subscriptions, inbound QoS 2 state, pending wills and the retained index
  are back first.
* A client id has at most one connection: a new CONNECT closes the old one
  (5.0 DISCONNECT 0x8E) and waits for its clean-up before taking the session.
* Wills: a normal DISCONNECT (0x00) discards the will; otherwise it is
  published after its Will Delay Interval, or when the session ends if that
  is sooner, unless the client reconnects to the session first. A takeover
  publishes it at once when the will has no delay or the new connection
  starts a clean session. At shutdown wills are neither published nor
  dropped: their records stay, and after a restart a will whose client has
  not come back is published once its delay has passed. ``gateway.wills``
  keeps their records, timers and publication.
* A session ends when its expiry interval passes while disconnected (or at
  disconnect for expiry 0): its subscriptions leave the trie, its records
  are deleted and its queue is dropped.
* The retained index changes in store order. A publish's change and its
  ``"ret"`` record are made together (``set_retained``); a fired
  ``$delayed`` message's change is made in the broker's stored hook
  (``retain_fired``) and its record written soon after by one task, with
  the index's value at that time, so a record never undoes a later change.
  A will on ``$delayed/<s>/<topic>`` is delayed like a publish.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import trio

from core.broker import Broker
from gateway.backend import BrokerBackend, backend_for
from gateway.cluster import ClusterSync
from gateway.auth import is_loopback
from gateway.listeners import ListenerSpec, ListenerStats, listener_specs_from_dict, serve_listeners
from gateway.mapping import Outbound, now_ms, session_queue_name
from gateway.meta import META_TOPIC, RecordsRefused, record
from gateway.meta_log import MetaLog
from gateway.nodes import live_key
from gateway.mqtt import InboundFlows, Publish, ReasonCode
from gateway.keepalive import Keepalive
from gateway.readiness import Readiness
from gateway.step_writes import StepWrites
from gateway.restore import restore_gateway
from gateway.retained import RetainedIndex
from gateway.router import Router
from gateway.tracing import MqttTracer
from gateway.connection import Connection
from gateway.sessions import Delivery, Session, SubOptions, inbound_window
from gateway.settings import GatewaySettings
from gateway.sys_topics import GatewayStats, sys_values
from gateway.wills import NotStored, Wills, store_server_publish

log = logging.getLogger("mqgate.gateway")
NEVER = 0xFFFFFFFF
SAVE_TIMEOUT = 5.0


class MQTTGateway:
    def __init__(self, broker: Broker | BrokerBackend, settings: GatewaySettings | Mapping[str, Any],
                 cluster: ClusterSync | None = None) -> None:
        if not isinstance(settings, GatewaySettings):
            settings = GatewaySettings.from_dict(settings)
        self.backend = backend_for(broker)
        self.cluster = cluster  # one node of several (mqgate gateway), else None
        self.node_id = cluster.node_id if cluster is not None else None
        if cluster is not None:
            cluster.gw = self
        self.settings = settings
        self.stats = GatewayStats()
        self.listener_stats = ListenerStats()
        self.listener_names: tuple[str, ...] = ()  # the enabled listeners' names ($SYS per listener)
        self.router = Router(self)
        # None unless [mqtt] traceMqttTopics names a filter: then the trace code runs, else none of it
        self.tracer = MqttTracer(settings.trace, self.backend) if settings.trace.mqtt_topics else None
        self.retained = RetainedIndex()
        # the meta records' replay and compaction (issue 17); a node of a cluster replays them whole
        self.meta = MetaLog(self.backend, settings.session.compaction) if cluster is None else None
        self.started_at = 0.0
        self.shutting_down = False
        self.draining = False  # a gateway node stopping: no new CONNECT, connections told to go
        self.wills = Wills(self.backend, self.set_retained, self.node_id)
        self._retained_dirty: set[str] = set()  # topics whose "ret" record is behind the index
        self._retained_wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        self.readiness = Readiness()  # where idle plain-TCP connections wait for input
        self.keepalive = Keepalive()  # closes connections silent for 1.5 x their keepalive
        self.woken: list | None = None  # connections woken in this trio step, while ``run`` runs (step_writes)
        # Connections whose reads may be acted on without a wake-up from the gateway's
        # epoll: TLS and WebSocket ones for their whole life (trio's receive_some may act
        # a loop pass after the wake-up), plain ones until their CONNECT is acted on (the
        # first read is taken at once, in the task's first step). While any is open, a
        # plain read woken alone keeps its ordering checkpoint (publishing.py).
        self.unpolled_readers = 0

    # ---- running ----------------------------------------------------------------------

    async def run(self, listeners: Sequence[ListenerSpec], *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.started_at = trio.current_time()
        step_writes = StepWrites()
        trio.lowlevel.add_instrument(step_writes)
        self.woken = step_writes.woken
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = self.wills.nursery = nursery
                await self._run(nursery, listeners, task_status)
        finally:
            self.shutting_down = True
            self.wills.nursery = None
            self.woken = None
            step_writes.after_task_step(None)  # a wake of this very step
            try:
                trio.lowlevel.remove_instrument(step_writes)
            except KeyError:
                pass

    async def _run(self, nursery, listeners, task_status) -> None:
        meta_end = await restore_gateway(self)
        # No await before the hooks are in: a will the restore found due is
        # published at the first checkpoint, and its message must reach the
        # subscribers' session queues (the router's put hook) and its record's
        # deletion the compaction image (the meta log's stored hook).
        if self.cluster is None:
            self.backend.add_stored_hook(self.meta.stored_hook, topics=(META_TOPIC,))  # MQTT messages skip it
        self.backend.add_put_hook(self.router.put_hook)
        self.backend.add_stored_hook(self.router.stored_hook)
        if self.cluster is not None:
            await nursery.start(self.cluster.run, self, meta_end)
        else:
            nursery.start_soon(self.meta.run)
        await nursery.start(self.readiness.run)
        await nursery.start(self.keepalive.run)
        nursery.start_soon(self._retained_records)
        if self.tracer is not None:
            await nursery.start(self.tracer.run)
            self.backend.add_stored_hook(self.tracer.stored_hook)
        self.backend.add_dispatch_listener(self.router.on_dispatch)
        self.listener_names = tuple(s.name for s in listeners if s.enabled)
        if self.settings.session.sys_interval:
            nursery.start_soon(self._sys_loop)
        if not any(s.enabled for s in listeners):
            log.warning("no MQTT listener is enabled (every port is 0)")
            task_status.started({})
            await trio.sleep_forever()
        ports = await nursery.start(partial(
            serve_listeners, listeners, self.handle, plain=self.handle_plain,
            max_connections=self.settings.limits.max_connections,
            max_connection_rate=self.settings.limits.max_connection_rate, stats=self.listener_stats))
        task_status.started(ports)

    async def drain(self, timeout: float = 10.0) -> None:
        """Stop taking CONNECTs and close every connection with 0x9C "Use
        another server" (MQTT 5, with ``serverReference`` when set), as a
        server-side disconnect: sessions and wills are saved for the other
        nodes, then wait (bounded) until every connection is closed."""
        self.draining = True
        conns = [s.conn for s in list(self.router.sessions.values()) if s.node is None and s.conn is not None]
        log.info("draining: closing %d connection(s)", len(conns))
        for conn in conns:
            conn.kick(ReasonCode.USE_ANOTHER_SERVER, server_reference=self.settings.session.server_reference)
        with trio.move_on_after(timeout):
            for conn in conns:
                await conn.done.wait()

    def handle(self, stream: trio.abc.Stream, info):
        """The listeners' handler: one connection's whole life (a coroutine, so
        that the connection's task holds no frame of its own here). Writer
        tasks, started only while output waits, run in the gateway's nursery."""
        return Connection(self, stream, info, self._nursery).run()

    def handle_plain(self, stream: trio.SocketStream, info, leave):
        """The listeners' ``plain`` starter (plain TCP): the connection's
        coroutine is the listener's task itself (no listener frame under it);
        ``Connection.run`` closes the stream, calls ``leave`` and logs its own failure."""
        return Connection(self, stream, info, self._nursery, leave).run()

    def timers_supported(self) -> bool:
        """Whether the broker parks timer messages (``$delayed``). Whether it
        takes a given delay is the broker's answer to the send (a refusal
        comes back as 0x83)."""
        return self.backend.timers_supported()

    async def topic_config(self, name: str):
        return await self.backend.topic_for_publish(name)

    # ---- records ------------------------------------------------------------------------

    async def write_records(self, items: list) -> bool:
        items = [i for i in items if i is not None]
        if not items:
            return True
        results = await self.backend.send_many(items)
        bad = [r for r in results if not r.ok]
        if bad:
            log.error("gateway meta records not stored: %s %s", bad[0].status.name, bad[0].remark)
            return False
        return True

    async def save_session(self, sess: Session, gone: int | None = None) -> bool:
        return await self.write_records([record("sess", sess.client_id, sess.to_record(gone=gone))])

    def records_subscriptions(self, sess: Session) -> bool:
        """Whether ``sess``'s subscriptions have a record (`save_subscriptions`)."""
        return sess.persistent or self.cluster is not None

    async def save_subscriptions(self, sess: Session) -> bool:
        """After (un)subscribe: a persistent session's record; on a node of a
        cluster, a non-persistent one's ``"live"`` record (the other nodes route
        to it). False when the broker refused it (logged)."""
        if sess.persistent:
            return await self.save_session(sess)
        if self.cluster is not None:
            subs = {text: opts.to_list() for text, (_, opts) in sess.subs.items()}
            return await self.write_records([record("live", live_key(self.node_id, sess.client_id),
                                                    {"subs": subs, "v": sess.version} if subs else None)])
        return True

    async def _adopt(self, stub: Session, clean_start: bool) -> Session | None:
        """A client id whose session another node had (a stub here): the stub
        goes; unless the connection starts clean, a persistent session goes on
        here from the broker's committed offset of its queue, with its
        subscriptions. A clean start ends the persistent session for the cluster."""
        router = self.router
        router.remove_session(stub)
        if not stub.persistent:
            return None
        cid = stub.client_id
        if clean_start:
            await self.write_records([record("sess", cid, None), record("in2", cid, None)])
            return None
        queue = stub.queue
        await self.backend.prepare_queue(queue)
        rec = stub.record or {}
        sess = Session(self, cid, expiry=stub.expiry, version=stub.version)
        try:
            # as after a restart: QoS 1/2 flows in flight at the last record go on
            # (same packet ids), reading resumes at the broker's committed offset
            sess.restore(rec)
        except Exception as e:  # noqa: BLE001 - a record of another shape: start from the committed offset
            log.warning("client %s: session record from node %s not restored whole (%s: %s)", cid, stub.node,
                        type(e).__name__, e)
            sess = Session(self, cid, expiry=stub.expiry, version=stub.version)
            backend = self.backend
            offs = list(rec.get("offs") or [rec.get("off")])
            sess.next_read = [max(int((offs[i] if i < len(offs) else 0) or 0),
                                  backend.query_offset(queue, queue, i) or 0, backend.min_offset(queue, i))
                              for i in backend.queue_ids(queue)]
            for text, (_flt, opts) in stub.subs.items():
                sess.subscribe(text, opts)
        for text, (_flt, opts) in sess.subs.items():
            router.trie.subscribe(cid, text, opts)
        in2 = self.cluster.in2.pop(cid, None)
        if in2:
            sess.inbound = InboundFlows.from_state({"receive_maximum": self.settings.limits.max_inflight_messages,
                                                    "flows": [[int(p), 3] for p in in2]})
        router.add_session(sess)
        log.info("client %s: session taken from gateway node %s at queue offsets %s", cid, stub.node, sess.next_read)
        return sess

    async def set_retained(self, updates: list[tuple[str, bytes, int]]) -> None:
        items = []
        for topic, payload, phys in updates:
            if payload:
                self.retained.set(topic, phys, 0)
                items.append(record("ret", topic, [phys, 0]))
            elif self.retained.clear(topic):
                items.append(record("ret", topic, None))
        await self.write_records(items)

    def retain_fired(self, topic: str, payload: bytes, phys: int) -> None:
        """A fired ``$delayed`` message with RETAIN, just stored at ``phys`` (called
        from the router's stored hook, so in store order): the index now, the
        record by ``_retained_records``."""
        if payload:
            self.retained.set(topic, phys, 0)
        elif not self.retained.clear(topic):
            return
        self._retained_dirty.add(topic)
        self._retained_wake.set()

    async def _retained_records(self) -> None:
        try:
            while True:
                await self._retained_wake.wait()
                self._retained_wake = trio.Event()
                await self._write_retained_dirty()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(SAVE_TIMEOUT):
                await self._write_retained_dirty()

    async def _write_retained_dirty(self) -> None:
        if not self._retained_dirty:
            return
        topics, self._retained_dirty = self._retained_dirty, set()
        stored = self.retained.stored
        # no await between reading the index and the append (send_many appends first)
        await self.write_records([record("ret", t, stored.get(t)) for t in sorted(topics)])

    async def retained_for(self, flt, opts: SubOptions) -> list[Delivery]:
        """The retained messages a new subscription gets (read before its SUBACK
        is sent, so they reach the client before any later publish). One whose
        entry is gone or whose Message Expiry Interval has passed leaves the index."""
        stored, local = self.retained.matching(flt)
        out_list: list[Delivery] = []
        ids = () if opts.sub_id is None else (opts.sub_id,)
        now = now_ms()
        for topic, (phys, size) in stored:
            out = await self.router.load(["r", phys, size], None)
            expired = out is not None and out.expiry is not None and out.remaining_expiry(now) <= 0
            if out is None or out.topic != topic or expired:
                if self.retained.clear(topic):
                    self.stats.expired += expired
                    await self.write_records([record("ret", topic, None)])
                continue
            out_list.append(Delivery(out, min(opts.qos, out.qos), True, ids))
        for out in local:
            out_list.append(Delivery(out, 0, True, ids))
        return out_list

    # ---- sessions -------------------------------------------------------------------------

    async def open_session(self, conn: Connection, cid: str, *, clean_start: bool, expiry: int,
                           version: int) -> tuple[Session, bool, bool]:
        """(session, present, stored) of a CONNECT; on a node with etcd, only
        once the client id is owned here (``gateway.owners.OwnerUnavailable``
        when it cannot be). ``RecordsRefused``, before anything changes, while
        the broker takes no writes and the CONNECT would write a record;
        ``stored`` False when the broker refused the session's records all the
        same (a full disk, a race with a fencing)."""
        if self.cluster is None:
            return await self._open_session(conn, cid, clean_start=clean_start, expiry=expiry, version=version)
        async with self.cluster.claim(cid, clean_start):
            return await self._open_session(conn, cid, clean_start=clean_start, expiry=expiry, version=version)

    async def _open_session(self, conn: Connection, cid: str, *, clean_start: bool, expiry: int,
                            version: int) -> tuple[Session, bool, bool]:
        router = self.router
        if self.cluster is not None:
            await self.cluster.catch_up()
            await self.cluster.wait_release(cid)
        if not self.backend.writable() and (expiry > 0 or conn.will is not None or self.cluster is not None
                                            or cid in router.sessions):  # a CONNECT that writes a record
            raise RecordsRefused("the broker takes no writes now")
        old = router.sessions.get(cid)
        if old is not None and old.conn is not None:
            other = old.conn
            log.info("client %s: taken over by a new connection from %s", cid, conn.info.peer)
            other.kick(0x8E, ends_session=clean_start)
            with trio.move_on_after(SAVE_TIMEOUT + 1):
                await other.done.wait()
            old = router.sessions.get(cid)
        if old is not None and old.node is not None:
            old = await self._adopt(old, clean_start)
        if old is not None:
            self._cancel_timers(old)
            old.pending_will = None
            if clean_start:
                await self.end_session(old)
                old = None
        present = old is not None
        if old is None:
            if expiry > 0:
                await self.backend.prepare_queue(session_queue_name(cid))
            sess = Session(self, cid, expiry=expiry, version=version)
            router.add_session(sess)
        else:
            sess = old
            sess.version = version
            sess.expiry = expiry
            sess.inbound.reset_unacked()
            sess.inbound.receive_maximum = inbound_window(version, self.settings.limits.max_inflight_messages)
        sess.conn = conn
        conn.session = sess
        if sess.queue is not None:
            self.backend.watch_queue(sess.queue, True)
        sess.flows.receive_maximum = min(conn.mq.peer_receive_maximum, self.settings.limits.max_inflight_messages)
        items = []
        if sess.persistent:
            items.append(record("sess", cid, sess.to_record(gone=None)))
        items.append(self.wills.record_item(cid, conn.will))
        return sess, present, await self.write_records(items)

    async def connection_closed(self, conn: Connection) -> None:
        sess = conn.session
        if sess is None or sess.conn is not conn:
            return
        shutdown = self.shutting_down or conn.server_stopping
        sess.conn = None
        if sess.queue is not None:
            self.backend.watch_queue(sess.queue, False)
        self.stats.connected -= 1
        # Shielded (a server shutdown does not cut the save short), bounded by SAVE_TIMEOUT;
        # nothing above waits: Connection._end relies on it.
        with trio.CancelScope(shield=True, deadline=trio.current_time() + SAVE_TIMEOUT):
            await self._closed(conn, sess, shutdown)
            owners = self.cluster.owners if self.cluster is not None else None
            if owners is not None and sess.conn is None:  # the final record is written: free for any node
                await owners.release(sess.client_id)

    async def _closed(self, conn: Connection, sess: Session, shutdown: bool) -> None:
        cid = sess.client_id
        will = conn.will
        now = now_ms()
        if shutdown:
            if sess.persistent:
                sess.commit()
                await self.save_session(sess, gone=now)
            return
        if conn.taken_over:
            if will is not None and (conn.takeover_ends_session or sess.expiry == 0
                                     or not will.will_delay_interval):
                await self.wills.publish(cid, will)
            elif will is not None:
                await self.write_records([record("will", cid, None)])
            if sess.expiry == 0:
                await self.end_session(sess)
            else:
                sess.pending.clear()
                if self.cluster is not None and self.cluster.owners is not None:
                    # released to another node (etcd): it reads its flows in flight from this record
                    sess.commit()
                    await self.save_session(sess, gone=now)
            return
        if sess.expiry == 0:
            if will is not None:
                await self.wills.publish(cid, will)
            await self.end_session(sess)
            return
        sess.pending.clear()
        items = [record("sess", cid, sess.to_record(gone=now))]
        delay = 0 if will is None else (will.will_delay_interval or 0)
        if will is None or delay:  # a will without delay is published below, which deletes its record
            items.append(self.wills.record_item(cid, will, now))
        sess.commit()
        # Timers first: the save below is bounded in time (SAVE_TIMEOUT) and a
        # slow disk must not leave a will or an expiry unscheduled. The records
        # still reach the log first: send_many appends before its first await.
        if will is not None and delay:
            self.wills.schedule(sess, will, min(delay, sess.expiry))
        if sess.expiry != NEVER:
            self.schedule_expiry(sess, sess.expiry)
        await self.write_records(items)
        if will is not None and not delay:
            await self.wills.publish(cid, will)

    async def end_session(self, sess: Session) -> None:
        if sess.ended:
            return
        sess.ended = True
        self._cancel_timers(sess)
        will = getattr(sess, "pending_will", None)
        sess.pending_will = None
        self.router.remove_session(sess)
        self._redispatch_shared(sess)
        if will is not None:
            await self.wills.publish(sess.client_id, will)
        items = []
        if sess.persistent:
            items += [record("sess", sess.client_id, None), record("in2", sess.client_id, None)]
        elif self.cluster is not None and sess.subs:
            items.append(record("live", live_key(self.node_id, sess.client_id), None))
        if sess.conn is None:
            items.append(self.wills.record_item(sess.client_id, None))
        await self.write_records(items)
        if sess.queue is not None:
            try:
                await self.backend.delete_queue(sess.queue, 0)
            except Exception:  # noqa: BLE001 - a leftover queue is harmless: a new session starts at its end
                log.exception("session queue %s of %s not deleted", sess.queue, sess.client_id)

    def _redispatch_shared(self, sess: Session) -> None:
        """Un-acked messages a share-group member got in memory go to another member."""
        waiting = [d for d in sess.forget_in_memory() if d.group]
        for d in waiting:
            for other, qos, _rap, ids, group in self.router.targets(d.out.topic, d.out.client_id):
                if group == d.group and other.conn is not None:
                    other.enqueue(Delivery(d.out, min(qos, d.out.qos), d.retain, ids, group))

    def _cancel_timers(self, sess: Session) -> None:
        for scope in (sess.expiry_scope, sess.will_scope):
            if scope is not None:
                scope.cancel()
        sess.expiry_scope = sess.will_scope = None

    def schedule_expiry(self, sess: Session, seconds: float) -> None:
        if self.shutting_down:
            return
        scope = sess.expiry_scope = trio.CancelScope()
        self._nursery.start_soon(self._expire_later, sess, max(0.0, seconds), scope)

    async def _expire_later(self, sess: Session, seconds: float, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(seconds)
            if sess.conn is None and not sess.ended:
                log.info("session %s expired", sess.client_id)
                sess.expiry_scope = None
                await self.end_session(sess)

    async def publish_from_server(self, topic: str, payload: bytes, qos: int, retain: bool,
                                  content_type: str | None = None, *, client_id: str = "$events") -> None:
        """A PUBLISH the server itself makes (event rules' MQTT targets): mapped, stored,
        routed and retained exactly like a device's; raises `MappingError` or
        `RuntimeError` (one line) when it is not stored."""
        pub = Publish(topic=topic, payload=payload, qos=qos, retain=retain, packet_id=1 if qos else None,
                      content_type=content_type)
        try:
            await store_server_publish(self.backend, self.set_retained, client_id, pub, [])
        except NotStored as e:
            raise RuntimeError(str(e)) from None

    # ---- $SYS ---------------------------------------------------------------------------------

    async def _sys_loop(self) -> None:
        interval = self.settings.session.sys_interval
        while True:
            uptime = trio.current_time() - self.started_at
            now = now_ms()
            for topic, value in sys_values(self, uptime).items():
                out = Outbound(topic, value.encode(), 0, True, None, now, None, {})
                self.retained.local[topic] = out
                self.router.publish_local(out)
            await trio.sleep(interval)


def _specs(settings: Mapping[str, Any], host: str, mqtt_port: int, ws_port: int) -> list[ListenerSpec]:
    return listener_specs_from_dict(settings, host=host, port=mqtt_port, ws_port=ws_port)


def _log_anonymous_access(settings: Mapping[str, Any], hosts: Sequence[str], gs: GatewaySettings) -> None:
    outside = [h for h in hosts if not is_loopback(h)]
    if not outside:
        return
    auth = gs.authenticator
    if auth.allow_anonymous:
        log.warning("anonymous MQTT clients are accepted on %s, reachable from other machines "
                    "([mqtt] allowAnonymous = true)", ", ".join(outside) or "all addresses")
    elif "allowAnonymous" not in settings:
        log.info("anonymous MQTT clients are refused on %s (not a loopback address); "
                 "set [mqtt] allowAnonymous = true to accept them", ", ".join(outside) or "all addresses")
    if not auth.allow_anonymous and auth.password_file is None and not auth.use_identity_as_username:
        log.warning("no MQTT client can connect: anonymous access is off and there is no [mqtt] passwordFile")


def make_mqtt_gateway(broker: Broker, settings: Mapping[str, Any], *, host: str = "127.0.0.1",
                      mqtt_port: int = 1883, ws_port: int = 8083,
                      listeners: Sequence[ListenerSpec] | None = None,
                      cluster: ClusterSync | None = None) -> tuple[MQTTGateway, list[ListenerSpec]]:
    """The gateway and its listener specs, not running yet (``run_mqtt_gateway``
    runs them; ``gateway.broker_node`` also hands the gateway to the HTTP server)."""
    specs = list(listeners) if listeners is not None else _specs(settings, host, mqtt_port, ws_port)
    hosts = sorted({s.host for s in specs if s.enabled})
    gs = GatewaySettings.from_dict(settings, hosts=hosts)
    _log_anonymous_access(settings, hosts, gs)
    return MQTTGateway(broker, gs, cluster), specs


async def run_mqtt_gateway(broker: Broker, settings: Mapping[str, Any], *, host: str = "127.0.0.1",
                           mqtt_port: int = 1883, ws_port: int = 8083,
                           listeners: Sequence[ListenerSpec] | None = None,
                           task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve MQTT on ``broker`` until cancelled; ``started({listener name: port})``.

    ``settings``: the ``[mqtt]`` table (``ConfigError`` for an unknown key or
    a bad value). ``listeners``: explicit listener specs (tests: ``ephemeral=True``
    for OS-chosen ports); when given, ``host``/``mqtt_port``/``ws_port`` and the
    table's listener keys are not used.
    """
    gw, specs = make_mqtt_gateway(broker, settings, host=host, mqtt_port=mqtt_port, ws_port=ws_port,
                                  listeners=listeners)
    await gw.run(specs, task_status=task_status)
