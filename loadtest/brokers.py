"""Starts the brokers we compare on free loopback ports, and always stops them.

Known brokers: ``mosquitto`` (Debian package, /usr/sbin/mosquitto), ``amqtt``
(the PyPI broker, its ``amqtt`` script next to this Python), ``rabbitmq``
(Debian ``rabbitmq-server`` with its ``rabbitmq_mqtt`` plugin: its own node
name, config, data directory, Erlang port mapper and distribution port, all
in the temp dir and on free ports; no AMQP listener) and ``ours``
(``python -m gateway serve``, started as a separate process: loadtest never
imports project code).

Rules it keeps:

- Brokers listen on 127.0.0.1 only, on a port that was free a moment before.
- ``Broker`` is a context manager; leaving it (normally, by error or Ctrl-C)
  terminates the process, kills it after 5 s, and deletes its temp dir. Each
  broker runs in its own session (Ctrl-C reaches only us) and dies with us
  (PR_SET_PDEATHSIG) even if we are killed with SIGKILL.
- ``start`` returns only once the port accepts connections, or raises
  ``BrokerStartError`` with the command and the tail of its output.
- Brokers that have the setting get the same window of unacknowledged QoS 1/2
  messages towards a subscriber (``OUTBOUND_INFLIGHT``: Mosquitto's
  ``max_inflight_messages``, our ``maxInflightMessages``), so a QoS 1
  scenario compares the brokers, not their windows.
"""

from __future__ import annotations

import ctypes
import getpass
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KNOWN = ("ours", "mosquitto", "amqtt", "rabbitmq")
MOSQUITTO = "/usr/sbin/mosquitto"
RABBITMQ = "/usr/lib/rabbitmq/bin/rabbitmq-server"  # the sbin wrapper would switch user


class BrokerStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# QoS 1/2 messages a broker may have unacknowledged towards one subscriber.
# A small window makes a fan-in subscriber's rate a matter of round trips
# (Mosquitto's default is 20, ours 32); both get this one.
OUTBOUND_INFLIGHT = 1000

FD_LIMIT = 1 << 20  # what a broker may open: a 100,000-connection storm needs more than the usual 1024-20000


