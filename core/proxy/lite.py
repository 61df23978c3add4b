"""Lite-topic subscriptions of RocketMQ 5 lite consumers (SyncLiteSubscription).

A lite consumer binds one parent topic and subscribes, one by one, to lite
topics under it; each lite topic is a light queue (`wire.lite_queue`) that
the send path multi-dispatches to, so subscribing creates nothing on disk.

Rules kept here:
- Subscriptions are kept per client and per (group, parent topic); a group
  receives from the union of its clients' lite topics (like a consumer
  group's subscription), so any of its consumers may pop any of them.
- PARTIAL_ADD / PARTIAL_REMOVE add or remove the listed names;
  COMPLETE_ADD replaces the client's set with the list (the clients resend
  it every 30 s); COMPLETE_REMOVE clears it.
- A name that cannot be a lite topic is refused (ILLEGAL_LITE_TOPIC) and
  nothing of the request is applied; a client past `QUOTA` subscriptions
  of one parent topic is refused (LITE_SUBSCRIPTION_QUOTA_EXCEEDED), as is
  the request that would take it there.
- A client's subscriptions end with NotifyClientTermination (`forget`).
"""

from __future__ import annotations

from . import pb, wire
from .wire import WireError

QUOTA = 1000  # lite topics one client may subscribe to under one parent topic (told in the settings)


class LiteSubscriptions:
    def __init__(self) -> None:
        # (group, parent topic) -> client id -> lite topics
        self._subs: dict[tuple[str, str], dict[str, set[str]]] = {}

    def sync(self, client_id: str, group: str, topic: str, action: int, names) -> None:
        """Apply one SyncLiteSubscription; a `WireError` for a bad name or the quota."""
        names = list(names)
        for name in names:
            wire.check_lite_topic(name)
        clients = self._subs.setdefault((group, topic), {})
        mine = clients.get(client_id, set())
        if action == pb.PARTIAL_ADD:
            new = mine | set(names)
        elif action == pb.PARTIAL_REMOVE:
            new = mine - set(names)
        elif action == pb.COMPLETE_ADD:
            new = set(names)
        elif action == pb.COMPLETE_REMOVE:
            new = set()
        else:
            raise WireError(pb.BAD_REQUEST, f"unknown lite subscription action {action}")
        if len(new) > QUOTA:
            raise WireError(pb.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                            f"{len(new)} lite topics under {topic} for client {client_id}: the quota is {QUOTA}")
        if new:
            clients[client_id] = new
        else:
            clients.pop(client_id, None)
            if not clients:
                del self._subs[(group, topic)]

    def has(self, client_id: str, group: str, topic: str) -> bool:
        return client_id in self._subs.get((group, topic), {})

    def queues(self, group: str, topic: str) -> list[str]:
        """The light queues ``group`` pops for ``topic``, in a stable order."""
        names = set().union(*self._subs.get((group, topic), {}).values())
        return [wire.lite_queue(topic, n) for n in sorted(names)]

    def forget(self, client_id: str) -> None:
        for key in list(self._subs):
            clients = self._subs[key]
            clients.pop(client_id, None)
            if not clients:
                del self._subs[key]
