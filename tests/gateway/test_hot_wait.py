"""Hot connections wait for input in trio's own epoll (gateway/readiness.py,
``Readiness.wait_hot``; issue 13).

A plain-TCP connection whose input came less than ``HOT_GAP_S`` after the
input before waits in trio's epoll, not through the gateway's watcher: its
next PUBLISH is read in the loop pass that finds it, not one pass later. An
idle connection stays with the watcher (no frame of trio's), and at most
``hot_limit`` connections wait hot at once.

The ordering rule holds as for readers the watcher wakes: a SUBSCRIBE found
in the same I/O wait as another client's PUBLISH, or one I/O wait before it,
is in force when that PUBLISH is routed, whichever of the two waits hot.
Without each part of the rule (a hot reader woken with another task lines
up one pass later; one woken while a reader woken earlier has not acted yet
lines up too; a reader the watcher found alone in its poll is not alone
while a hot one woken with it is lined up) the PUBLISH overtook the
SUBSCRIBE in about half of the rounds of one of the tests below.
"""

from __future__ import annotations

import os

import trio
from trio.testing import wait_all_tasks_blocked

from gateway.mqtt import PingReq, PingResp
from gateway.readiness import HOT_GAP_S

from .conftest import Client, subscribe_with_a_publish


async def _busy(client: Client, n: int = 4) -> None:
    """Inputs about 1 ms apart: the connection's next wait is hot (when the
    machine gives the server its turn within HOT_GAP_S)."""
    for i in range(n):
        await client.publish("hot/busy", b"%d" % i)
        await trio.sleep(0.001)


async def _make_hot(gw, clients: list[Client], hot: int) -> None:
    """Busy ``clients`` until ``hot`` connections wait hot: a loaded machine
    may stall the server past HOT_GAP_S between two inputs now and then
    (its next wait is then the watcher's), never every time."""
    for _ in range(50):
        for c in clients:
            await _busy(c, 2)
        await wait_all_tasks_blocked()
        assert gw.readiness.hot <= hot
        if gw.readiness.hot == hot:
            return
    raise AssertionError(f"{gw.readiness.hot} connections wait hot, not {hot}")


async def test_a_busy_connection_waits_hot_and_an_idle_one_does_not(gateway_factory):
    async with gateway_factory() as (broker, gw, port):
        readiness = gw.readiness
        idle, _ = await Client.connect(port, "idle", version=4)
        busy, _ = await Client.connect(port, "busy", version=4)
        await wait_all_tasks_blocked()
        assert readiness.hot == 0  # a CONNECT alone: both wait through the watcher
        await _make_hot(gw, [busy], 1)  # and the idle one is never among them
        await trio.sleep(HOT_GAP_S * 2)  # the busy one goes quiet; its next input comes late
        await busy.publish("hot/busy", b"late")
        await wait_all_tasks_blocked()
        assert readiness.hot == 0
        assert readiness.lined_up == 0
        for c in (idle, busy):
            await c.close()


async def test_no_more_than_the_limit_wait_hot(gateway_factory):
    async with gateway_factory() as (broker, gw, port):
        gw.readiness.hot_limit = 1
        a, _ = await Client.connect(port, "a", version=4)
        b, _ = await Client.connect(port, "b", version=4)
        await _make_hot(gw, [a, b], 1)  # never 2
        # both still served
        await a.publish("hot/limit", b"a")
        await b.publish("hot/limit", b"b")
        for c in (a, b):
            await c.close()


async def _race(gw, a: Client, b: Client, prepare, between=None) -> None:
    """40 rounds of ``b``'s SUBSCRIBE against ``a``'s PUBLISH
    (`subscribe_with_a_publish`), each after ``prepare()``: the SUBSCRIBE is
    in force every time, and no woken reader is left counted afterwards."""
    fd = b.stream.socket.fileno()
    overtaken = []
    for i in range(1, 41):
        await prepare()
        if not await subscribe_with_a_publish(b, lambda data: os.write(fd, data), a, i, between):
            overtaken.append(i)
    assert overtaken == [], f"the PUBLISH overtook the SUBSCRIBE in rounds {overtaken}"
    await wait_all_tasks_blocked()
    assert gw.readiness.lined_up == 0
    for c in (a, b):
        await c.close()


async def _go_cold(client: Client) -> None:
    """Input after a gap: the connection's next wait is the watcher's."""
    await trio.sleep(HOT_GAP_S * 1.5)
    await client.send(PingReq())
    await client.expect(PingResp)


async def test_a_subscribe_in_the_same_io_wait_as_a_hot_publish_is_in_force(gateway_factory):
    """Subscriber and publisher both hot; both writes before the loop's next
    I/O wait: the publisher is woken with another task, and lines up."""
    async with gateway_factory() as (broker, gw, port):
        a, _ = await Client.connect(port, "hot-pub")
        b, _ = await Client.connect(port, "hot-sub")
        await _race(gw, a, b, lambda: _make_hot(gw, [a, b], 2))


async def test_a_subscribe_woken_one_io_wait_before_a_hot_publish_is_in_force(gateway_factory):
    """The subscriber idle (the watcher wakes it, for the pass after its
    own), the publisher hot and alone in the next I/O wait: it must not act
    before the subscriber, which was woken first."""
    async with gateway_factory() as (broker, gw, port):
        a, _ = await Client.connect(port, "hot-pub")
        b, _ = await Client.connect(port, "cold-sub")

        async def prepare():
            await _go_cold(b)
            await _make_hot(gw, [a], 1)  # the subscriber waits through the watcher

        # a pass between the writes: the watcher finds the subscriber
        await _race(gw, a, b, prepare, between=trio.lowlevel.cancel_shielded_checkpoint)


async def test_a_hot_subscribe_in_the_same_io_wait_as_a_cold_publish_is_in_force(gateway_factory):
    """The subscriber hot, the publisher waiting through the watcher, both
    writes before the loop's next I/O wait: the watcher finds the publisher
    alone in its poll, but the subscriber, woken by trio with the watcher,
    is lined up for the same pass."""
    async with gateway_factory() as (broker, gw, port):
        a, _ = await Client.connect(port, "cold-pub")
        b, _ = await Client.connect(port, "hot-sub")

        async def prepare():
            await _go_cold(a)
            await _make_hot(gw, [b], 1)

        await _race(gw, a, b, prepare)
