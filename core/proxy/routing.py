"""Routes for RocketMQ 5 clients across a cluster: every broker group that
serves a topic, each with the gRPC endpoint of its master, from the name
servers' route (RocketMQ 5's proxy in local mode does the same, with one
gRPC port for every broker; here each broker tells its own).

Rules kept here:
- The name servers' route of the topic (GET_ROUTEINFO_BY_TOPIC, each name
  server in turn until one answers) says which broker groups hold it, with
  their queue counts and permissions. A group whose route has no master
  (broker id 0) is left out: 5.x clients read and write masters only, and a
  group in the middle of a failover comes back once its new master
  registers, so a client's next route refresh follows the name server to it.
- This broker's own group is always there, from its own topic table (the
  name server may not have its latest registration yet), and its endpoint
  is the one the client reached us by (``None`` here; the service fills it).
- Another group's endpoint is its master's remoting host with the gRPC port
  that master reports in GET_BROKER_RUNTIME_INFO (``grpcPort``). Answers are
  kept ``CACHE_S`` seconds per remoting address, so a master restarted or
  promoted on another port is found again soon; a master that does not
  answer, or serves no gRPC, is left out of the route (logged once per
  address until it answers again), never given an endpoint that cannot work.
- A route costs at most about two ``CALL_TIMEOUT_S``: the name servers are
  asked in turn within one, the masters' ports side by side within
  another; with no name server, or none answering, the route is this
  broker alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from core.client.api import ClientApi, MQClientError
from core.client.route import PERM_READ, PERM_WRITE, TopicRoute
from core.remoting.client import RemotingConnectionError, RemotingTimeoutError

log = logging.getLogger("mqgate.proxy")

CACHE_S = 5.0
CALL_TIMEOUT_S = 1.0  # loopback or LAN calls take milliseconds; two of these stay under a client's 3 s
_PEER_ERRORS = (MQClientError, RemotingConnectionError, RemotingTimeoutError, OSError, ValueError, trio.TooSlowError)


@dataclass(frozen=True, slots=True)
class RoutedGroup:
    """One broker group's share of a topic; ``endpoint`` None: this broker; ``addr``:
    another group's master's remoting address."""

    broker_name: str
    queues: int
    readable: bool
    writable: bool
    endpoint: tuple[str, int] | None
    addr: str | None = None


def _perm(perm: int) -> tuple[bool, bool]:
    return bool(perm & PERM_READ), bool(perm & PERM_WRITE)


class ClusterRoutes:
    """The topic's broker groups as the name servers ``namesrv_addrs`` route it;
    ``api`` makes the remoting calls, ``own_name`` is this broker's group."""

    def __init__(self, api: ClientApi | None, namesrv_addrs: list[str], own_name: str) -> None:
        self.api = api
        self.namesrv_addrs = list(namesrv_addrs)
        self.own_name = own_name
        self._ports: dict[str, tuple[float, int]] = {}  # remoting address -> (until, gRPC port or 0)
        self._unreachable: set[str] = set()
        self._groups: dict[str, tuple[float, list[RoutedGroup]]] = {}  # topic -> (until, other groups)

    async def name_server_route(self, topic: str) -> TopicRoute | None:
        """The first answering name server's route of ``topic`` (None: no route, or no
        answer within ``CALL_TIMEOUT_S`` in all)."""
        if self.api is None:
            return None
        with trio.move_on_after(CALL_TIMEOUT_S):
            for ns in self.namesrv_addrs:
                try:
                    return await self.api.get_route(ns, topic)
                except _PEER_ERRORS as e:
                    log.debug("name server %s gave no route of %s: %s", ns, topic, e)
        return None

    async def groups(self, topic: str, own: RoutedGroup | None) -> list[RoutedGroup]:
        """Every group serving ``topic``, this broker's (``own``, None when it has no such
        topic) first, the others by broker name."""
        route = await self.name_server_route(topic)
        if route is None:
            return [own] if own is not None else []
        masters = {b.broker_name: b.master_addr for b in route.broker_datas}
        others = sorted((qd for qd in route.queue_datas
                         if qd.broker_name != self.own_name and masters.get(qd.broker_name)),
                        key=lambda q: q.broker_name)
        ports: dict[str, int] = {}

        async def look_up(addr: str) -> None:
            ports[addr] = await self._grpc_port(addr)

        async with trio.open_nursery() as nursery:  # side by side: one master that hangs costs one timeout
            for addr in {masters[qd.broker_name] for qd in others}:
                nursery.start_soon(look_up, addr)
        out = [own] if own is not None else []
        for qd in others:
            addr = masters[qd.broker_name]
            if not ports.get(addr):
                continue
            readable, writable = _perm(qd.perm)
            out.append(RoutedGroup(qd.broker_name, max(qd.read_queue_nums, qd.write_queue_nums), readable,
                                   writable, (addr.rsplit(":", 1)[0], ports[addr]), addr))
        return out

    async def other_groups(self, topic: str) -> list[RoutedGroup]:
        """The other groups of ``topic``, as `groups` found them at most ``CACHE_S`` ago
        (for lite receives, which come far more often than route queries)."""
        now = trio.current_time()
        cached = self._groups.get(topic)
        if cached is None or cached[0] <= now:
            cached = self._groups[topic] = (now + CACHE_S, await self.groups(topic, None))
        return cached[1]

    async def _grpc_port(self, addr: str) -> int:
        now = trio.current_time()
        cached = self._ports.get(addr)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            with trio.fail_after(CALL_TIMEOUT_S):
                table = await self.api.broker_runtime_info(addr)
            port = int(table.get("grpcPort") or 0)
        except _PEER_ERRORS as e:
            if addr not in self._unreachable:
                log.warning("broker %s did not say its gRPC port (%s): its queues are left out of 5.x routes",
                            addr, str(e).splitlines()[0] if str(e) else type(e).__name__)
                self._unreachable.add(addr)
            port = 0
        else:
            self._unreachable.discard(addr)
        self._ports[addr] = (now + CACHE_S, port)
        return port
