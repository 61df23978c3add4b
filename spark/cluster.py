"""The cluster side of ``format("rocketmq")``: routes, queue offsets and pulls, without Spark.

Rules kept here:
- Everything goes through `core.client.api` (the native remoting protocol),
  one short ``trio.run`` per call on connections of its own, so that a
  Spark Python worker (no event loop of its own) can call it and nothing
  is left open between calls.
- A queue is ``(broker group, queue id)`` of the topic's route; its key in
  offsets JSON is ``"<broker>:<queue id>"``.
- Replicas are tried slaves first (lowest id first), then the master: a
  slave holds only replicated data, which a failover keeps, and reading it
  spares the master. Queue bounds (min and max offsets) come from the same
  first replica that answers, so a read never plans offsets that only an
  unreplicated master holds. A replica that does not answer, lacks the
  topic, or does not hold the offsets yet is skipped for the next one;
  when none answers, the route is asked again (a failover moves the
  master) until ``timeout``.
- A pull body is the queue's stored entries concatenated (same layout as
  the commit log): `pull_range` hands out those bytes and entry starts for
  `spark.decode`, trimmed to exactly the queue offsets [start, end).
- An offset below the queue's min offset (the broker's retention deleted it)
  is data loss: `QueueDataLossError`, or with ``fail_on_data_loss=False`` a
  logged skip to the min offset.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import trio

from core.client.api import MQBrokerError, MQClientError, is_remoting_error, open_client_api
from core.client.instance import parse_namesrv
from core.client.model import MessageQueue
from core.client.route import PERM_READ, TopicRoute

log = logging.getLogger("spark.rocketmq")

GROUP = "MQGATE_SPARK"  # the consumer group of pulls; nothing is committed for it
PULL_MAX = 1024  # messages per pull (the broker's own cap)
CHUNK_BYTES = 8 << 20  # bytes pulled before a chunk is handed to the decoder
_FOUND, _NO_NEW, _NO_MATCHED, _MOVED = 0, 19, 20, 21
_QUEUE_OFFSET_POS = 20
_STORE_TS_POS = 56


class ClusterError(Exception):
    """The cluster could not answer what a read needs (no name server, no replica...)."""


class QueueDataLossError(Exception):
    def __init__(self, topic: str, key: str, start: int, min_offset: int):
        super().__init__(
            f"rocketmq: {topic} queue {key}: offsets {start}..{min_offset} ({min_offset - start} messages) were "
            f"deleted by the broker's retention (data loss; the queue now starts at {min_offset}); "
            "set failOnDataLoss=false to continue from there")
        self.start, self.min_offset = start, min_offset


def queue_key(broker: str, queue_id: int) -> str:
    return f"{broker}:{queue_id}"


def split_key(key: str) -> tuple[str, int]:
    broker, sep, qid = str(key).rpartition(":")
    if not sep or not broker or not qid.isdigit():
        raise ValueError(f"rocketmq: a queue is named '<broker>:<queue id>', e.g. 'broker-a:0': {key!r}")
    return broker, int(qid)


@dataclass(frozen=True, slots=True)
class Bounds:
    min: int
    max: int  # the next offset to be written (exclusive end)


def read_order(addrs: dict[int, str]) -> list[str]:
    """Slaves first (lowest id first), then the master (id 0)."""
    return [addrs[i] for i in sorted(addrs, key=lambda i: (i == 0, i))]


def _run(afn, *args):
    """``trio.run``; an error is raised as itself, not inside the nurseries' exception groups."""
    try:
        return trio.run(afn, *args)
    except BaseExceptionGroup as group:
        leaf = group
        while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
            leaf = leaf.exceptions[0]
        if leaf is group or isinstance(leaf, BaseExceptionGroup):
            raise
        raise leaf from None


async def _route(api, namesrvs: list[str], topic: str) -> TopicRoute:
    last: BaseException | None = None
    for ns in namesrvs:
        try:
            route = await api.get_route(ns, topic)
        except Exception as e:  # noqa: BLE001  (the next name server)
            last = e
            continue
        if route is None:
            raise ClusterError(f"rocketmq: the name servers know no topic {topic!r}")
        return route
    raise ClusterError(f"rocketmq: no name server answered ({';'.join(namesrvs)}): {last}")


