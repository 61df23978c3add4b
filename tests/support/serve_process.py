"""Start `mqgate serve` (or another role) as a real subprocess for tests."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def _port_block() -> range:
    """The ports this test process hands out: a block below the kernel's
    ephemeral range, one block per xdist worker, even ports only.

    Below the ephemeral range, no ``bind(0)`` and no outgoing connection (a
    server's own client to its name server, say) can take a port between the
    moment it is handed out and the moment its server binds it; one block per
    worker keeps two workers apart; even ports leave ``port + 1`` (a broker's
    HA port) to the port handed out."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    base, workers = 10000, 8
    size = (low - base) // workers
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % workers
    start = base + worker * size
    return range(start + start % 2, start + size, 2)


# One rotation per test process: imported under a second name (say
# ``tests.support.serve_process`` beside ``serve_process``), this module
# would be a second copy with its own rotation through the same block, and
# the two copies hand out the same port (CI: etcd's port given to a name
# server started beside it).
if __name__ not in ("serve_process", "__main__"):
    raise ImportError(f"import serve_process by that name (tests/support is on sys.path), not as {__name__}: "
                      "a second copy would hand out ports the first one did")
_BLOCK = _port_block()
_next = random.randrange(len(_BLOCK))


def free_port() -> int:
    """A port no server listens on, never the same twice in a row of the block
    (two calls used to be able to give the same port: the first was free again
    once its probe was closed)."""
    global _next
    for _ in range(len(_BLOCK)):
        port = _BLOCK[_next % len(_BLOCK)]
        _next += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_BLOCK.start}-{_BLOCK.stop}")


def free_ports(n: int) -> list[int]:
    """``n`` free ports, all different."""
    return [free_port() for _ in range(n)]


class ServeProcess:
    """``mqgate <role>`` with its ports; `ports` is parsed from the "ready" line."""

    def __init__(self, data_dir: Path, *args: str, role: str = "serve", env: dict | None = None,
                 cwd: Path | None = None, data_dir_flag: bool = True):
        """``data_dir_flag=False``: no ``--data-dir`` (the config file's ``dataDir``
        or the default is used; ``data_dir`` then only places the log)."""
        self.data_dir = Path(data_dir)
        if role in ("serve", "gateway") and "--http-port" not in args:
            args = (*args, "--http-port", "0")  # tests never take the default HTTP port (18083) by accident
        if role in ("serve", "broker") and "--grpc-port" not in args:
            args = (*args, "--grpc-port", "0")  # nor the default gRPC port (8081)
        self.args = [sys.executable, "-m", "gateway", role, *(("--data-dir", str(data_dir)) if data_dir_flag else ()),
                     *args]
        self.cwd = cwd
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-{role}.log"
        # a crash in compiled code leaves the Python stacks of every thread in the log
        self.env = {**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.ports: dict[str, int] = {}

    def start(self, timeout: float = 30.0) -> "ServeProcess":
        self.log = open(self.log_path, "ab")
        self._start_at = self.log.tell()  # the log is appended to across restarts
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.output()[self._start_at:]
            m = re.findall(r"ready: (.*)", text)
            if m:
                self.ports = {k: int(v) for k, v in (kv.split("=") for kv in m[-1].split())}
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"mqgate exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"mqgate did not get ready in {timeout} s:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self.log.close()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if hasattr(self, "log"):
            self.log.close()

    def __enter__(self) -> "ServeProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill()
