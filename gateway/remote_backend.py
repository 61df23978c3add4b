"""The gateway's broker over the RocketMQ remoting protocol (``mqgate gateway``).

A ``gateway.backend.BrokerBackend`` that a gateway node with no store of its
own uses: routes come from the name servers, and every request is a
standard RocketMQ 4.x one (SEND_MESSAGE_V2, PULL_MESSAGE with long polling,
QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, VIEW_MESSAGE_BY_ID,
UPDATE_AND_CREATE_TOPIC), so an Apache RocketMQ 4.9.3+ broker with
``enableLmq`` and ``enableMultiDispatch`` could serve it as ours does.

Rules kept here:

* The *home* broker group serves the node's MQTT traffic: the master of
  the first broker name (sorted) in the name server's cluster table, the
  same for every node (a node waits, up to 30 s, for that group to have a
  master rather than take another group). Session queues (``%LMQ%...``)
  exist only where a message was stored with ``INNER_MULTI_DISPATCH``
  naming them, and sessions and node queues read them on the home group
  only; so every message that names a light queue (it reaches an MQTT
  subscriber), every retained or delayed one and every meta record is sent
  to the home group.
* Every other message (an MQTT publish that no subscriber's queue takes:
  it is kept only for native RocketMQ consumers of its topic) is spread
  over *all* broker groups of the cluster table by a hash of its MQTT
  topic (``group_for``): one topic stays on one group, so its order in
  its queue is kept. A group with no master now (failover) answers
  SERVICE_NOT_AVAILABLE for its topics (the client resends); the other
  groups go on. Sessions reading every group is not done yet
  (docs/CLUSTER.md).
* Sends of one ``send_many`` go one after the other, in order (meta
  records rely on the order of their writes); put hooks run on each
  message before its send, stored hooks after its answer. Every message
  carries ``mqgateNode`` (this node's id).
* The offset cache (module docstring of ``gateway.backend``): a max offset
  is raised by read answers, by the long poll of a watched queue and by one
  for each of our own sends that named the queue (a lower bound of the
  broker's, since other nodes' sends are not counted). Commits are kept
  here at once and sent by one task (the newest per queue), and flushed
  at shutdown.
* A send or read that fails at the connection level answers like a broker
  that is not available (SERVICE_NOT_AVAILABLE), never raises into the
  gateway's paths, and makes the node ask the name servers for every
  group's master at once (it also asks every ``HOME_CHECK_INTERVAL``):
  after a failover (docs/HA.md) the promoted master is used from then on.
"""

from __future__ import annotations

import logging
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import trio

from core.broker import PERM_READ, PERM_WRITE, PullResult, PullStatus, SendResult, SendStatus
from core.client import ClientApi, MessageQueue, MQClientError, UniqKeyFactory
from core.remoting import RequestCode
from core.store import PROPERTY_INNER_MULTI_DISPATCH, Message, encode_properties
from gateway.mapping import P_RETAIN, P_TIMER_DELAY, P_TOPIC
from gateway.nodes import P_NODE

log = logging.getLogger("mqgate.gateway")

GROUP = "mqgate_gateway"  # the group of the node's own reads (nothing is committed for it)
POLL_SUSPEND_MS = 15_000
RETRY_PAUSE = 1.0  # after a failed long poll: the broker or route is away
HOME_CHECK_INTERVAL = 5.0
_STATUS_BY_CODE = {s.code: s for s in SendStatus}


@dataclass(frozen=True, slots=True)
class RemoteTopic:
    """What the gateway reads of a topic config."""

    name: str
    write_queue_nums: int
    read_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE


def returned_after_waiting(result: PullResult) -> bool:
    """A long poll that found entries, or waited its time for them; any other
    answer comes back at once, and asking again at once would spin."""
    return result.status in (PullStatus.FOUND, PullStatus.PULL_NOT_FOUND)


def split_entries(body: bytes) -> list[bytes]:
    """The stored entries of a pull body, each whole (its first 4 bytes are its size)."""
    out = []
    pos, end = 0, len(body)
    while pos + 4 <= end:
        size = int.from_bytes(body[pos:pos + 4], "big")
        if size <= 0 or pos + size > end:
            break
        out.append(body[pos:pos + size])
        pos += size
    return out