def _readable(route: TopicRoute) -> dict[str, int]:
    """broker name -> read queue count, for brokers that allow reads."""
    return {q.broker_name: q.read_queue_nums for q in route.queue_datas if q.perm & PERM_READ}


async def _bounds(api, route: TopicRoute, topic: str) -> dict[str, Bounds]:
    out: dict[str, Bounds] = {}
    addrs = {b.broker_name: b.addrs for b in route.broker_datas}
    for broker, n in sorted(_readable(route).items()):
        stats = None
        errors = []
        for addr in read_order(addrs.get(broker, {})):
            try:
                stats = await api.topic_stats(addr, topic)
            except Exception as e:  # noqa: BLE001  (the next replica)
                errors.append(f"{addr}: {e}")
                continue
            if stats is not None:
                break
            errors.append(f"{addr}: no topic {topic} there yet")
        if stats is None:
            raise _Retry(f"rocketmq: no replica of broker {broker} answered for {topic}: {'; '.join(errors) or 'none registered'}")
        by_qid = {mq.queue_id: v for mq, v in stats.items()}
        for qid in range(n):
            v = by_qid.get(qid, {})
            out[queue_key(broker, qid)] = Bounds(int(v.get("minOffset", 0)), int(v.get("maxOffset", 0)))
    return out


class _Retry(ClusterError):
    """Worth asking the route again (a failover may be under way)."""


async def _with_route(namesrvs: list[str], topic: str, timeout: float, work):
    """``await work(api, route)``, asking the route again after a `_Retry` until ``timeout``."""
    deadline = time.monotonic() + timeout
    delay = 0.2
    async with open_client_api(5.0) as api:
        while True:
            route = await _route(api, namesrvs, topic)
            try:
                return await work(api, route)
            except _Retry:
                if time.monotonic() + delay > deadline:
                    raise
                await trio.sleep(delay)
                delay = min(delay * 2, 2.0)


def queue_bounds(namesrv: str, topic: str, timeout: float = 30.0) -> dict[str, Bounds]:
    """``{"broker:qid": Bounds}`` of every readable queue of ``topic``."""
    namesrvs = parse_namesrv(namesrv)
    return _run(_with_route, namesrvs, topic, timeout, lambda api, route: _bounds(api, route, topic))


def search_offsets(namesrv: str, topic: str, ms: int, timeout: float = 30.0) -> dict[str, int]:
    """Per queue, the first offset stored at or after ``ms`` (the broker's own lookup by time)."""
    namesrvs = parse_namesrv(namesrv)

    async def work(api, route: TopicRoute) -> dict[str, int]:
        bounds = await _bounds(api, route, topic)
        addrs = {b.broker_name: b.addrs for b in route.broker_datas}
        out = {}
        for key in bounds:
            broker, qid = split_key(key)
            for addr in read_order(addrs.get(broker, {})):
                try:
                    out[key] = await api.search_offset(addr, MessageQueue(topic, broker, qid), ms)
                    break
                except Exception:  # noqa: BLE001  (the next replica)
                    continue
            else:
                raise _Retry(f"rocketmq: no replica of broker {broker} answered a search by time")
        return out

    return _run(_with_route, namesrvs, topic, timeout, work)


@dataclass(slots=True)
class Pulled:
    """``count`` entries of one queue from offset ``first`` on, in ``data`` at ``starts``."""

    data: bytes
    starts: np.ndarray
    first: int
    count: int


def _entries(body: bytes, end: int) -> tuple[np.ndarray, int | None]:
    """Entry starts of a pull body whose queue offset is below ``end``, and the first offset."""
    starts = []
    pos, n = 0, len(body)
    first = None
    while pos + 4 <= n:
        size = int.from_bytes(body[pos:pos + 4], "big", signed=True)
        if size <= 0 or pos + size > n:
            break
        qoff = int.from_bytes(body[pos + _QUEUE_OFFSET_POS:pos + _QUEUE_OFFSET_POS + 8], "big", signed=True)
        if qoff >= end:
            break
        if first is None:
            first = qoff
        starts.append(pos)
        pos += size
    return np.asarray(starts, dtype=np.int64), first


