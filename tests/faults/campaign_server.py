"""One `mqgate serve` under attack: fixed ports across restarts, its config, its samples.

Rules it keeps:

- The ports are chosen once (free on 127.0.0.1) and kept across restarts, so
  clients that reconnect by themselves find the server again.
- `restart` measures the recovery time: from the new process's spawn to its
  "ready" line (recovery of the store and the gateway's records included).
- `sample` reads RSS, open files and threads from /proc of the live process.
- `tracebacks` counts the unhandled tracebacks the server logged since start.
- `drift` compares the last quarter of a series with the second (soak, fuzz).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from serve_process import ServeProcess, free_ports  # noqa: E402

CONFIG = """\
[broker]
flushDiskType = "{flush}"
transactionTimeOut = 1000
transactionCheckInterval = 2000
# transactionCheckMax: the default (15); checks that find no producer are not
# counted, so a transaction left open by a kill waits for its 5.x producer's
# telemetry stream (up to ~600 s after a restart, docs/TRANSACTIONS_AND_TIMERS.md)
{broker_extra}
[mqtt]
maxQueuedMessages = 1000000
{mqtt_extra}
"""


def wait_for(pred, timeout: float, interval: float = 0.05) -> bool:
    """Poll ``pred`` until true or ``timeout``; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


def drift(values: list[float]) -> float | None:
    """(mean of the last quarter of ``values``) / (mean of the second quarter) - 1:
    the first quarter is warm-up; near 0 when a figure has levelled off."""
    n = len(values)
    if n < 8:
        return None
    q2 = values[n // 4: n // 2]
    q4 = values[3 * n // 4:]
    base = sum(q2) / len(q2)
    return round((sum(q4) / len(q4)) / base - 1, 4) if base else None


class CampaignServer:
    def __init__(self, work: Path, *, flush: str = "SYNC_FLUSH", mqtt_extra: str = "", broker_extra: str = "",
                 http: bool = False, ha: bool = False):
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.config = self.work / "mqgate.toml"
        mqtt, ws, namesrv, broker, grpc, http_port, ha_port = free_ports(7)
        self.ports = {"mqtt": mqtt, "ws": ws, "namesrv": namesrv, "broker": broker, "grpc": grpc,
                      "http": http_port if http else 0, "ha": ha_port if ha else 0}
        if ha:  # the master's HA port, where slaves connect (fixed, so the fuzzer knows it)
            broker_extra += f"\nhaListenPort = {self.ports['ha']}"
        self.config.write_text(CONFIG.format(flush=flush, mqtt_extra=mqtt_extra, broker_extra=broker_extra))
        self.proc: ServeProcess | None = None
        self.starts = 0

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ports['namesrv']}"

    @property
    def data_dir(self) -> Path:
        return self.work / "data"

    def start(self) -> float:
        """Start; the seconds from spawn to ready."""
        p = self.ports
        self.proc = ServeProcess(self.data_dir, "--config", str(self.config), "--mqtt-port", str(p["mqtt"]),
                                 "--ws-port", str(p["ws"]), "--namesrv-port", str(p["namesrv"]),
                                 "--broker-port", str(p["broker"]), "--grpc-port", str(p["grpc"]),
                                 "--http-port", str(p["http"]))
        t0 = time.monotonic()
        self.proc.start(timeout=120)
        self.starts += 1
        return time.monotonic() - t0

    @property
    def pid(self) -> int:
        assert self.proc and self.proc.proc
        return self.proc.proc.pid

    def alive(self) -> bool:
        return bool(self.proc and self.proc.proc and self.proc.proc.poll() is None)

    def kill(self) -> None:
        """SIGKILL, and wait for the process to be gone."""
        if self.proc:
            self.proc.kill()

    def stop(self) -> int | None:
        if self.alive():
            return self.proc.stop(signal.SIGTERM, timeout=60)
        self.kill()
        return None

    def sample(self) -> dict:
        """RSS (KiB; anon = the heap, file = mapped files such as commit-log
        segments, which the kernel may drop), open files and threads of the live server."""
        pid = self.pid
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return {"rss_kib": int(fields["VmRSS"].split()[0]), "rss_anon_kib": int(fields["RssAnon"].split()[0]),
                "rss_file_kib": int(fields["RssFile"].split()[0]), "fds": len(os.listdir(f"/proc/{pid}/fd")),
                "threads": int(fields["Threads"])}

    def disk_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.data_dir.rglob("*") if f.is_file())

    def log(self) -> str:
        return self.proc.output() if self.proc else ""

    def tracebacks(self) -> list[str]:
        """One line per traceback in the whole log (every run of the process):
        the log line before it and the exception it ends with."""
        lines = self.log().splitlines()
        out = []
        for i, line in enumerate(lines):
            if not line.startswith("Traceback"):
                continue
            end = next((j for j in range(i + 1, len(lines)) if lines[j] and not lines[j].startswith((" ", "\t"))), None)
            exc = lines[end] if end is not None else "?"
            if exc.startswith(("During handling", "The above exception")):
                continue  # a chained traceback: the last one of the chain is counted
            out.append((lines[i - 1][:200] if i else "") + " | " + exc[:300])
        return out
