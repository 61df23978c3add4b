"""What every broker processor shares: the broker, client groups, locks, notifications.

Rules kept here:

- Tables that expire (client channels, queue locks) use the trio clock
  (`now_ms`), so tests can drive them with a mock clock; message times
  (born, store) stay wall-clock ms.
- When a consumer group's membership or subscriptions change, every
  remaining channel of that group gets NOTIFY_CONSUMER_IDS_CHANGED (40),
  oneway, over its own connection (if ``notifyConsumerIdsChangedEnable``).
  The request carries ``consumerGroup`` and no body.
- A closed connection leaves every group at once; a channel silent for
  120 s is expired by `expire_clients` (scanned every 10 s) and closed.
"""

from __future__ import annotations

import logging
import socket
from typing import Iterable

import trio

from core.broker import Broker
from core.processors.clients import CHANNEL_EXPIRED_MS, ClientTable
from core.processors.locks import LOCK_LEASE_MS, LockTable
from core.remoting import RemotingCommand, RequestCode
from core.remoting.server import Channel

log = logging.getLogger("mqgate.processors")


def now_ms() -> int:
    return int(trio.current_time() * 1000)


def born_host(channel: Channel) -> bytes:
    """The peer as a stored host: IPv4 when possible (C++ and ali-ons read only IPv4)."""
    host, port = channel.remote_addr
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    try:
        return socket.inet_pton(socket.AF_INET, host) + port.to_bytes(4, "big")
    except OSError:
        return socket.inet_pton(socket.AF_INET6, host) + port.to_bytes(4, "big")


class BrokerContext:
    def __init__(
        self,
        broker: Broker,
        *,
        client_expired_ms: int = CHANNEL_EXPIRED_MS,
        lock_lease_ms: int = LOCK_LEASE_MS,
    ) -> None:
        self.broker = broker
        self.clients = ClientTable()
        self.locks = LockTable(lock_lease_ms)
        self.client_expired_ms = client_expired_ms
        self.notifications_sent = 0

    @property
    def broker_name(self) -> str:
        return self.broker.config.broker_name

    def notify_consumer_ids_changed(self, groups: Iterable[str]) -> None:
        if not self.broker.config.notify_consumer_ids_changed_enable:
            return
        for group in dict.fromkeys(groups):
            for ch in self.clients.consumer_channels(group):
                if isinstance(ch, Channel) and not ch.closed:
                    ch.send_oneway(
                        RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})
                    )
                    self.notifications_sent += 1

    def channel_closed(self, channel: Channel) -> None:
        changed = self.clients.channel_closed(channel)
        if changed:
            log.info("%s closed; consumer groups %s changed", channel, changed)
        self.notify_consumer_ids_changed(changed)

    def expire_clients(self) -> None:
        for ch in self.clients.expired_channels(now_ms(), self.client_expired_ms):
            log.info("%s sent no heartbeat for %d ms; removing it", ch, self.client_expired_ms)
            changed = self.clients.channel_closed(ch)
            self.notify_consumer_ids_changed(changed)
            if isinstance(ch, Channel):
                ch.close()

    async def expire_clients_loop(self, interval: float = 10.0) -> None:
        while True:
            await trio.sleep(interval)
            self.expire_clients()
