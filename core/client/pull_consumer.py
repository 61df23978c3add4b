"""The trio pull consumer (Java ``DefaultLitePullConsumer``): subscribe or assign, then `poll`.

Rules kept here:

- ``subscribe(topic, expr)`` lets the group share the queues (average
  rebalance, like the push consumer); ``assign(queues)`` takes exactly the
  given queues and never rebalances. The two are not mixed.
- One background long-polling pull loop per owned queue fills a buffer;
  a queue stops pulling while ``pull_threshold_for_queue`` of its messages
  wait in the buffer. `poll` answers the messages of one pull (waiting up
  to ``timeout`` for one), oldest first.
- Progress: what `poll` returned counts as consumed. With ``auto_commit``
  the offsets are committed every ``persist_interval`` (5 s) and at
  shutdown; `commit` sends them now. `seek` restarts a queue at an offset
  and discards what was buffered for it.
- `fetch_queues` of a topic the name servers do not know yet waits for it
  (bounded, `ClientInstance.wait_route`): created a moment ago, its broker
  is still registering it.
"""

from __future__ import annotations

import logging
import math
from contextlib import AbstractAsyncContextManager
from typing import Any

import trio

from core.client.message_selector import MessageSelector
from core.client.api import MQClientError
from core.client.consumer_base import ConsumerBase, Subscription
from core.client.model import MessageExt, MessageQueue
from core.client.process_queue import ProcessQueue
from core.client.instance import run_client

__all__ = ["AsyncPullConsumer", "open_pull_consumer"]

log = logging.getLogger("mqgate.client.pull")


class AsyncPullConsumer(ConsumerBase):
    consume_type = "CONSUME_ACTIVELY"
    subscribe_retry = False

    def __init__(self, nursery: trio.Nursery, namesrv: str | list[str], group: str, *,
                 auto_commit: bool = True, pull_threshold_for_queue: int = 1000, **options: Any) -> None:
        super().__init__(nursery, namesrv, group, **options)
        self.auto_commit = auto_commit
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self._assigned: set[MessageQueue] | None = None
        self._assign_subs: dict[str, Subscription] = {}
        self._send, self._recv = trio.open_memory_channel[tuple[MessageQueue, ProcessQueue, list[MessageExt]]](math.inf)

    # ---- what to consume ----

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> "AsyncPullConsumer":
        if self._assigned is not None:
            raise MQClientError("this consumer was given queues with assign(); it cannot subscribe too")
        self._subscribe(topic, expression)
        return self

    async def assign(self, queues: list[MessageQueue]) -> None:
        """Consume exactly these queues (no group rebalance)."""
        if self.subscriptions and self._assigned is None:
            raise MQClientError("this consumer subscribed to topics; it cannot take assigned queues too")
        self._assigned = set(queues)
        for mq in queues:
            self._assign_subs.setdefault(mq.topic, Subscription(mq.topic, "*"))
        if self._n is not None:
            await self.rebalance()

    async def fetch_queues(self, topic: str, wait: float | None = None) -> list[MessageQueue]:
        """The topic's readable queues, from the name server. A topic without a
        route yet (created a moment ago) is waited for up to ``wait`` seconds
        (default: the client's call timeout, 3 s) before `MQClientError`."""
        wait = self.instance.api.timeout if wait is None else wait
        route = await self.instance.wait_route(topic, wait)
        if route is None:
            raise MQClientError(f"no route info for topic {topic} (waited {wait:g} s for the name servers to know it)")
        return route.subscribe_queues()

    async def rebalance(self) -> None:
        if self._assigned is None:
            return await super().rebalance()
        if self.stopping:
            return
        async with self._rebalance_lock:
            for topic in sorted(self._assign_subs):
                try:
                    await self.instance.route(topic)
                except MQClientError as exc:
                    log.info("route of %s: %s", topic, exc)
                await self._update_queues(topic, {mq for mq in self._assigned if mq.topic == topic})
            self.rebalanced.set()
            self.rebalanced = trio.Event()

    def _sub_for(self, topic: str) -> Subscription | None:
        return self.subscriptions.get(topic) or self._assign_subs.get(topic)

    # ---- pulling ----

    async def _queue_task(self, mq: MessageQueue, pq: ProcessQueue, offset: int, scope: trio.CancelScope) -> None:
        sub = self._sub_for(mq.topic)
        if sub is None:
            return
        with scope:
            await self._pull_loop(mq, pq, offset, sub)

    def _deliver(self, mq: MessageQueue, pq: ProcessQueue, added: list[MessageExt]) -> None:
        self._send.send_nowait((mq, pq, added))

    async def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """The messages of one pull, or [] after ``timeout`` seconds without any."""
        with trio.move_on_after(timeout):
            while True:
                mq, pq, msgs = await self._recv.receive()
                if pq.dropped or self.pqs.get(mq) is not pq:
                    continue  # the queue was re-assigned or sought since
                offset = pq.remove(msgs)
                self.offsets.update(mq, offset)
                return msgs
        return []

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Consume ``mq`` from ``offset`` on (buffered messages of it are discarded)."""
        if mq not in self.pqs:
            raise MQClientError(f"{mq} is not consumed by this consumer")
        await self._restart_queue(mq, offset)

    async def commit(self) -> None:
        """Commit what `poll` returned so far."""
        await self.offsets.persist_all()

    def committed(self, mq: MessageQueue) -> int | None:
        return self.offsets.read(mq)

    async def _persist_loop(self) -> None:
        if self.auto_commit:
            await super()._persist_loop()

    async def shutdown(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        with trio.CancelScope(shield=True):
            for scope in list(self._scopes.values()):
                scope.cancel()
            if self.auto_commit:
                with trio.move_on_after(self.instance.api.timeout * 2):
                    await self.offsets.persist_all()
            self._stopped.set()
            await self.instance.shutdown(consumer_group=self.group)


def open_pull_consumer(namesrv: str | list[str], group: str, subscriptions: dict[str, str] | None = None,
                       **options: Any) -> AbstractAsyncContextManager[AsyncPullConsumer]:
    """``async with open_pull_consumer(ns, "G", {"T": "*"}) as c: msgs = await c.poll()``."""
    def make(nursery: trio.Nursery) -> AsyncPullConsumer:
        consumer = AsyncPullConsumer(nursery, namesrv, group, **options)
        for topic, expr in (subscriptions or {}).items():
            consumer.subscribe(topic, expr)
        return consumer

    return run_client(make)
