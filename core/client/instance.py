"""One client's connections, routes and periodic duties (Java ``MQClientInstance``).

Rules kept here:

- Each producer or consumer owns one `ClientInstance` (its own client id
  ``ip@instanceName`` and connections), so several consumers of one group
  can live in one process, like Java clients with distinct instance names.
- Routes come from the name servers (one at a time; the next one on a
  connection error) and are refreshed every ``poll_namesrv_interval``
  (30 s) for every topic in use; a topic whose route changed tells the
  owner (`on_route_changed`), which is how consumers learn about new queues.
- A topic created a moment ago (by an admin, or by a send that auto-created
  it) reaches the name servers only when its broker re-registers, a few ms
  later, longer on a busy machine. `wait_route` asks again (20 ms, doubling
  up to 0.5 s) for a bounded time instead of reporting "no route" at once.
- Heartbeats go to every broker of every known route every
  ``heartbeat_interval`` (30 s) and at once when a subscription changes;
  the body is HeartbeatData JSON with enums by name and ``CLIENT_INNER_PRODUCER``
  listed like the Java client does.
- Broker-to-client NOTIFY_CONSUMER_IDS_CHANGED (40) wakes the owner's
  rebalance (`on_consumer_ids_changed`); RESET_CONSUMER_CLIENT_OFFSET (220,
  an operator's ``resetOffsetByTime``) hands the new offsets to the owner
  (`on_reset_offset`), from either body form (ResetOffsetBody's
  MessageQueue keys, or the C++ form's list); other broker requests get
  REQUEST_CODE_NOT_SUPPORTED from the remoting client.
- `shutdown` sends UNREGISTER_CLIENT to every broker heartbeated to, each
  bounded by the call timeout, then closes every connection.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Protocol, TypeVar

import trio

from core.client.api import ClientApi, MQClientError, is_remoting_error
from core.client.model import MessageExt, MessageQueue
from core.client.route import TopicRoute
from core.remoting import (CURRENT_VERSION, LanguageCode, RemotingCommand, RequestCode, ResponseCode, decode_json,
                           encode_json)
from core.store.message import MessageFormatError, decode_message
from core.remoting.client import RemotingClient, split_addr

__all__ = ["ClientInstance", "ClientOwner", "local_ip", "parse_namesrv"]

log = logging.getLogger("mqgate.client")

DEFAULT_TOPIC = "TBW102"
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
VERSION_DESC = "V4_9_8"  # MQVersion's name for CURRENT_VERSION (405), in running info


_C = TypeVar("_C")


@asynccontextmanager
async def run_client(make: Callable[[trio.Nursery], _C]) -> AsyncIterator[_C]:
    """The body of every ``open_*``: make a producer or consumer in a nursery
    of its own (``make(nursery)``), start it, hand it out, and shut it down
    and cancel what it left running on the way out."""
    async with trio.open_nursery() as nursery:
        client = make(nursery)
        await client.start()
        try:
            yield client
        finally:
            await client.shutdown()
            nursery.cancel_scope.cancel()


class ClientOwner(Protocol):
    """What a producer or consumer tells its instance."""

    def heartbeat_data(self) -> tuple[list[dict], list[dict]]: ...  # (producerDataSet, consumerDataSet)

    def topics_in_use(self) -> set[str]: ...

    def on_route_changed(self, topic: str, route: TopicRoute) -> None: ...

    def on_consumer_ids_changed(self, group: str) -> None: ...

    # Consumers also have on_reset_offset(group, topic, {MessageQueue: offset}) for
    # RESET_CONSUMER_CLIENT_OFFSET; producers do not, so it is looked up with getattr.


def parse_namesrv(namesrv: str | list[str] | tuple[str, ...]) -> list[str]:
    """``"a:9876;b:9876"`` or a list -> a list of ``host:port``."""
    items = namesrv.replace(",", ";").split(";") if isinstance(namesrv, str) else list(namesrv)
    out = [a.strip() for a in items if a and a.strip()]
    if not out:
        raise ValueError("at least one name server address (host:port) is needed")
    for a in out:
        split_addr(a)
    return out


def local_ip(towards: str) -> str:
    """The address this host uses to reach ``towards`` (no packet is sent)."""
    host, port = split_addr(towards)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def default_instance_name() -> str:
    return f"{os.getpid()}#{time.monotonic_ns()}"


class ClientInstance:
    def __init__(
        self,
        nursery: trio.Nursery,
        namesrv: str | list[str],
        *,
        instance_name: str | None = None,
        heartbeat_interval: float = 30.0,
        poll_namesrv_interval: float = 30.0,
        timeout: float = 3.0,
    ) -> None:
        self.namesrv_addrs = parse_namesrv(namesrv)
        self._ns_index = random.randrange(len(self.namesrv_addrs))
        self.client_ip = local_ip(self.namesrv_addrs[0])
        self.instance_name = instance_name or default_instance_name()
        self.client_id = f"{self.client_ip}@{self.instance_name}"
        self.heartbeat_interval = heartbeat_interval
        self.poll_namesrv_interval = poll_namesrv_interval
        self.remoting = RemotingClient(
            nursery,
            handlers={RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: self._on_ids_changed,
                      RequestCode.RESET_CONSUMER_CLIENT_OFFSET: self._on_reset_offset,
                      RequestCode.GET_CONSUMER_RUNNING_INFO: self._on_running_info,
                      RequestCode.CONSUME_MESSAGE_DIRECTLY: self._on_consume_directly},
            language=LanguageCode.PYTHON,
            version=CURRENT_VERSION,
        )
        self.api = ClientApi(self.remoting, timeout)
        self.routes: dict[str, TopicRoute] = {}
        self.broker_addrs: dict[str, str] = {}  # broker name -> master address
        self.subscribe_addrs: dict[str, str] = {}  # broker name -> master, else a slave (reads and offsets)
        self._refreshed_at: dict[str, float] = {}  # topic -> trio time of the last refresh after a broker failed
        self.heartbeated: set[str] = set()
        self.owner: ClientOwner | None = None
        self._route_lock = trio.Lock()
        self._heartbeat_lock = trio.Lock()
        self._nursery = nursery
        self.closed = False

    # ---- lifecycle ----

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Periodic route refresh and heartbeats until cancelled."""
        task_status.started()
        next_route = trio.current_time() + self.poll_namesrv_interval
        next_hb = trio.current_time() + self.heartbeat_interval
        while True:
            await trio.sleep_until(min(next_route, next_hb))
            now = trio.current_time()
            if now >= next_route:
                next_route = now + self.poll_namesrv_interval
                await self.refresh_routes()
            if now >= next_hb:
                next_hb = now + self.heartbeat_interval
                await self.heartbeat()

    async def shutdown(self, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        with trio.CancelScope(shield=True):
            for addr in sorted(self.heartbeated):
                try:
                    await self.api.unregister_client(addr, self.client_id, producer_group, consumer_group)
                except Exception as exc:  # a dead broker must not stop the others
                    log.info("unregister from %s failed: %s", addr, exc)
        self.remoting.aclose_nowait()

    # ---- routes ----

    async def _namesrv_call(self, fn: Callable[[str], Any]) -> Any:
        last: BaseException | None = None
        n = len(self.namesrv_addrs)
        for i in range(n):
            addr = self.namesrv_addrs[(self._ns_index + i) % n]
            try:
                result = await fn(addr)
                self._ns_index = (self._ns_index + i) % n
                return result
            except Exception as exc:
                if not is_remoting_error(exc):
                    raise
                last = exc
        raise MQClientError(f"no name server answered ({', '.join(self.namesrv_addrs)}): {last}")

    async def fetch_route(self, topic: str) -> TopicRoute | None:
        """Ask the name servers now; None if the topic has no route."""
        return await self._namesrv_call(lambda addr: self.api.get_route(addr, topic))

    async def update_route(self, topic: str) -> TopicRoute | None:
        route = await self.fetch_route(topic)
        if route is None:
            return None
        async with self._route_lock:
            old = self.routes.get(topic)
            self.routes[topic] = route
            masters = route.broker_addrs()
            for b in route.broker_datas:  # a master that left the route (dead, or failed over) is forgotten
                if b.broker_name in masters:
                    self.broker_addrs[b.broker_name] = masters[b.broker_name]
                else:
                    self.broker_addrs.pop(b.broker_name, None)
            self.subscribe_addrs.update(route.subscribe_addrs())
        if old != route and self.owner is not None:
            self.owner.on_route_changed(topic, route)
        return route

    async def wait_route(self, topic: str, timeout: float) -> TopicRoute | None:
        """The route of ``topic``, asked again until it appears or ``timeout``
        seconds pass (then None): a new topic's broker registers it with the
        name servers asynchronously."""
        delay = 0.02
        with trio.move_on_after(timeout):
            while True:
                route = await self.update_route(topic)
                if route is not None:
                    return route
                await trio.sleep(delay)
                delay = min(delay * 2, 0.5)
        return None

    async def route(self, topic: str) -> TopicRoute | None:
        route = self.routes.get(topic)
        if route is None:
            route = await self.update_route(topic)
        return route

    async def refresh_routes(self) -> None:
        topics = set(self.routes)
        if self.owner is not None:
            topics |= self.owner.topics_in_use()
        for topic in sorted(topics):
            try:
                await self.update_route(topic)
            except Exception as exc:
                log.info("route refresh for %s failed: %s", topic, exc)

    def broker_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name)

    async def find_broker_addr(self, broker_name: str, topic: str) -> str:
        """Where to send: the master of that broker name."""
        return await self._find_addr(self.broker_addrs, broker_name, topic)

    async def find_broker_addr_in_subscribe(self, broker_name: str, topic: str) -> str:
        """Where to pull from and commit offsets to: the master, else a slave of that broker name."""
        return await self._find_addr(self.subscribe_addrs, broker_name, topic)

    async def _find_addr(self, table: dict[str, str], broker_name: str, topic: str) -> str:
        addr = table.get(broker_name)
        if addr is None:
            await self.update_route(topic)
            addr = table.get(broker_name)
        if addr is None:
            raise MQClientError(f"broker {broker_name} is not in the route of {topic}")
        return addr

    async def broker_failed(self, topic: str) -> None:
        """A broker of ``topic`` did not answer: ask the name servers again now
        (at most once a second per topic) instead of at the next 30 s poll, so
        reads move to a slave, or to a new master, within seconds."""
        now = trio.current_time()
        if now - self._refreshed_at.get(topic, -1e9) < 1.0:
            return
        self._refreshed_at[topic] = now
        try:
            await self.update_route(topic)
        except Exception as exc:
            log.info("route refresh for %s after a broker failure failed: %s", topic, exc)

    # ---- heartbeats ----

    def heartbeat_body(self) -> dict:
        producers, consumers = self.owner.heartbeat_data() if self.owner is not None else ([], [])
        return {"clientID": self.client_id, "consumerDataSet": consumers, "producerDataSet": producers}

    async def heartbeat(self) -> None:
        """One heartbeat to every broker we know of; failures are logged, not raised."""
        async with self._heartbeat_lock:
            body = self.heartbeat_body()
            addrs = sorted({a for r in self.routes.values() for a in r.all_addrs()})
            for addr in addrs:
                try:
                    await self.api.heartbeat(addr, body)
                    self.heartbeated.add(addr)
                except Exception as exc:
                    log.info("heartbeat to %s failed: %s", addr, exc)

    async def _on_ids_changed(self, addr: str, cmd: RemotingCommand) -> None:
        group = cmd.get_str("consumerGroup", "")
        log.debug("consumer ids of %s changed (from %s)", group, addr)
        if self.owner is not None:
            self.owner.on_consumer_ids_changed(group)
        return None

    async def _on_reset_offset(self, addr: str, cmd: RemotingCommand) -> None:
        group, topic = cmd.get_str("group", ""), cmd.get_str("topic", "")
        try:
            offsets = parse_reset_offset_body(cmd.body)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable RESET_CONSUMER_CLIENT_OFFSET body from %s: %s", addr, exc)
            return None
        log.info("reset offsets of %s on %s from %s: %s", group, topic, addr, offsets)
        reset = getattr(self.owner, "on_reset_offset", None)
        if reset is not None:
            reset(group, topic, offsets)
        return None

    def _consumer_of(self, cmd: RemotingCommand, method: str):
        group = cmd.get_str("consumerGroup", "")
        if getattr(self.owner, "group", None) == group and hasattr(self.owner, method):
            return getattr(self.owner, method)
        return None

    async def _on_running_info(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (307, passed on by a broker for an operator)."""
        running_info = self._consumer_of(cmd, "running_info")
        if running_info is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{cmd.get_str('consumerGroup', '')}> "
                                     "not exist in this consumer")
        info = running_info(jstack=cmd.get_str("jstackEnable", "false") == "true")
        info["properties"]["PROP_CLIENT_VERSION"] = VERSION_DESC
        return cmd.make_response(ResponseCode.SUCCESS, body=encode_json(info, standard=False).encode())

    async def _on_consume_directly(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY (309): the stored message in the body goes to the listener once."""
        consume = self._consumer_of(cmd, "consume_directly")
        if consume is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{cmd.get_str('consumerGroup', '')}> "
                                     "not exist in this consumer")
        try:
            msg = MessageExt.from_stored(decode_message(cmd.body), cmd.get_str("brokerName", ""))
        except MessageFormatError as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"unreadable message in the request: {exc}")
        result = await consume(msg)
        return cmd.make_response(ResponseCode.SUCCESS, body=encode_json(result, standard=False).encode())


def parse_reset_offset_body(body: bytes) -> dict[MessageQueue, int]:
    """ResetOffsetBody (``{"offsetTable": {{mq}: offset}}``) or ResetOffsetBodyForC
    (``{"offsetTable": [{..mq.., "offset": n}]}``) -> {queue: offset}."""
    table = decode_json(body).get("offsetTable") or {}
    if isinstance(table, list):
        return {MessageQueue.from_json(e): int(e["offset"]) for e in table}
    return {MessageQueue.from_json(dict(k)): int(v) for k, v in table.items()}
