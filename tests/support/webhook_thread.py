"""A real webhook receiver in a thread (http.server on 127.0.0.1:0), for tests that drive a
``mqgate serve`` subprocess from plain (non-trio) test code.

``status`` is what it answers (200 by default; set 503 to make it fail);
every request is recorded as (status answered, lower-cased headers, body).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ThreadWebhook:
    def __init__(self) -> None:
        self.status = 200
        self.requests: list[tuple[int, dict, bytes]] = []
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                status = hook.status
                with hook._lock:
                    hook.requests.append((status, {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "ThreadWebhook":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def delivered(self) -> list[tuple[dict, bytes]]:
        with self._lock:
            return [(h, b) for s, h, b in self.requests if 200 <= s < 300]

    def wait(self, predicate, timeout: float = 20.0, what: str = "webhook requests"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                value = predicate(list(self.requests))
            if value:
                return value
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}; got {self.requests}")