async def _pull_chunk(api, route: TopicRoute, topic: str, broker: str, qid: int, start: int, end: int,
                      fail_on_data_loss: bool, skipped: list[int]) -> list[Pulled]:
    """Pulls from ``start`` until ``end`` or about `CHUNK_BYTES`; one replica after another."""
    addrs = read_order(next((b.addrs for b in route.broker_datas if b.broker_name == broker), {}))
    mq = MessageQueue(topic, broker, qid)
    key = queue_key(broker, qid)
    out: list[Pulled] = []
    got = 0
    offset = start
    errors: list[str] = []
    i = 0
    while offset < end and got < CHUNK_BYTES:
        if i >= len(addrs):
            if out:
                return out
            raise _Retry(f"rocketmq: {topic} queue {key}: no replica holds offset {offset} (planned up to {end}): "
                         + ("; ".join(errors) or "no replica registered"))
        addr = addrs[i]
        try:
            resp = await api.pull(addr, GROUP, mq, offset, min(PULL_MAX, end - offset), subscription="*",
                                  sub_version=0, commit_offset=None, suspend_ms=0, timeout=10.0)
        except (MQClientError, OSError) as e:
            if not (isinstance(e, MQBrokerError) or is_remoting_error(e)):
                raise
            errors.append(f"{addr}: {e}")
            i += 1
            continue
        except trio.TooSlowError as e:
            errors.append(f"{addr}: {e!r}")
            i += 1
            continue
        if resp.min_offset > offset and (resp.code != _FOUND or not resp.body):
            if fail_on_data_loss:
                raise QueueDataLossError(topic, key, offset, resp.min_offset)
            lost = min(resp.min_offset, end) - offset
            log.warning("rocketmq: %s queue %s: offsets %d..%d were deleted by retention; skipped %d messages "
                        "(failOnDataLoss=false)", topic, key, offset, resp.min_offset, lost)
            skipped[0] += lost
            offset = min(resp.min_offset, end)
            continue
        if resp.code == _FOUND and resp.body:
            starts, first = _entries(resp.body, end)
            if first is None or first != offset or not len(starts):
                errors.append(f"{addr}: answered offset {first} for {offset}")
                i += 1
                continue
            out.append(Pulled(resp.body, starts, first, len(starts)))
            got += len(resp.body)
            offset = first + len(starts)
            continue
        if resp.code == _NO_MATCHED and resp.next_begin_offset > offset:
            offset = min(resp.next_begin_offset, end)  # nothing for us there (cannot happen with "*")
            continue
        # NO_NEW_MSG or an offset this replica does not hold yet: the next replica
        errors.append(f"{addr}: holds {resp.min_offset}..{resp.max_offset}")
        i += 1
    return out


def pull_range(namesrv: str, topic: str, broker: str, qid: int, start: int, end: int | None, *,
               fail_on_data_loss: bool = True, timeout: float = 60.0) -> Iterator[Pulled]:
    """The entries of queue offsets [start, end) (``end=None``: the queue's max offset now), chunk by chunk."""
    namesrvs = parse_namesrv(namesrv)
    key = queue_key(broker, qid)
    if end is None:
        bounds = queue_bounds(namesrv, topic, timeout).get(key)
        end = bounds.max if bounds is not None else start  # a queue that left the route: nothing to add
    skipped = [0]
    offset = start
    while offset < end:
        chunks = _run(_with_route, namesrvs, topic, timeout,
                      lambda api, route: _pull_chunk(api, route, topic, broker, qid, offset, end, fail_on_data_loss,
                                                     skipped))
        if not chunks:
            break  # only a skip to the end (data loss) happened
        yield merge(chunks)  # one buffer per chunk: the decoder makes few large batches
        offset = chunks[-1].first + chunks[-1].count


def merge(chunks: list[Pulled]) -> Pulled:
    """The pulls of one chunk as one buffer (offsets may have gaps where data loss was skipped)."""
    if len(chunks) == 1:
        return chunks[0]
    bases = np.cumsum([0] + [len(c.data) for c in chunks[:-1]])
    starts = np.concatenate([c.starts + base for c, base in zip(chunks, bases)])
    return Pulled(b"".join(c.data for c in chunks), starts, chunks[0].first, sum(c.count for c in chunks))


def store_ms(p: Pulled) -> np.ndarray:
    """Store timestamps of the pulled entries (for tests and seeks)."""
    return np.array([int.from_bytes(p.data[s + _STORE_TS_POS:s + _STORE_TS_POS + 8], "big") for s in p.starts])
