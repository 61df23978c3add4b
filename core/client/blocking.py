"""Blocking facade for plain scripts: the trio client on an event loop in a background thread.

Rules kept here:

- Each started `Producer`, `PushConsumer` or `PullConsumer` owns one
  daemon thread running ``trio.run``; every method call is handed to it
  with ``trio.from_thread`` and blocks the caller until the answer (so the
  trio client's timeouts bound every call). `shutdown` stops the loop
  and joins the thread; the objects are also context managers.
- Plain (non-async) listeners and send callbacks run in trio worker
  threads, never on the loop, so a slow listener does not stall pulls,
  heartbeats or other queues.
- Calling these methods from inside a trio task is an error: use the
  trio-native API there.
"""

from __future__ import annotations

import concurrent.futures
import functools
import inspect
import threading
from typing import Any, Callable, Self

import trio

from core.client.message_selector import MessageSelector
from core.client.model import Message, MessageExt, MessageQueue, SendResult
from core.client.producer import AsyncProducer
from core.client.pull_consumer import AsyncPullConsumer
from core.client.push_consumer import AsyncPushConsumer

__all__ = ["Producer", "PullConsumer", "PushConsumer"]


class _LoopThread:
    def __init__(self, name: str) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self.nursery: trio.Nursery | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # surfaced to the starter, or lost at exit
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def run(self, afn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return trio.from_thread.run(functools.partial(afn, *args, **kwargs), trio_token=self._token)

    def run_sync(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return trio.from_thread.run_sync(functools.partial(fn, *args, **kwargs), trio_token=self._token)

    def stop(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join()


def _in_thread(fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """A plain function becomes an async one that runs it in a worker thread."""
    if fn is None or inspect.iscoroutinefunction(fn):
        return fn

    async def call(*args: Any) -> Any:
        return await trio.to_thread.run_sync(fn, *args)

    return call


class _Facade:
    """What the blocking facades share: a loop thread running one trio client
    (held in the attribute ``_CLIENT`` names), stopped by `shutdown` or ``with``."""

    _CLIENT = "_c"
    _loop: "_LoopThread | None"

    def shutdown(self) -> None:
        loop = self._loop
        if loop is not None:
            client = getattr(self, self._CLIENT)
            if client is not None:
                loop.run(client.shutdown)
            loop.stop()
            self._loop = None
            setattr(self, self._CLIENT, None)

    def __enter__(self) -> Self:
        return self.start()  # type: ignore[attr-defined]  # each facade defines start()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


class Producer(_Facade):
    """``p = Producer("127.0.0.1:9876", "PG").start(); p.send(Message("T", b"x")); p.shutdown()``."""

    _CLIENT = "_p"

    def __init__(self, namesrv: str | list[str], group: str = "DEFAULT_PRODUCER", **options: Any) -> None:
        self.namesrv, self.group, self.options = namesrv, group, options
        self._loop: _LoopThread | None = None
        self._p: AsyncProducer | None = None

    def start(self) -> "Producer":
        self._loop = _LoopThread(f"mqgate-producer-{self.group}")

        async def start() -> AsyncProducer:
            p = AsyncProducer(self._loop.nursery, self.namesrv, self.group, **self.options)
            await p.start()
            return p

        self._p = self._loop.run(start)
        return self

    def _need(self) -> tuple[_LoopThread, AsyncProducer]:
        if self._loop is None or self._p is None:
            raise RuntimeError("call start() first")
        return self._loop, self._p

    def send(self, msg: Message, **kwargs: Any) -> SendResult:
        """Sync send; keywords as `AsyncProducer.send` (queue, selector, arg, timeout)."""
        loop, p = self._need()
        return loop.run(p.send, msg, **kwargs)

    def send_orderly(self, msg: Message, sharding_key: str | int, **kwargs: Any) -> SendResult:
        loop, p = self._need()
        return loop.run(p.send_orderly, msg, sharding_key, **kwargs)

    def send_batch(self, msgs: list[Message], **kwargs: Any) -> SendResult:
        loop, p = self._need()
        return loop.run(p.send_batch, msgs, **kwargs)

    def send_oneway(self, msg: Message, **kwargs: Any) -> None:
        loop, p = self._need()
        loop.run(p.send_oneway, msg, **kwargs)

    def send_async(self, msg: Message, callback: Callable[[SendResult | None, BaseException | None], Any] | None = None,
                   **kwargs: Any) -> "concurrent.futures.Future[SendResult]":
        """Start a send; the future (and ``callback(result, error)``, in a worker thread) gets the outcome."""
        loop, p = self._need()
        fut: concurrent.futures.Future[SendResult] = concurrent.futures.Future()
        user_cb = _in_thread(callback)

        async def done(result: SendResult | None, error: BaseException | None) -> None:
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(result)  # type: ignore[arg-type]
            if user_cb is not None:
                await user_cb(result, error)

        loop.run_sync(p.send_async, msg, done, **kwargs)
        return fut



class PushConsumer(_Facade):
    """``PushConsumer(ns, "G").subscribe("T", "*", listener).start()``; listeners get ``(msgs, ctx)``."""

    def __init__(self, namesrv: str | list[str], group: str, **options: Any) -> None:
        self.namesrv, self.group, self.options = namesrv, group, options
        self._subs: list[tuple[str, str, Any]] = []
        self._listener: Any = None
        self._loop: _LoopThread | None = None
        self._c: AsyncPushConsumer | None = None

    def subscribe(self, topic: str, expression: str | MessageSelector = "*", listener: Callable[[list[MessageExt], Any], Any] | None = None) -> "PushConsumer":
        if self._c is not None:
            self._loop.run_sync(self._c.subscribe, topic, expression, _in_thread(listener))
        else:
            self._subs.append((topic, expression, listener))
        return self

    def register_listener(self, listener: Callable[[list[MessageExt], Any], Any]) -> "PushConsumer":
        self._listener = listener
        if self._c is not None:
            self._loop.run_sync(self._c.register_listener, _in_thread(listener))
        return self

    def start(self) -> "PushConsumer":
        self._loop = _LoopThread(f"mqgate-consumer-{self.group}")

        async def start() -> AsyncPushConsumer:
            c = AsyncPushConsumer(self._loop.nursery, self.namesrv, self.group, listener=_in_thread(self._listener),
                                  **self.options)
            for topic, expr, listener in self._subs:
                c.subscribe(topic, expr, _in_thread(listener))
            await c.start()
            return c

        try:
            self._c = self._loop.run(start)
        except BaseException:
            self._loop.stop()
            self._loop = None
            raise
        return self

    @property
    def consumer(self) -> AsyncPushConsumer | None:
        """The trio consumer underneath (read its state only from the loop thread)."""
        return self._c



class PullConsumer(_Facade):
    """``c = PullConsumer(ns, "G").subscribe("T").start(); msgs = c.poll(1.0)`` (or ``assign``)."""

    def __init__(self, namesrv: str | list[str], group: str, **options: Any) -> None:
        self.namesrv, self.group, self.options = namesrv, group, options
        self._subs: list[tuple[str, str]] = []
        self._loop: _LoopThread | None = None
        self._c: AsyncPullConsumer | None = None

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> "PullConsumer":
        if self._c is not None:
            self._loop.run_sync(self._c.subscribe, topic, expression)
        else:
            self._subs.append((topic, expression))
        return self

    def start(self) -> "PullConsumer":
        self._loop = _LoopThread(f"mqgate-pull-{self.group}")

        async def start() -> AsyncPullConsumer:
            c = AsyncPullConsumer(self._loop.nursery, self.namesrv, self.group, **self.options)
            for topic, expr in self._subs:
                c.subscribe(topic, expr)
            await c.start()
            return c

        self._c = self._loop.run(start)
        return self

    def _need(self) -> tuple[_LoopThread, AsyncPullConsumer]:
        if self._loop is None or self._c is None:
            raise RuntimeError("call start() first")
        return self._loop, self._c

    def fetch_queues(self, topic: str, wait: float | None = None) -> list[MessageQueue]:
        loop, c = self._need()
        return loop.run(c.fetch_queues, topic, wait)

    def assign(self, queues: list[MessageQueue]) -> None:
        loop, c = self._need()
        loop.run(c.assign, queues)

    def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        loop, c = self._need()
        return loop.run(c.poll, timeout)

    def seek(self, mq: MessageQueue, offset: int) -> None:
        loop, c = self._need()
        loop.run(c.seek, mq, offset)

    def commit(self) -> None:
        loop, c = self._need()
        loop.run(c.commit)

