"""Keepalive over real TCP: a plain connection reads through the gateway's
epoll (gateway/readiness.py), notes each read's end (``read_at``) and the
gateway's keepalive task (gateway/keepalive.py) closes it 1.5 x keepalive
after the last one (at most ``keepalive.GRAIN`` later). Real seconds, kept short (keepalive 1 s): the memory
transport's tests in test_session_timers.py run the same rules on trio's
autojump clock."""

from __future__ import annotations

import trio

from gateway.mqtt import Disconnect, PingResp, Publish, ReasonCode


async def test_a_silent_plain_connection_is_closed_after_one_and_a_half_keepalives(gateway_factory, client_cls):
    async with gateway_factory({"sysInterval": 0}) as (broker, gw, port):
        c, _ = await client_cls.connect(port, "ka", keep_alive=1)
        sub, _ = await client_cls.connect(port, "sub", keep_alive=0)
        await sub.subscribe("ka/t")
        start = trio.current_time()
        while trio.current_time() - start < 2.5:  # past 1.5 s, kept alive by its packets
            await c.publish("ka/t", b"x")
            await sub.expect(Publish)
            await trio.sleep(0.3)
        last = trio.current_time()  # before the PINGREQ: the server's read of it comes later
        await c.ping()
        await c.expect(PingResp)
        d = await c.recv(timeout=5)
        waited = trio.current_time() - last
        assert isinstance(d, Disconnect) and d.reason_code == ReasonCode.KEEP_ALIVE_TIMEOUT
        assert 1.45 <= waited < 4.0, waited  # 1.5 s, the task's 0.5 s grid and slack for a loaded machine
        assert await c.recv(timeout=5) is None
        assert gw.keepalive.watching == 0 and gw.stats.connected == 1  # sub (keepalive 0) stays


async def test_a_311_client_is_closed_without_a_disconnect(gateway_factory, client_cls):
    async with gateway_factory({"sysInterval": 0}) as (broker, gw, port):
        start = trio.current_time()  # before the CONNECT: the server's read of it comes later
        c, _ = await client_cls.connect(port, "ka4", version=4, keep_alive=1)
        assert await c.recv(timeout=5) is None
        assert 1.45 <= trio.current_time() - start < 4.0
