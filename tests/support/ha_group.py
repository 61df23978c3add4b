"""Replication groups of real processes for tests: a name server and brokers
(`mqgate namesrv` / `mqgate broker` or `serve`), each with its own TOML file,
data directory and free loopback ports; helpers that read GET_BROKER_HA_STATUS
and wait, bounded, for replication to settle."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import trio

from core.client.api import open_client_api
from core.remoting import RequestCode, ResponseCode
from core.store.message import decode_segment
from serve_process import ServeProcess, free_port

SEGMENT = 1024 * 1024


class Group:
    def __init__(self, root: Path, name: str = "g1"):
        self.root = Path(root)
        self.name = name
        self.ns_port = free_port()
        self.ns = ServeProcess(self.root / "ns", "--namesrv-port", str(self.ns_port), role="namesrv")
        self.brokers: dict[str, ServeProcess] = {}
        self.ports: dict[str, int] = {}

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    def start_namesrv(self) -> None:
        self.ns.start()

    def broker(self, label: str, broker_id: int, role: str, *, serve: bool = False, mqtt_port: int = 0,
               grpc_port: int = 0, mqtt: dict | None = None, **keys) -> ServeProcess:
        """A broker process (not started); ``keys`` go to its [broker] table,
        ``mqtt`` to its [mqtt] table; ``grpc_port`` 0: no RocketMQ 5 gRPC endpoint."""
        port = free_port()
        while free_port_pair(port) is False:
            port = free_port()
        table = {"brokerName": self.name, "brokerId": broker_id, "brokerRole": role,
                 "mappedFileSizeCommitLog": SEGMENT, **keys}
        toml = self.root / f"{label}.toml"
        text = "[broker]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items())
        if mqtt:
            text += "[mqtt]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in mqtt.items())
        toml.write_text(text)
        args = ["--config", str(toml), "--broker-port", str(port), "--namesrv", self.namesrv,
                "--grpc-port", str(grpc_port)]
        if serve:
            args += ["--namesrv-port", "0", "--mqtt-port", str(mqtt_port), "--ws-port", "0"]
        proc = ServeProcess(self.root / label, *args, role="serve" if serve else "broker")
        self.brokers[label] = proc
        self.ports[label] = port
        return proc

    def addr(self, label: str) -> str:
        return f"127.0.0.1:{self.ports[label]}"

    def ha_addr(self, label: str) -> str:
        return f"127.0.0.1:{self.ports[label] + 1}"

    def stop_all(self) -> None:
        for proc in self.brokers.values():
            if proc.proc is not None and proc.proc.poll() is None:
                try:
                    os.kill(proc.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            proc.kill()
        self.ns.kill()


def free_port_pair(port: int) -> bool:
    """Whether ``port + 1`` (the HA port) is free too."""
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port + 1))
        except OSError:
            return False
    return True


async def ha_status(addr: str) -> dict | None:
    try:
        async with open_client_api(3.0) as api:
            resp = await api.call(addr, RequestCode.GET_BROKER_HA_STATUS)
    except Exception:
        return None
    return json.loads(resp.body) if resp.code == ResponseCode.SUCCESS else None


async def is_master_with_slave(group: Group, label: str) -> bool:
    """``label`` is a SYNC_MASTER with a slave in sync."""
    st = await ha_status(group.addr(label))
    return bool(st and st["role"] == "SYNC_MASTER" and any(s["inSync"] for s in st["slaves"]))


async def is_master(group: Group, label: str) -> bool:
    st = await ha_status(group.addr(label))
    return bool(st and st["role"].endswith("MASTER"))


async def wait_until(predicate, timeout: float, what: str, step: float = 0.1):
    """Await ``predicate()`` (async) until truthy; fail the test after ``timeout`` s."""
    with trio.move_on_after(timeout):
        while True:
            got = await predicate()
            if got:
                return got
            await trio.sleep(step)
    raise AssertionError(f"not within {timeout} s: {what}")


async def wait_in_sync(*addrs: str, timeout: float = 20.0) -> int:
    """Wait until every broker's log ends at the same offset; return it."""
    async def same():
        sts = [await ha_status(a) for a in addrs]
        ends = {st["maxOffset"] for st in sts if st}
        return (ends.pop(),) if len(ends) == 1 and all(sts) and next(iter(ends), -1) >= 0 else None

    return (await wait_until(same, timeout, f"{addrs} hold the same log"))[0]


def commitlog_bytes(data_dir: Path) -> bytes:
    d = Path(data_dir) / "commitlog"
    return b"".join((d / n).read_bytes() for n in sorted(os.listdir(d)))


def stored_messages(data_dir: Path) -> list:
    """Every entry of a stopped broker's commit log, segment by segment."""
    d = Path(data_dir) / "commitlog"
    return [m for n in sorted(os.listdir(d)) for m in decode_segment((d / n).read_bytes())]
