"""`core.ha.etcd.EtcdClient` against a real etcd: keys, prefixes, transactions
(exactly one of two concurrent campaigns wins), leases (keys vanish on revoke
and on expiry; keepalive extends), an unreachable etcd is `EtcdUnavailable`
within the timeout, and a dead endpoint first in the list falls over."""

from __future__ import annotations

import time

import pytest
import trio

from core.ha.etcd import Compare, EtcdClient, EtcdUnavailable, LeaseNotFound, Op
from serve_process import free_port


async def test_keys_prefixes_and_deletes(etcd):
    async with EtcdClient(etcd.endpoint) as c:
        assert await c.get("/t/a") is None
        rev = await c.put("/t/a", b"1")
        await c.put("/t/b", "2")
        await c.put("/u", "3")
        kv = await c.get("/t/a")
        assert kv.value == b"1" and kv.create_revision == rev and kv.version == 1
        assert [k.key for k in await c.get_prefix("/t/")] == ["/t/a", "/t/b"]
        assert await c.delete("/t/a") == 1
        assert await c.delete_prefix("/t/") == 1
        assert [k.key for k in await c.get_prefix("/")] == ["/u"]


async def test_exactly_one_of_two_campaigns_wins(etcd):
    async with EtcdClient(etcd.endpoint) as c:
        wins = []

        async def campaign(name: str) -> None:
            r = await c.txn([Compare.create_revision("/leader", "=", 0)], [Op.put("/leader", name)], [Op.get("/leader")])
            wins.append((name, r.succeeded))

        async with trio.open_nursery() as n:
            n.start_soon(campaign, "a")
            n.start_soon(campaign, "b")
        assert sorted(w for _, w in wins) == [False, True]
        winner = next(name for name, w in wins if w)
        assert (await c.get("/leader")).value == winner.encode()
        r = await c.txn([Compare.value("/leader", "=", winner)], [Op.delete("/leader")])
        assert r.succeeded and await c.get("/leader") is None
        assert (await c.txn([Compare.version("/nothing", ">", 0)], [Op.put("/x", "y")])).succeeded is False


async def test_leases_keep_keys_alive_only_while_renewed(etcd):
    async with EtcdClient(etcd.endpoint) as c:
        lease = await c.lease_grant(2)
        await c.put("/l/k", "v", lease=lease)
        assert (await c.get("/l/k")).lease == lease
        for _ in range(4):  # 3 s of renewals outlive a 2 s TTL
            await trio.sleep(0.75)
            assert await c.lease_keepalive(lease) >= 1
        assert await c.get("/l/k") is not None
        await c.lease_revoke(lease)
        assert await c.get("/l/k") is None
        with pytest.raises(LeaseNotFound):
            await c.lease_keepalive(lease)
        lease = await c.lease_grant(2)
        await c.put("/l/k2", "v", lease=lease)
        with trio.fail_after(10):
            while await c.get("/l/k2") is not None:  # expires without keepalive
                await trio.sleep(0.2)


async def test_a_paused_etcd_is_unavailable_within_the_timeout_and_then_back(etcd):
    async with EtcdClient(etcd.endpoint, timeout=0.5) as c:
        await c.put("/p", "1")
        etcd.pause()
        try:
            start = time.monotonic()
            with pytest.raises(EtcdUnavailable, match="no etcd endpoint answered"):
                await c.get("/p")
            assert time.monotonic() - start < 1.5
        finally:
            etcd.resume()
        assert (await c.get("/p")).value == b"1"


async def test_a_dead_endpoint_first_falls_over_to_the_live_one(etcd):
    async with EtcdClient([f"http://127.0.0.1:{free_port()}", etcd.endpoint], timeout=1.0) as c:
        await c.put("/f", "ok")
        assert (await c.get("/f")).value == b"ok"
