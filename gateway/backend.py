"""What the MQTT gateway calls of a broker: one narrow interface, two implementations.

``BrokerBackend`` names every broker operation the gateway uses (issue 20).
``LocalBackend`` is the in-process one over ``core.broker.Broker`` (``mqgate
serve``); ``gateway.remote_backend.RemoteBackend`` speaks the RocketMQ
remoting protocol to the brokers the name servers route to (``mqgate
gateway``).

Rules kept here:

* Sends go through ``send_many`` (one flush wait per batch); put hooks run
  on each message before it is stored (the router adds
  ``INNER_MULTI_DISPATCH`` there), stored hooks after, in send order; a
  stored hook added with ``topics`` hears only the messages of those topics
  (``core.broker.TopicHooks`` keeps the rules for both backends).
* ``max_offset``, ``min_offset``, ``query_offset`` and ``commit_offset``
  are synchronous: in process they are the broker's own tables; remotely
  they answer from a cache that ``prepare_queue`` fills (once per session
  queue, before the session uses it) and that reads and long polls keep
  current, and commits are sent in the background. A cached max offset is
  never above the broker's: it only lets a reader stop early, never skip.
* ``watch_queue`` asks for dispatch listener calls about one light queue
  (a connected session's): in process every queue is watched already.
* A reader of a light queue reads each of its ``queue_ids``: in process
  one (0); remotely one per broker group (the light queue of that name on
  that group), each with its own offsets. Offsets are per queue id.
* A topic for a publish (``topic_for_publish``) is created when absent if
  the broker allows auto-creation, as a native producer's send does.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Iterable, Protocol

import trio

from core.broker import Broker, PERM_READ, PERM_WRITE, PullResult, SendResult
from core.store import Message


_ONE = range(1)


class BrokerBackend(Protocol):
    """The broker operations of the MQTT gateway (see the module docstring)."""

    timers_supported: Callable[[], bool]
    # a stored send may wait before it is answered (for the disk, a slave, the network)
    sends_wait: bool

    async def send_many(self, items: Iterable[tuple[Message, int | None]], *,
                        checkpoint: bool = True) -> list[SendResult]: ...

    async def send(self, msg: Message, queue_id: int | None = None) -> SendResult: ...

    def add_put_hook(self, hook: Callable[[Message], None]) -> None: ...

    def add_stored_hook(self, hook: Callable[[Message, Any], None], *,
                        topics: Collection[str] | Callable[[str], bool] | None = None) -> None: ...

    def add_dispatch_listener(self, cb: Callable[[str, int, int], None]) -> None: ...

    async def read_queue(self, topic: str, queue_id: int, offset: int, max_count: int = 32) -> PullResult: ...

    async def read_at(self, physical_offset: int) -> bytes | None: ...

    def max_offset(self, topic: str, queue_id: int) -> int: ...

    def min_offset(self, topic: str, queue_id: int) -> int: ...

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None: ...

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...

    async def prepare_queue(self, topic: str) -> None: ...

    def queue_ids(self, topic: str) -> range: ...

    def watch_queue(self, topic: str, watch: bool) -> None: ...

    def get_topic(self, name: str): ...

    async def ensure_topic(self, name: str, queue_nums: int = 1, perm: int = PERM_READ | PERM_WRITE): ...

    async def topic_for_publish(self, name: str): ...

    def writable(self) -> bool: ...

    async def delete_queue(self, topic: str, queue_id: int) -> None: ...


class LocalBackend:
    """The broker of this process. The hot calls are the broker's own bound
    methods (no extra call layer on the publish and delivery paths)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.sends_wait = broker.sends_wait
        self.send_many = broker.send_many
        self.send = broker.send
        self.add_put_hook = broker.add_put_hook
        self.add_stored_hook = broker.add_stored_hook
        self.add_dispatch_listener = broker.add_dispatch_listener
        self.read_queue = broker.read_queue
        self.read_at = broker.read_at
        self.max_offset = broker.max_offset
        self.min_offset = broker.min_offset
        self.query_offset = broker.query_offset
        self.commit_offset = broker.commit_offset
        self.get_topic = broker.get_topic
        self.ensure_topic = broker.ensure_topic
        self.writable = broker.writable

    def timers_supported(self) -> bool:
        """Whether a timer service is attached to the broker (``broker.timers``,
        set by ``gateway.serve``); without one TIMER_DELAY_SEC would be ignored
        and the message delivered at once."""
        timers = getattr(self.broker, "timers", None)
        return timers is not None and getattr(getattr(timers, "config", None), "enabled", True)

    async def prepare_queue(self, topic: str) -> None:
        await trio.lowlevel.checkpoint()

    def queue_ids(self, topic: str) -> range:
        return _ONE

    def watch_queue(self, topic: str, watch: bool) -> None:
        pass

    async def topic_for_publish(self, name: str):
        broker = self.broker
        cfg = broker.get_topic(name)
        if cfg is None and broker.config.auto_create_topic_enable:
            cfg = await broker.ensure_topic(name, broker.config.default_topic_queue_nums)
        return cfg

    async def delete_queue(self, topic: str, queue_id: int) -> None:
        await trio.to_thread.run_sync(self.broker.store.delete_queue, topic, queue_id)


def backend_for(broker) -> BrokerBackend:
    """A ``Broker`` wrapped as a ``LocalBackend``; a backend as it is."""
    return LocalBackend(broker) if isinstance(broker, Broker) else broker
