"""The gateway's broker over the RocketMQ remoting protocol (``mqgate gateway``).

A ``gateway.backend.BrokerBackend`` that a gateway node with no store of its
own uses: routes come from the name servers, and every request is a
standard RocketMQ 4.x one (SEND_MESSAGE_V2, PULL_MESSAGE with long polling,
QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, VIEW_MESSAGE_BY_ID,
UPDATE_AND_CREATE_TOPIC), so an Apache RocketMQ 4.9.3+ broker with
``enableLmq`` and ``enableMultiDispatch`` could serve it as ours does.

Rules kept here:

* Which broker group holds what is ``gateway.broker_groups``: an MQTT
  publish goes to the group of its topic's hash, with the light queues of
  its ``INNER_MULTI_DISPATCH`` filled there; meta records and delayed
  messages go to the home group; a light queue is read on every group
  (its queue ids are the group indexes; cached offsets, commits and long
  polls are per (queue, queue id)). A group with no master now answers
  SERVICE_NOT_AVAILABLE for its topics (the client resends); the other
  groups go on.
* A send result's ``physical_offset`` carries its group index above
  ``GROUP_SHIFT`` bits (home: the broker's offset itself), so the retained
  index names the group that holds a retained message and ``read_at``
  asks that group.
* Sends of one ``send_many`` go one after the other, in order (meta
  records rely on the order of their writes); put hooks run on each
  message before its send, the stored hooks of its topic after its answer. Every message
  carries ``mqgateNode`` (this node's id).
* The offset cache (module docstring of ``gateway.backend``): a max offset
  is raised by read answers, by the long poll of a watched queue and, for
  a queue not watched during the send, by one for each of our own sends
  that named it (a lower bound of the broker's, since other nodes' sends
  are not counted).
  Never above the broker's: a reader stopped at an offset with no entry
  waits for the cache to rise, and answers that count the entry later
  would no longer raise it (issue 17). Commits are kept
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
from dataclasses import dataclass
from typing import Callable, Iterable

import trio

from core.broker import PERM_READ, PERM_WRITE, PullResult, PullStatus, SendResult, SendStatus, TopicHooks
from core.client import ClientApi, MessageQueue, MQClientError, UniqKeyFactory
from core.remoting import RequestCode
from core.store import PROPERTY_INNER_MULTI_DISPATCH, Message, encode_properties
from gateway.broker_groups import BrokerGroups
from gateway.nodes import P_NODE

log = logging.getLogger("mqgate.gateway")

GROUP = "mqgate_gateway"  # the group of the node's own reads (nothing is committed for it)
POLL_SUSPEND_MS = 15_000
RETRY_PAUSE = 1.0  # after a failed long poll: the broker or route is away
HOME_CHECK_INTERVAL = 5.0
_STATUS_BY_CODE = {s.code: s for s in SendStatus}
# A send result's physical_offset carries its group index above these bits
# (the home group is 0: its offsets are the broker's own).
GROUP_SHIFT = 56
PHYS_MASK = (1 << GROUP_SHIFT) - 1


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
    sends_wait = True  # every send is a request to a broker

    def __init__(self, api: ClientApi, namesrv: list[str], *, node_id: str, default_queue_nums: int = 4,
                 timers: bool = True) -> None:
        self.api = api
        self.namesrv = namesrv
        self.node_id = node_id
        self.default_queue_nums = default_queue_nums
        self._timers = timers
        self.routes = BrokerGroups(api, namesrv, node_id)
        self._ids = UniqKeyFactory()
        self._put_hooks: list[Callable[[Message], None]] = []
        self._stored_hooks = TopicHooks()
        self._listeners: list[Callable[[str, int, int], None]] = []
        self._topics: dict[str, RemoteTopic] = {}
        self._write_queues: dict[tuple[str, str], int] = {}  # (broker name, topic) -> write queue nums
        # keyed (queue, queue id): of a light queue the id is the group index
        self._max: dict[tuple[str, int], int] = {}
        self._min: dict[tuple[str, int], int] = {}
        self._committed: dict[tuple[str, str, int], int] = {}
        self._dirty: dict[tuple[str, str, int], int] = {}
        self._commit_wake = trio.Event()
        self._watches: dict[tuple[str, int], trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self._home_wake = trio.Event()

    # ---- running ----------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Find the home broker (waits for one to register), then serve until cancelled."""
        await self.routes.find()
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

    async def _follow_home(self) -> None:
        while True:
            with trio.move_on_after(HOME_CHECK_INTERVAL):
                await self._home_wake.wait()
            self._home_wake = trio.Event()
            await self.routes.refresh()
            await trio.sleep(0.2)  # at most 5 lookups a second while a broker is away

    @property
    def home_name(self) -> str:
        return self.routes.home_name

    @property
    def home_addr(self) -> str:
        return self.routes.home_addr

    def group_addrs(self) -> list[str]:
        """The masters of every broker group now (the home one first)."""
        return self.routes.addrs()

    def queue_ids(self, topic: str) -> range:
        """The queue ids a reader of ``topic`` reads: of a light queue one per broker group."""
        return self.routes.queue_ids(topic)

    def _unreachable(self) -> None:
        self._home_wake.set()

    # ---- hooks -----------------------------------------------------------------------

    def add_put_hook(self, hook) -> None:
        self._put_hooks.append(hook)

    def add_stored_hook(self, hook, *, topics=None) -> None:
        self._stored_hooks.add(hook, topics)

    def add_dispatch_listener(self, cb) -> None:
        self._listeners.append(cb)

    def _dispatched(self, key: tuple[str, int], max_offset: int) -> None:
        if max_offset <= self._max.get(key, -1):
            return
        self._max[key] = max_offset
        for cb in self._listeners:
            cb(key[0], key[1], max_offset)

    # ---- sends -------------------------------------------------------------------------

    async def send_many(self, items: Iterable[tuple[Message, int | None]], *,
                        checkpoint: bool = True) -> list[SendResult]:
        """``checkpoint`` is for the local broker's sake: a remote send always waits."""
        return [await self.send(msg, qid) for msg, qid in items]

    async def send(self, msg: Message, queue_id: int | None = None) -> SendResult:
        for hook in self._put_hooks:
            hook(msg)
        group = self.routes.group_for(msg)
        # Counted here: the queues of the message that no long poll watches for
        # the whole send. A watched queue's long poll counts the entry, and its
        # answer often comes before this one (the broker answers a parked pull
        # at the append, a send after its flush): one more would count it twice.
        dispatch = msg.properties.get(PROPERTY_INNER_MULTI_DISPATCH)
        unwatched = () if dispatch is None else [k for q in dispatch.split(",") if (k := (q, group)) in self._max
                                                 and k not in self._watches]
        # Cancelled (its connection closed) or failed before an answer: the
        # stored hooks still hear the message, as not stored, so what its put
        # hooks left waiting for them is not kept forever.
        result = SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=msg.topic, remark="no answer")
        try:
            result = await self._send(msg, 0 if queue_id is None or queue_id < 0 else queue_id, group)
        finally:
            for hook in self._stored_hooks.for_topic(msg.topic):
                hook(msg, result)
        if result.ok:
            for key in unwatched:
                if key in self._max and key not in self._watches:
                    self._dispatched(key, self._max[key] + 1)
        return result

    async def _send(self, msg: Message, queue_id: int, group: int) -> SendResult:
        addr = self.routes.addr(group)
        if group:
            name = self.routes.order[group]
            if not addr:
                self._unreachable()
                return SendResult(SendStatus.SERVICE_NOT_AVAILABLE, topic=msg.topic,
                                  remark=f"broker group {name} has no master now")
            queue_id %= self._write_queues.get((name, msg.topic), self.default_queue_nums)
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
        phys = int(msg_id[-16:], 16) | group << GROUP_SHIFT if len(msg_id) >= 16 else -1
        return SendResult(status, topic=msg.topic, queue_id=resp.get_int("queueId", queue_id),
                          queue_offset=resp.get_long("queueOffset", -1), uniq_key=props["UNIQ_KEY"],
                          physical_offset=phys)

    # ---- reads -------------------------------------------------------------------------

    async def read_queue(self, topic: str, queue_id: int, offset: int, max_count: int = 32) -> PullResult:
        return await self._pull(topic, queue_id, offset, max_count, 0)

    async def long_poll(self, topic: str, offset: int, max_count: int = 32, queue_id: int = 0) -> PullResult:
        """A read that waits at the broker (up to 15 s) for an entry at ``offset``."""
        return await self._pull(topic, queue_id, offset, max_count, POLL_SUSPEND_MS)

    async def _pull(self, topic: str, queue_id: int, offset: int, max_count: int, suspend_ms: int) -> PullResult:
        group, name, qid = self.routes.where(topic, queue_id)
        addr = self.routes.addr(group)
        try:
            if not addr:
                raise MQClientError(f"broker group {name} has no master now")
            resp = await self.api.pull(addr, GROUP, MessageQueue(topic, name, qid), offset, max_count,
                                       subscription="*", sub_version=0, commit_offset=None, suspend_ms=suspend_ms,
                                       timeout=suspend_ms / 1000 + 5)
        except Exception as e:  # noqa: BLE001 - as a broker that is not available
            self._unreachable()
            return PullResult(PullStatus.SERVICE_NOT_AVAILABLE, next_begin_offset=offset,
                              remark=f"{type(e).__name__}: {e}")
        entries = split_entries(resp.body) if resp.code == 0 else []
        status = PullStatus(resp.code)
        key = (topic, queue_id)
        if key in self._max:
            self._dispatched(key, resp.max_offset)
            self._min[key] = resp.min_offset
        return PullResult(status, resp.next_begin_offset, resp.min_offset, resp.max_offset, entries,
                          list(range(offset, offset + len(entries))))

    async def read_at(self, physical_offset: int) -> bytes | None:
        """The entry at a ``physical_offset`` of a send result (its group in the high bits)."""
        group = physical_offset >> GROUP_SHIFT
        addr = self.routes.addr(group)
        if not addr:
            return None
        try:
            raw = await self.api.view_message(addr, physical_offset & PHYS_MASK)
        except Exception:  # noqa: BLE001 - gone (retention) or unreachable: the caller treats it as gone
            return None
        return raw or None

    # ---- offsets -------------------------------------------------------------------------

    async def prepare_queue(self, topic: str) -> None:
        """Fill the offset cache of a light queue on every group whose master answers."""
        for queue_id in self.queue_ids(topic):
            group, name, qid = self.routes.where(topic, queue_id)
            addr, mq, key = self.routes.addr(group), MessageQueue(topic, name, qid), (topic, queue_id)
            try:
                if not addr:
                    raise MQClientError(f"broker group {name} has no master now")
                self._max[key] = max(self._max.get(key, 0), await self.api.max_offset(addr, mq))
                self._min[key] = await self.api.min_offset(addr, mq)
                committed = await self.api.query_consumer_offset(addr, topic, mq)
            except Exception as e:  # noqa: BLE001 - the other groups go on; this one's long poll catches up
                if group == 0:
                    raise
                log.warning("queue %s on broker group %s not prepared: %s", topic, name, e)
                self._max.setdefault(key, 0)
                continue
            if committed is not None:
                self._committed[(topic, topic, queue_id)] = committed

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self._max.get((topic, queue_id), 0)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self._min.get((topic, queue_id), 0)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._committed.get((group, topic, queue_id))

    async def fetch_committed(self, group: str, topic: str, queue_id: int) -> int | None:
        """``group``'s committed offset of the queue, asked of its broker now (None: none, or not answered)."""
        index, name, qid = self.routes.where(topic, queue_id)
        addr = self.routes.addr(index)
        try:
            if not addr:
                raise MQClientError(f"broker group {name} has no master now")
            committed = await self.api.query_consumer_offset(addr, group, MessageQueue(topic, name, qid))
        except Exception as e:  # noqa: BLE001 - no checkpoint: a full replay, which is only slower
            log.warning("offset of group %s on %s not known: %s", group, topic, e)
            return None
        if committed is not None:
            self._committed[(group, topic, queue_id)] = committed
        return committed

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = (group, topic, queue_id)
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
        for (group, topic, queue_id), offset in dirty.items():
            index, name, qid = self.routes.where(topic, queue_id)
            addr = self.routes.addr(index)
            try:
                if not addr:
                    raise MQClientError(f"broker group {name} has no master now")
                await self.api.update_consumer_offset(addr, group, MessageQueue(topic, name, qid), offset)
            except Exception as e:  # noqa: BLE001 - the next commit of the queue carries it again
                log.warning("offset of %s not committed at broker group %s: %s", topic, name, e)
                self._dirty.setdefault((group, topic, queue_id), offset)

    def watch_queue(self, topic: str, watch: bool) -> None:
        for queue_id in self.queue_ids(topic):
            key = (topic, queue_id)
            scope = self._watches.pop(key, None)
            if scope is not None:
                scope.cancel()
            if watch and self._nursery is not None:
                scope = self._watches[key] = trio.CancelScope()
                self._nursery.start_soon(self._watch, key, scope)

    async def _watch(self, key: tuple[str, int], scope: trio.CancelScope) -> None:
        topic, queue_id = key
        with scope:
            while True:
                result = await self.long_poll(topic, self._max.get(key, 0), 1, queue_id)
                if not returned_after_waiting(result):
                    if result.status is not PullStatus.SERVICE_NOT_AVAILABLE:
                        # e.g. a promoted slave has less of the queue than we saw: its end is the truth
                        self._max[key] = result.max_offset
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
        for queue_id in self.queue_ids(topic):
            self._max.pop((topic, queue_id), None)
            self._min.pop((topic, queue_id), None)
        await trio.lowlevel.checkpoint()
