"""Start `mqgate serve` (or another role) as a real subprocess for tests."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """``n`` free ports, all different (``free_port`` called twice may give
    the same one: the first is free again once its probe is closed)."""
    probes = [socket.socket() for _ in range(n)]
    try:
        for s in probes:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in probes]
    finally:
        for s in probes:
            s.close()


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