def _die_with_parent() -> None:
    """In the broker's child process: die with the load tool, and open as many
    files as the machine lets a process (the hard limit, raised as far as
    ``fs.nr_open`` when the tool runs with the privilege to)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
    except (ValueError, OSError):
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def mosquitto_binary() -> str | None:
    return shutil.which("mosquitto") or (MOSQUITTO if os.path.exists(MOSQUITTO) else None)


def amqtt_binary() -> str | None:
    here = Path(sys.executable).parent / "amqtt"
    return str(here) if here.exists() else shutil.which("amqtt")


def rabbitmq_binary() -> str | None:
    return RABBITMQ if os.path.exists(RABBITMQ) else None


def available(name: str) -> bool:
    return {"mosquitto": mosquitto_binary, "amqtt": amqtt_binary, "rabbitmq": rabbitmq_binary}.get(
        name, lambda: True)() is not None


def _mosquitto(port: int, tmp: Path, _opts: dict) -> list[str]:
    binary = mosquitto_binary()
    if binary is None:
        raise BrokerStartError("mosquitto is not installed (apt-get install mosquitto)")
    conf = tmp / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\n"
        "allow_anonymous true\n"
        "persistence false\n"
        # stay the user we are: a change of user would clear PR_SET_PDEATHSIG
        f"user {getpass.getuser()}\n"
        # generous queues, as our gateway has, so that neither drops first
        "max_queued_messages 1000000\n"
        f"max_inflight_messages {OUTBOUND_INFLIGHT}\n"
        "max_keepalive 65535\n"
        "set_tcp_nodelay true\n"
        "log_dest stderr\n"
        "log_type error\n"
        "log_type warning\n")
    return [binary, "-c", str(conf)]


def _amqtt(port: int, tmp: Path, _opts: dict) -> list[str]:
    binary = amqtt_binary()
    if binary is None:
        raise BrokerStartError("amqtt is not installed (pip install amqtt)")
    conf = tmp / "amqtt.yaml"
    conf.write_text(
        "listeners:\n"
        "  default:\n"
        "    type: tcp\n"
        f"    bind: 127.0.0.1:{port}\n"
        "plugins:\n"
        "  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
        "    allow_anonymous: true\n")
    return [binary, "-c", str(conf)]


def _rabbitmq(port: int, tmp: Path, opts: dict) -> list[str]:
    binary = rabbitmq_binary()
    if binary is None:
        raise BrokerStartError("rabbitmq-server is not installed (apt-get install rabbitmq-server)")
    (tmp / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
    (tmp / "rabbitmq.conf").write_text(
        "listeners.tcp = none\n"
        f"mqtt.listeners.tcp.1 = 127.0.0.1:{port}\n"
        "mqtt.allow_anonymous = true\n"
        "loopback_users = none\n"
        "log.console = true\n"
        "log.console.level = warning\n"
        "log.file = false\n")
    epmd, dist = free_port(), free_port()
    opts["env"] = {
        "HOME": str(tmp),  # the Erlang cookie is written there
        "RABBITMQ_NODENAME": f"mqgate-bench-{port}@localhost",
        "RABBITMQ_CONFIG_FILE": str(tmp / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(tmp / "enabled_plugins"),
        "RABBITMQ_MNESIA_BASE": str(tmp / "mnesia"),
        "RABBITMQ_LOG_BASE": str(tmp / "log"),
        "RABBITMQ_PID_FILE": str(tmp / "rabbitmq.pid"),
        "RABBITMQ_DIST_PORT": str(dist),
        "ERL_EPMD_PORT": str(epmd),
        "ERL_CRASH_DUMP": str(tmp / "erl_crash.dump"),  # a failed start dumps there, not in the caller's folder
    }
    return [binary]


def _ours(port: int, tmp: Path, opts: dict) -> list[str]:
    conf = tmp / "mqgate.toml"
    conf.write_text(f"[mqtt]\nmaxInflightMessages = {OUTBOUND_INFLIGHT}\n")
    cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(conf), "--data-dir", str(tmp / "data"),
           "--mqtt-port", str(port), "--ws-port", "0", "--namesrv-port", "0",
           "--broker-port", "0",
           # free ports, not the defaults (8081, 18083): runs of several benchmarks at once must not collide
           "--grpc-port", str(free_port()), "--http-port", str(free_port())]
    if opts.get("flush_sync"):
        cmd += ["--flush", "sync"]
    return cmd


_COMMANDS = {"mosquitto": _mosquitto, "amqtt": _amqtt, "rabbitmq": _rabbitmq, "ours": _ours}


class Broker:
    """One broker process on 127.0.0.1:port; use as a context manager."""

    def __init__(self, name: str, *, flush_sync: bool = False, startup_timeout: float = 20.0,
                 cwd: str | None = None, wrap: list[str] | None = None,
                 stop_timeout: float = 5.0) -> None:
        if name not in _COMMANDS:
            raise ValueError(f"unknown broker {name!r}; one of {', '.join(KNOWN)}")
        self.name = name
        self.host = "127.0.0.1"
        self.port = 0
        self.opts = {"flush_sync": flush_sync}
        self.startup_timeout = startup_timeout
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.tmp: Path | None = None
        self.cmd: list[str] = []
        self.wrap = wrap or []  # a command the broker runs under (valgrind, for instruction counts)
        self.stop_timeout = stop_timeout

    @property
    def pid(self) -> int | None:
        """The process to measure: RabbitMQ's Erlang VM, which its start script waits on."""
        if self.proc is None:
            return None
        if self.name == "rabbitmq" and self.tmp is not None:
            try:
                return int((self.tmp / "rabbitmq.pid").read_text().strip())
            except (OSError, ValueError):
                pass
        return self.proc.pid

    def start(self) -> "Broker":
        self.tmp = Path(tempfile.mkdtemp(prefix=f"loadtest-{self.name}-"))
        self.port = free_port()
        self.cmd = self.wrap + _COMMANDS[self.name](self.port, self.tmp, self.opts)
        self._log = open(self.tmp / "broker.log", "wb")
        try:
            env = {**os.environ, **self.opts.get("env", {})}
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=subprocess.STDOUT, cwd=self.cwd, env=env,
                                         start_new_session=True, preexec_fn=_die_with_parent)
        except OSError as exc:
            self.stop()
            raise BrokerStartError(f"{self.name}: cannot run {self.cmd[0]}: {exc}") from None
        # an Erlang VM with RabbitMQ's boot steps takes 5-10 s on an idle 2-core machine
        deadline = time.monotonic() + (max(self.startup_timeout, 90) if self.name == "rabbitmq" else self.startup_timeout)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        why = ("exited with code %s" % self.proc.returncode if self.proc.poll() is not None
               else f"did not listen on {self.host}:{self.port} within "
                    f"{self.startup_timeout:g}s")
        tail = self.output_tail()
        self.stop()
        raise BrokerStartError(f"{self.name} {why}\n  command: {' '.join(self.cmd)}\n"
                               f"  output (tail):\n{tail}")

    def output_tail(self, lines: int = 15) -> str:
        try:
            text = (self.tmp / "broker.log").read_text(errors="replace")
        except (OSError, TypeError):
            return ""
        return "\n".join("    " + line for line in text.splitlines()[-lines:])

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        epmd = self.opts.get("env", {}).get("ERL_EPMD_PORT")
        if epmd and shutil.which("epmd"):  # Erlang's port mapper leaves our process group: ours, so stop it
            subprocess.run(["epmd", "-port", epmd, "-kill"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=10, check=False)
        if getattr(self, "_log", None):
            self._log.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def __enter__(self) -> "Broker":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