class RemoteBackend:
    def __init__(self, api: ClientApi, namesrv: list[str], *, node_id: str, default_queue_nums: int = 4,
                 timers: bool = True) -> None:
        self.api = api
        self.namesrv = namesrv
        self.node_id = node_id
        self.default_queue_nums = default_queue_nums
        self._timers = timers
        self.home_name = ""
        self.home_addr = ""
        self.groups: dict[str, str | None] = {}  # every broker name of the cluster table -> its master now
        self._ids = UniqKeyFactory()
        self._put_hooks: list[Callable[[Message], None]] = []
        self._stored_hooks: list[Callable[[Message, Any], None]] = []
        self._listeners: list[Callable[[str, int, int], None]] = []
        self._topics: dict[str, RemoteTopic] = {}
        self._write_queues: dict[tuple[str, str], int] = {}  # (broker name, topic) -> write queue nums
        self._max: dict[str, int] = {}
        self._min: dict[str, int] = {}
        self._committed: dict[tuple[str, str], int] = {}
        self._dirty: dict[tuple[str, str], int] = {}
        self._commit_wake = trio.Event()
        self._watches: dict[str, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self._home_wake = trio.Event()

    # ---- running ----------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Find the home broker (waits for one to register), then serve until cancelled."""
        await self._find_home()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._commit_loop)
                nursery.start_soon(self._follow_home)
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(3):
                await self._flush_commits()

    async def _find_home(self) -> None:
        last = None
        with trio.move_on_after(30):
            while True:
                for ns in self.namesrv:
                    try:
                        info = await self.api.get_cluster_info(ns)
                    except Exception as e:  # noqa: BLE001 - try the next name server
                        last = e
                        continue
                    table = info.get("brokerAddrTable") or {}
                    if not table:
                        last = "no broker is registered"
                        continue
                    self._set_groups(table)
                    # the first name, master or not yet: every node must choose the same group
                    name = sorted(table)[0]
                    addrs = (table[name] or {}).get("brokerAddrs") or {}
                    master = addrs.get("0", addrs.get(0))
                    if master:
                        self.home_name, self.home_addr = name, master
                        log.info("gateway node %s: home broker %s at %s", self.node_id, name, master)
                        return
                    last = f"broker {name} has no master now"
                await trio.sleep(0.2)
        raise MQClientError(f"no broker found through name servers {';'.join(self.namesrv)}: {last}")

    def _set_groups(self, table: dict) -> None:
        groups = {}
        for name, data in table.items():
            addrs = (data or {}).get("brokerAddrs") or {}
            groups[name] = addrs.get("0", addrs.get(0))
        for name in sorted(set(groups) - set(self.groups)):
            log.info("gateway node %s: broker group %s (master %s)", self.node_id, name, groups[name])
        self.groups = groups

    async def _follow_home(self) -> None:
        while True:
            with trio.move_on_after(HOME_CHECK_INTERVAL):
                await self._home_wake.wait()
            self._home_wake = trio.Event()
            table = await self._cluster_table()
            if table:
                self._set_groups(table)
                master = self.groups.get(self.home_name)
                if master and master != self.home_addr:
                    log.warning("gateway node %s: broker %s now at %s (was %s)", self.node_id, self.home_name,
                                master, self.home_addr)
                    self.home_addr = master
            await trio.sleep(0.2)  # at most 5 lookups a second while a broker is away

    async def _cluster_table(self) -> dict | None:
        for ns in self.namesrv:
            try:
                info = await self.api.get_cluster_info(ns)
            except Exception:  # noqa: BLE001 - the next name server
                continue
            return info.get("brokerAddrTable") or None
        return None

    def group_addrs(self) -> list[str]:
        """The masters of every broker group now (the home one first)."""
        others = [addr for name, addr in sorted(self.groups.items()) if addr and name != self.home_name]
        return [self.home_addr, *others]

    def group_for(self, msg: Message) -> str:
        """The broker group a message goes to (module docstring): the home
        group unless nothing of the gateway reads it back."""
        props = msg.properties
        topic = props.get(P_TOPIC)
        if (topic is None or len(self.groups) < 2 or PROPERTY_INNER_MULTI_DISPATCH in props
                or props.get(P_RETAIN) == "true" or P_TIMER_DELAY in props):
            return self.home_name
        names = sorted(self.groups)
        return names[zlib.crc32(topic.encode()) % len(names)]

    def _unreachable(self) -> None:
        self._home_wake.set()

    # ---- hooks -----------------------------------------------------------------------

    def add_put_hook(self, hook) -> None:
        self._put_hooks.append(hook)

    def add_stored_hook(self, hook) -> None:
        self._stored_hooks.append(hook)

    def add_dispatch_listener(self, cb) -> None:
        self._listeners.append(cb)

    def _dispatched(self, queue: str, max_offset: int) -> None:
        if max_offset <= self._max.get(queue, -1):
            return
        self._max[queue] = max_offset
        for cb in self._listeners:
            cb(queue, 0, max_offset)

    # ---- sends -------------------------------------------------------------------------

    async def send_many(self, items: Iterable[tuple[Message, int | None]]) -> list[SendResult]:
        return [await self.send(msg, qid) for msg, qid in items]

    async def send(self, msg: Message, queue_id: int | None = None) -> SendResult:
        for hook in self._put_hooks:
            hook(msg)
        result = await self._send(msg, 0 if queue_id is None or queue_id < 0 else queue_id)
        for hook in self._stored_hooks:
            hook(msg, result)
        if result.ok and PROPERTY_INNER_MULTI_DISPATCH in msg.properties:
            for q in msg.properties[PROPERTY_INNER_MULTI_DISPATCH].split(","):
                if q in self._max:
                    self._dispatched(q, self._max[q] + 1)
        return result

    async def _send(self, msg: Message, queue_id: int) -> SendResult:
        group = self.group_for(msg)
        if group == self.home_name:
            addr = self.home_addr
        else:
            addr = self.groups.get(group)
            if not addr:
                self._unreachable()
                return SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=msg.topic,
                                  remark=f"broker group {group} has no master now")
            queue_id %= self._write_queues.get((group, msg.topic), self.default_queue_nums)
        props = dict(msg.properties)
        props.setdefault("UNIQ_KEY", self._ids.new())
        props.setdefault("WAIT", "true")
        props[P_NODE] = self.node_id
        header = {"a": GROUP, "b": msg.topic, "c": "TBW102", "d": self.default_queue_nums, "e": queue_id,
                  "f": 0, "g": msg.born_timestamp or int(time.time() * 1000), "h": msg.flag, "j": 0, "k": False,
                  "i": encode_properties(props)}
        try:
            resp = await self.api.call(addr, RequestCode.SEND_MESSAGE_V2, header, msg.body)
        except Exception as e:  # noqa: BLE001 - connection level: the broker is not available to us
            self._unreachable()
            return SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=msg.topic, remark=f"{type(e).__name__}: {e}")
        status = _STATUS_BY_CODE.get(resp.code, SendStatus.SYSTEM_ERROR)
        if not status.stored:
            return SendResult(status, topic=msg.topic, remark=resp.remark or "")
        msg_id = resp.get_str("msgId", "")
        phys = int(msg_id[-16:], 16) if len(msg_id) >= 16 else -1
        return SendResult(status, topic=msg.topic, queue_id=resp.get_int("queueId", queue_id),
                          queue_offset=resp.get_long("queueOffset", -1), uniq_key=props["UNIQ_KEY"],
                          physical_offset=phys)

    # ---- reads -------------------------------------------------------------------------

    async def read_queue(self, topic: str, queue_id: int, offset: int, max_count: int = 32) -> PullResult:
        return await self._pull(topic, queue_id, offset, max_count, 0)

    async def long_poll(self, topic: str, offset: int, max_count: int = 32) -> PullResult:
        """A read that waits at the broker (up to 15 s) for an entry at ``offset``."""
        return await self._pull(topic, 0, offset, max_count, POLL_SUSPEND_MS)

    async def _pull(self, topic: str, queue_id: int, offset: int, max_count: int, suspend_ms: int) -> PullResult:
        mq = MessageQueue(topic, self.home_name, queue_id)
        try:
            resp = await self.api.pull(self.home_addr, GROUP, mq, offset, max_count, subscription="*",
                                       sub_version=0, commit_offset=None, suspend_ms=suspend_ms,
                                       timeout=suspend_ms / 1000 + 5)
        except Exception as e:  # noqa: BLE001 - as a broker that is not available
            self._unreachable()
            return PullResult(PullStatus.SERVICE_NOT_AVAILABLE, next_begin_offset=offset,
                              remark=f"{type(e).__name__}: {e}")
        entries = split_entries(resp.body) if resp.code == 0 else []
        status = PullStatus(resp.code)
        if topic in self._max:
            self._dispatched(topic, resp.max_offset)
            self._min[topic] = resp.min_offset
        return PullResult(status, resp.next_begin_offset, resp.min_offset, resp.max_offset, entries,
                          list(range(offset, offset + len(entries))))

    async def read_at(self, physical_offset: int) -> bytes | None:
        try:
            raw = await self.api.view_message(self.home_addr, physical_offset)
        except Exception:  # noqa: BLE001 - gone (retention) or unreachable: the caller treats it as gone
            return None
        return raw or None

    # ---- offsets -------------------------------------------------------------------------

    async def prepare_queue(self, topic: str) -> None:
        mq = MessageQueue(topic, self.home_name, 0)
        self._max[topic] = max(self._max.get(topic, 0), await self.api.max_offset(self.home_addr, mq))
        self._min[topic] = await self.api.min_offset(self.home_addr, mq)
        committed = await self.api.query_consumer_offset(self.home_addr, topic, mq)
        if committed is not None:
            self._committed[(topic, topic)] = committed

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self._max.get(topic, 0)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self._min.get(topic, 0)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._committed.get((group, topic))

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = (group, topic)
        if self._committed.get(key) == offset:
            return
        self._committed[key] = offset
        self._dirty[key] = offset
        self._commit_wake.set()

    async def _commit_loop(self) -> None:
        while True:
            await self._commit_wake.wait()
            self._commit_wake = trio.Event()
            await self._flush_commits()

    async def _flush_commits(self) -> None:
        dirty, self._dirty = self._dirty, {}
        for (group, topic), offset in dirty.items():
            try:
                await self.api.update_consumer_offset(self.home_addr, group, MessageQueue(topic, self.home_name, 0),
                                                      offset)
            except Exception as e:  # noqa: BLE001 - the next commit of the queue carries it again
                log.warning("offset of %s not committed at %s: %s", topic, self.home_addr, e)
                self._dirty.setdefault((group, topic), offset)

    def watch_queue(self, topic: str, watch: bool) -> None:
        scope = self._watches.pop(topic, None)
        if scope is not None:
            scope.cancel()
        if watch and self._nursery is not None:
            scope = self._watches[topic] = trio.CancelScope()
            self._nursery.start_soon(self._watch, topic, scope)

    async def _watch(self, topic: str, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                result = await self.long_poll(topic, self._max.get(topic, 0), 1)
                if not returned_after_waiting(result):
                    if result.status is not PullStatus.SERVICE_NOT_AVAILABLE:
                        # e.g. a promoted slave has less of the queue than we saw: its end is the truth
                        self._max[topic] = result.max_offset
                    await trio.sleep(RETRY_PAUSE)

    # ---- topics ---------------------------------------------------------------------------

    def get_topic(self, name: str) -> RemoteTopic | None:
        return self._topics.get(name)

    async def ensure_topic(self, name: str, queue_nums: int = 1, perm: int = PERM_READ | PERM_WRITE) -> RemoteTopic:
        cfg = await self._route_topic(name)
        if cfg is None:
            await self.api.create_topic(self.home_addr, name, queue_nums, queue_nums, perm=perm)
            cfg = self._topics[name] = RemoteTopic(name, queue_nums, queue_nums, perm)
        return cfg

    async def topic_for_publish(self, name: str) -> RemoteTopic:
        """The topic's queues on the home broker; an unknown topic is sent with
        TBW102 as its default, so the broker creates it if it auto-creates."""
        cfg = self._topics.get(name) or await self._route_topic(name)
        if cfg is None:
            cfg = self._topics[name] = RemoteTopic(name, self.default_queue_nums, self.default_queue_nums)
        return cfg

    async def _route_topic(self, name: str) -> RemoteTopic | None:
        for ns in self.namesrv:
            try:
                route = await self.api.get_route(ns, name)
            except Exception:  # noqa: BLE001 - the next name server
                continue
            if route is None:
                return None
            for q in route.queue_datas:
                self._write_queues[(q.broker_name, name)] = q.write_queue_nums
            for q in route.queue_datas:
                if q.broker_name == self.home_name:
                    cfg = self._topics[name] = RemoteTopic(name, q.write_queue_nums, q.read_queue_nums, q.perm)
                    return cfg
            return None
        return None

    def writable(self) -> bool:
        return True  # not known here: a refusal is taken as lasting only when the broker says so

    def timers_supported(self) -> bool:
        return self._timers

    async def delete_queue(self, topic: str, queue_id: int) -> None:
        # No standard request deletes one light queue; a new session of the
        # client id starts at its end (prepare_queue), as in process.
        self._max.pop(topic, None)
        self._min.pop(topic, None)
        await trio.lowlevel.checkpoint()
