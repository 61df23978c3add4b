"""Automatic failover through etcd, with real processes: etcd, a name server
and three brokers of one group (SYNC_MASTER + two slaves), each with a 3 s
lease.

- SIGKILL of the master: a slave is elected and serving within a bound
  (printed, and under 10 s), every acknowledged message is on the new
  master, the old master rejoins as a slave and all three logs end equal.
- A master cut off from etcd alone (its etcd traffic goes through a proxy the
  test cuts) stops acknowledging before the new master is elected, and every
  message it acknowledged is on the winning branch.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

import trio

from core.client import Message, SendStatus, open_producer
from core.client.api import open_client_api
from core.remoting import RequestCode
from core.store.message import encode_properties
from ha_group import Group, commitlog_bytes, ha_status, stored_messages, wait_in_sync, wait_until

LEASE = {"haLeaseTtlMs": 3000}


def start_three(group: Group, etcd_for=lambda label: None) -> None:
    for label, bid in (("n0", 0), ("n1", 1), ("n2", 2)):
        group.broker(label, bid, "SYNC_MASTER" if bid == 0 else "SLAVE",
                     etcdEndpoints=etcd_for(label), **LEASE).start()


async def master_of(group: Group, labels) -> str | None:
    for label in labels:
        st = await ha_status(group.addr(label))
        if st and st["role"].endswith("MASTER"):
            return label
    return None


async def send_keys(group: Group, keys: list[str]) -> dict[str, SendStatus]:
    async with open_producer(group.namesrv, "PG_FO", send_timeout=4.0, retry_times=0) as p:
        return {k: (await p.send(Message("TopicFO", k.encode(), keys=[k]))).status for k in keys}


def keys_in(data_dir) -> set[str]:
    return {m.body.decode() for m in stored_messages(data_dir) if m.topic == "TopicFO"}


async def test_sigkill_of_the_master_elects_a_slave_and_the_old_master_rejoins(etcd_group, etcd):
    group = etcd_group
    start_three(group, lambda _label: etcd.endpoint)
    labels = ["n0", "n1", "n2"]
    first = await wait_until(lambda: master_of(group, labels), 30, "a master is elected")
    await wait_until(lambda: _slaves_in_sync(group, first, 2), 30, "both slaves follow")
    acked = [k for k, s in (await send_keys(group, [f"a{i}" for i in range(200)])).items() if s is SendStatus.SEND_OK]
    assert len(acked) == 200
    killed_at = time.monotonic()
    group.brokers[first].proc.kill()
    group.brokers[first].proc.wait()
    rest = [x for x in labels if x != first]
    second = await wait_until(lambda: master_of(group, rest), 20, "a slave is elected")
    elapsed = time.monotonic() - killed_at
    print(f"failover: {first} killed, {second} master after {elapsed:.2f} s")
    assert elapsed < 10
    st = await ha_status(group.addr(second))
    assert st["epoch"] >= 2
    await wait_until(lambda: _slaves_in_sync(group, second, 1), 20, "the other slave follows the new master")
    statuses = await send_keys(group, [f"b{i}" for i in range(50)])
    acked += [k for k, s in statuses.items() if s is SendStatus.SEND_OK]
    assert len(acked) == 250
    group.brokers[first].start()  # the old master comes back: a slave now
    await wait_until(lambda: _slaves_in_sync(group, second, 2), 30, "the old master rejoins")
    await wait_in_sync(*(group.addr(x) for x in labels))
    for label in labels:
        group.brokers[label].stop()
    logs = {label: commitlog_bytes(group.brokers[label].data_dir) for label in labels}
    assert logs["n0"] == logs["n1"] == logs["n2"]
    assert set(acked) <= keys_in(group.brokers[second].data_dir)


async def _slaves_in_sync(group: Group, master: str, n: int) -> bool:
    st = await ha_status(group.addr(master))
    return bool(st and st["role"].endswith("MASTER") and sum(1 for s in st["slaves"] if s["inSync"]) >= n)


class CutProxy:
    """A TCP proxy to etcd for one broker; `cut()` makes it swallow traffic (a partition)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.open = True
        self.port = 0

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        try:
            server = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        except OSError:
            return
        async with client, server, trio.open_nursery() as n:
            n.start_soon(self._pump, client, server, n.cancel_scope)
            n.start_soon(self._pump, server, client, n.cancel_scope)

    async def _pump(self, src, dst, scope) -> None:
        try:
            while True:
                data = await src.receive_some(65536)
                if not data:
                    break
                while not self.open:
                    await trio.sleep(3600)  # the partition: bytes go nowhere
                await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


