"""A real webhook receiver for the event-rule tests: Starlette under Hypercorn's trio worker on 127.0.0.1:0.

``fail_first`` requests are answered 503, then 200 (``always_fail``: 503
forever; ``hold``: no answer until that event is set); every request is recorded (headers lower-cased, body bytes), the
failed ones too, in ``attempts``; the answered-200 ones in ``received``.
"""

from __future__ import annotations

import socket

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


class WebhookReceiver:
    def __init__(self, *, fail_first: int = 0, always_fail: bool = False, hold: trio.Event | None = None) -> None:
        self.fail_first = fail_first
        self.hold = hold  # set: answer; until then every request waits (a slow target)
        self.always_fail = always_fail
        self.attempts: list[tuple[dict, bytes]] = []
        self.received: list[tuple[dict, bytes]] = []
        self.port = 0
        self._changed = trio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _hook(self, request: Request) -> Response:
        item = ({k.lower(): v for k, v in request.headers.items()}, await request.body())
        self.attempts.append(item)
        self._changed.set()
        self._changed = trio.Event()
        if self.hold is not None:
            await self.hold.wait()
        if self.always_fail or len(self.attempts) <= self.fail_first:
            return Response("try later", status_code=503)
        self.received.append(item)
        return Response("ok")

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = Config()
        config.bind = [f"fd://{sock.detach()}"]
        config.accesslog = None
        config.graceful_timeout = 0.5
        app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])
        await serve(app, config, task_status=task_status)

    async def wait_for(self, what: str, n: int, timeout: float = 15.0) -> list:
        """Until ``received`` (or ``attempts``) holds ``n`` requests; fails after ``timeout``."""
        with trio.fail_after(timeout):
            while len(getattr(self, what)) < n:
                await self._changed.wait()
        return getattr(self, what)
