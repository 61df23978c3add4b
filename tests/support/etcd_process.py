"""A real etcd (Debian's ``etcd-server``, installed by ``make test``) on free
loopback ports, data in a temporary directory, for the failover tests."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from serve_process import free_port


class EtcdProcess:
    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 20.0) -> "EtcdProcess":
        binary = shutil.which("etcd")
        if binary is None:
            raise RuntimeError("etcd is not installed: run `make test`, which installs Debian's etcd-server")
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.log = open(self.data_dir.parent / f"{self.data_dir.name}-etcd.log", "ab")
        self.proc = subprocess.Popen(
            [binary, "--name", "t", "--data-dir", str(self.data_dir), "--listen-client-urls", self.endpoint,
             "--advertise-client-urls", self.endpoint, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", f"t={peer}", "--log-level", "warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/health", timeout=1) as r:
                    if b'"true"' in r.read():
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}")
            time.sleep(0.1)
        self.kill()
        raise TimeoutError(f"etcd did not answer in {timeout} s")

    def pause(self, timeout: float = 5.0) -> None:
        """SIGSTOP, and return only once every thread of etcd is stopped: the
        signal is asynchronous, and a thread still running could answer a
        request sent right after (seen once in CI under load)."""
        self.proc.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.proc.pid}/task")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = []
            for stat in tasks.glob("*/stat"):
                try:
                    states.append(stat.read_text().rpartition(")")[2].split()[0])
                except OSError:  # a thread that ended meanwhile
                    pass
            if states and all(s in ("T", "t") for s in states):
                return
            time.sleep(0.01)
        raise TimeoutError(f"etcd (pid {self.proc.pid}) did not stop within {timeout} s of SIGSTOP")

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        if hasattr(self, "log"):
            self.log.close()