def log_time(text: str, pattern: str) -> float:
    """Wall-clock time of the first log line matching ``pattern``."""
    m = re.search(r"^(\S+ \S+) .*" + pattern, text, re.M)
    assert m, f"no log line matches {pattern!r}"
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


async def test_a_master_cut_off_from_etcd_stops_acknowledging_before_another_is_elected(etcd_group, etcd):
    group = etcd_group
    port = int(etcd.endpoint.rsplit(":", 1)[1])
    async with trio.open_nursery() as nursery:
        proxy = CutProxy(port)
        await nursery.start(proxy.serve)
        # from a worker thread: starting blocks, and the proxy runs in this loop
        await trio.to_thread.run_sync(start_three, group,
                                      lambda label: f"http://127.0.0.1:{proxy.port}" if label == "n0" else etcd.endpoint)
        labels = ["n0", "n1", "n2"]
        await wait_until(lambda: _role(group, "n0", "SYNC_MASTER"), 30, "n0 leads")
        await wait_until(lambda: _slaves_in_sync(group, "n0", 2), 30, "both slaves follow")
        acked: list[tuple[str, float]] = []  # (key, wall time the ack arrived) from n0
        stop = trio.Event()

        async def hammer():  # sends straight to n0 until it refuses for good
            async with open_client_api(3.0) as api:
                i = 0
                while not stop.is_set():
                    key = f"c{i}"
                    i += 1
                    status = await _send_direct(api, group.addr("n0"), key)
                    if status == 0:
                        acked.append((key, time.time()))
                    else:
                        await trio.sleep(0.01)

        nursery.start_soon(hammer)
        await wait_until(lambda: _at_least(acked, 100), 30, "n0 acknowledges sends")
        proxy.open = False  # n0 alone loses etcd; it still reaches its slaves and its clients
        cut_at = time.time()
        new = await wait_until(lambda: master_of(group, ["n1", "n2"]), 30, "a slave is elected")
        stop.set()
        elected_at = log_time(group.brokers[new].output(), "elected master of g1")
        fenced_at = log_time(group.brokers["n0"].output(), "fenced: ")
        last_ack = max(t for _k, t in acked)
        print(f"cut at {cut_at:.3f}; n0 fenced after {fenced_at - cut_at:.2f} s, last ack after {last_ack - cut_at:.2f} s; "
              f"{new} elected after {elected_at - cut_at:.2f} s")
        assert last_ack < elected_at and fenced_at < elected_at
        proxy.open = True
        await wait_until(lambda: _slaves_in_sync(group, new, 2), 30, "n0 rejoins as a slave of the new master")
        await wait_in_sync(*(group.addr(x) for x in labels))
        for label in labels:
            await trio.to_thread.run_sync(group.brokers[label].stop)
        on_winner = keys_in(group.brokers[new].data_dir)
        assert {k for k, _t in acked} <= on_winner  # nothing acknowledged lives only on a losing branch
        nursery.cancel_scope.cancel()


async def _role(group: Group, label: str, role: str) -> bool:
    st = await ha_status(group.addr(label))
    return bool(st and st["role"] == role)


async def _at_least(items: list, n: int) -> bool:
    return len(items) >= n


async def _send_direct(api, addr: str, key: str) -> int:
    """One SEND_MESSAGE_V2 straight to ``addr`` (not through routes); the response code (0 = SEND_OK)."""
    header = {"a": "PG_FO", "b": "TopicFO", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": int(time.time() * 1000),
              "h": 0, "j": 0, "k": False, "i": encode_properties({"KEYS": key, "WAIT": "true"})}
    try:
        resp = await api.call(addr, RequestCode.SEND_MESSAGE_V2, header, key.encode(), 4.0)
    except Exception:  # the broker restarting as a slave: no answer is no acknowledgement
        return -1
    return resp.code
