"""The broker side of REGISTER_BROKER: register with every name server, periodically.

Modelled on RocketMQ 4.9.x ``BrokerController.registerBrokerAll`` /
``BrokerOuterAPI`` (reference 3.3, 9). Rules kept here:

- Registration goes to every configured name server, concurrently, each
  call with its own timeout; one name server being down never delays or
  prevents registration with the others (name servers are independent).
- Once at start, then every ``period`` seconds (30 s; RocketMQ clamps the
  setting to 10..60 s), and at once (debounced) whenever `trigger` is called,
  e.g. when a topic is created so clients find its route without waiting.
- The body is the broker's whole topic table (``topicConfigSerializeWrapper``),
  so a name server that restarted learns everything at the next round.
- On shutdown the broker unregisters from every name server (best effort,
  bounded in time).
- What name servers answer a slave is kept: `master_addr` and
  `ha_server_addr` are the latest non-empty ``masterAddr`` / ``haServerAddr``
  of a successful REGISTER_BROKER response, from whichever name server
  answered last; an empty answer never erases them. When either changes,
  the event of `master_changed` is set and ``on_master(master_addr,
  ha_server_addr)`` is called (it must not block).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import trio

from core.namesrv.register_body import RegisterBrokerBody, body_crc32, encode_register_body
from core.namesrv.route_table import DataVersion, TopicConfig
from core.remoting import RemotingCommand, RequestCode, ResponseCode
from core.remoting.client import RemotingClient, RemotingConnectionError, RemotingTimeoutError, open_remoting_client

__all__ = ["BrokerIdentity", "BrokerRegistrar"]

log = logging.getLogger("mqgate.namesrv.registration")

TopicWrapper = Callable[[], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    cluster: str
    broker_name: str
    broker_addr: str
    broker_id: int = 0
    ha_server_addr: str = ""


class BrokerRegistrar:
    """Keeps one broker registered with a list of name servers."""

    def __init__(
        self,
        client: RemotingClient,
        namesrv_addrs: list[str],
        identity: BrokerIdentity,
        topic_wrapper: TopicWrapper,
        *,
        period: float = 30.0,
        timeout: float = 6.0,
        compressed: bool = False,
        on_master: Callable[[str | None, str | None], None] | None = None,
    ) -> None:
        self.client = client
        self.namesrv_addrs = list(namesrv_addrs)
        self.identity = identity
        self.topic_wrapper = topic_wrapper
        self.period = period
        self.timeout = timeout
        self.compressed = compressed
        self._wake = trio.Event()
        self.rounds = 0
        self.last_results: dict[str, RemotingCommand | Exception] = {}
        self.master_addr: str | None = None  # the master's remoting address, as a name server told this slave
        self.ha_server_addr: str | None = None  # the master's HA address, likewise
        self.on_master = on_master
        self._master_changed = trio.Event()

    def master_changed(self) -> trio.Event:
        """An event set the next time `master_addr` or `ha_server_addr` changes."""
        return self._master_changed

    def _learn_master(self, resp: RemotingCommand) -> None:
        master = resp.get_str("masterAddr", "") or self.master_addr
        ha = resp.get_str("haServerAddr", "") or self.ha_server_addr
        if (master, ha) == (self.master_addr, self.ha_server_addr):
            return
        self.master_addr, self.ha_server_addr = master, ha
        log.info("name server says the master is %s (HA %s)", master, ha)
        event, self._master_changed = self._master_changed, trio.Event()
        event.set()
        if self.on_master is not None:
            self.on_master(master, ha)

    def trigger(self) -> None:
        """Register again soon (debounced with other triggers)."""
        self._wake.set()

    def _body(self) -> bytes:
        wrapper = self.topic_wrapper()
        configs = {
            str(name): TopicConfig.from_json(str(name), tc) for name, tc in (wrapper.get("topicConfigTable") or {}).items()
        }
        body = RegisterBrokerBody(DataVersion.from_json(wrapper.get("dataVersion")), configs, [])
        return encode_register_body(body, compressed=self.compressed)

    def _header(self, body: bytes) -> dict[str, Any]:
        i = self.identity
        return {
            "brokerAddr": i.broker_addr,
            "brokerId": i.broker_id,
            "brokerName": i.broker_name,
            "clusterName": i.cluster,
            "compressed": self.compressed,
            "haServerAddr": i.ha_server_addr,
            "bodyCrc32": body_crc32(body),
        }

    async def register_all(self) -> dict[str, RemotingCommand | Exception]:
        """One round: register with every name server; the outcome per address."""
        body = self._body()
        header = self._header(body)
        results: dict[str, RemotingCommand | Exception] = {}

        async def one(addr: str) -> None:
            req = RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body)
            try:
                resp = await self.client.invoke(addr, req, timeout=self.timeout)
            except (RemotingConnectionError, RemotingTimeoutError, OSError) as exc:
                log.warning("register with name server %s failed: %s", addr, exc)
                results[addr] = exc
                return
            if resp.code != ResponseCode.SUCCESS:
                log.warning("name server %s refused registration: %s %s", addr, resp.code, resp.remark)
            else:
                self._learn_master(resp)
            results[addr] = resp

        async with trio.open_nursery() as nursery:
            for addr in self.namesrv_addrs:
                nursery.start_soon(one, addr)
        self.rounds += 1
        self.last_results = results
        return results

    async def unregister_all(self, timeout: float = 1.0) -> None:
        """Best effort. Uses fresh connections: on shutdown the pooled ones are being cancelled."""
        i = self.identity
        header = {"brokerAddr": i.broker_addr, "brokerId": i.broker_id, "brokerName": i.broker_name, "clusterName": i.cluster}

        async def one(client: RemotingClient, addr: str) -> None:
            try:
                await client.invoke(addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header), timeout=timeout)
            except (RemotingConnectionError, RemotingTimeoutError, OSError) as exc:
                log.info("unregister from name server %s failed: %s", addr, exc)

        async with open_remoting_client(connect_timeout=timeout) as client, trio.open_nursery() as nursery:
            for addr in self.namesrv_addrs:
                nursery.start_soon(one, client, addr)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Register now, report started, then keep registering until cancelled; unregister on the way out."""
        if not self.namesrv_addrs:
            task_status.started()
            await trio.sleep_forever()
        try:
            await self.register_all()
            task_status.started()
            while True:
                with trio.move_on_after(self.period):
                    await self._wake.wait()
                    await trio.sleep(0.005)  # let a burst of topic creations settle into one round
                self._wake = trio.Event()
                await self.register_all()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await self.unregister_all()
