"""What every ``mqgate admin`` command shares: the name servers, the cluster's
brokers, routes, and what the brokers know of a consumer group.

Rules kept here:

- Name servers are asked one at a time, the next one when one does not
  answer; each broker is asked directly. Nothing is cached across runs;
  within one run the cluster info and the brokers' group tables are read
  once.
- `AdminError` is a failure told in one line (exit status 1): an unknown
  topic or group, a message not found, a broker that refused.
  `AdminUsageError` is input that cannot be right (a malformed message id
  or time; exit status 2, like argparse's own errors).
- A consumer group is *known* when some master broker has a subscription
  config for it, a committed offset of it, or a client of it online.
  Commands about one group refuse an unknown one instead of printing an
  empty answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from core.client.api import ClientApi
from core.client.route import TopicRoute
from core.remoting.client import RemotingConnectionError, RemotingTimeoutError

__all__ = ["Admin", "AdminError", "AdminUsageError", "GroupFacts", "UNREACHABLE"]

UNREACHABLE = (RemotingConnectionError, RemotingTimeoutError, OSError)


class AdminError(Exception):
    """A failure reported in one line; exit status 1."""


class AdminUsageError(AdminError):
    """Input that cannot be right (malformed id, time...); exit status 2."""


@dataclass
class GroupFacts:
    """What the master brokers know of one consumer group."""

    name: str
    configured_on: list[str] = field(default_factory=list)  # brokers with a subscription config
    offsets: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)  # (broker, topic) -> queue -> offset
    connections: dict[str, dict] = field(default_factory=dict)  # broker -> ConsumerConnection JSON

    @property
    def known(self) -> bool:
        return bool(self.configured_on or self.offsets or self.connections)

    @property
    def topics(self) -> set[str]:
        return {t for (_b, t) in self.offsets}

    WHY_UNKNOWN = "no broker has a subscription config, a committed offset or an online client of it"

    def unknown_message(self) -> str:
        return f"consumer group {self.name} is unknown: {self.WHY_UNKNOWN}"


class Admin:
    def __init__(self, api: ClientApi, namesrvs: list[str]) -> None:
        self.api = api
        self.namesrvs = namesrvs
        self._cluster_info: dict | None = None
        self._groups: dict[str, dict[str, dict]] = {}  # broker addr -> subscription groups
        self._offsets: dict[str, dict[tuple[str, str], dict[int, int]]] = {}  # broker addr -> offsets

    async def on_namesrv(self, fn: Callable[[str], Awaitable[Any]]) -> Any:
        last: Exception | None = None
        for addr in self.namesrvs:
            try:
                return await fn(addr)
            except UNREACHABLE as exc:
                last = exc
        raise AdminError(f"no name server answered ({';'.join(self.namesrvs)}): {last}")

    async def route(self, topic: str) -> TopicRoute:
        route = await self.on_namesrv(lambda a: self.api.get_route(a, topic))
        if route is None:
            raise AdminError(f"topic {topic} does not exist (the name servers have no route for it)")
        return route

    async def cluster_info(self) -> dict:
        if self._cluster_info is None:
            self._cluster_info = await self.on_namesrv(self.api.get_cluster_info)
        return self._cluster_info

    async def brokers(self) -> dict[str, dict[int, str]]:
        """broker name -> {broker id: address}, every broker the name servers know."""
        info = await self.cluster_info()
        return {name: {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
                for name, bd in (info.get("brokerAddrTable") or {}).items()}

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """broker name -> master address (of one cluster when given)."""
        info = await self.cluster_info()
        names = None
        if cluster is not None:
            table = info.get("clusterAddrTable") or {}
            if cluster not in table:
                raise AdminError(f"cluster {cluster} is unknown to the name servers (they know {', '.join(sorted(table)) or 'none'})")
            names = set(table[cluster])
        return {name: addrs[0] for name, addrs in (await self.brokers()).items()
                if 0 in addrs and (names is None or name in names)}

    async def broker_groups(self, addr: str) -> dict[str, dict]:
        if addr not in self._groups:
            self._groups[addr] = await self.api.all_subscription_groups(addr)
        return self._groups[addr]

    async def broker_offsets(self, addr: str) -> dict[tuple[str, str], dict[int, int]]:
        if addr not in self._offsets:
            self._offsets[addr] = await self.api.all_consumer_offsets(addr)
        return self._offsets[addr]

    async def group_facts(self, group: str) -> GroupFacts:
        facts = GroupFacts(group)
        for name, addr in sorted((await self.masters()).items()):
            if group in await self.broker_groups(addr):
                facts.configured_on.append(name)
            for (topic, g), queues in (await self.broker_offsets(addr)).items():
                if g == group:
                    facts.offsets[(name, topic)] = queues
            conn = await self.api.consumer_connections(addr, group)
            if conn is not None:
                facts.connections[name] = conn
        return facts

    async def require_group(self, group: str) -> GroupFacts:
        facts = await self.group_facts(group)
        if not facts.known:
            raise AdminError(facts.unknown_message())
        return facts
