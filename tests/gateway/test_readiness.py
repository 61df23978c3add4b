"""gateway.readiness: idle connections wait for input in one epoll of the gateway.

Real socket pairs; the watcher runs in the test's nursery. Shown, with the
waiter's own park message and with trio's public call: a waiter
wakes when its socket has input (and only then) and learns whether its
socket was the only one of that poll, a cancelled wait leaves no
entry and a later event for it is dropped, a descriptor number used again by a
new socket is registered again, and stopping the watcher wakes whoever still
waits (their read then goes through trio). An idle connection of a real
gateway waits there, with no frame of trio's below its own.
"""

from __future__ import annotations

import socket

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from gateway.mqtt import Publish
from gateway import readiness as readiness_module
from gateway.readiness import Readiness


@pytest.fixture(params=["own message", "trio's wait_task_rescheduled"])
def park(request, monkeypatch):
    """Waiters park with their own message to trio's run loop, or through
    trio's public call (what a trio release with another message gets)."""
    if request.param != "own message":
        monkeypatch.setattr(readiness_module, "_PARK", None)
    assert request.param != "own message" or readiness_module._PARK is not None


async def _wait(readiness: Readiness, fd: int, woken: list) -> None:
    waiter = readiness.arm(fd)
    assert waiter is not None
    await waiter
    woken.append(fd)


async def test_a_waiter_wakes_when_its_socket_has_input_and_not_before(park):
    readiness = Readiness()
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    woken: list = []
    async with trio.open_nursery() as nursery:
        await nursery.start(readiness.run)
        nursery.start_soon(_wait, readiness, a.fileno(), woken)
        nursery.start_soon(_wait, readiness, c.fileno(), woken)
        await wait_all_tasks_blocked()
        assert woken == []
        b.send(b"x")
        with trio.fail_after(5):
            while not woken:
                await trio.sleep(0.01)
        await wait_all_tasks_blocked()
        assert woken == [a.fileno()]  # c's waiter sleeps on
        d.send(b"y")
        with trio.fail_after(5):
            while len(woken) < 2:
                await trio.sleep(0.01)
        assert woken == [a.fileno(), c.fileno()]
        assert readiness._waiting == {}
        nursery.cancel_scope.cancel()
    for s in (a, b, c, d):
        s.close()


async def test_a_cancelled_wait_leaves_nothing_and_its_late_event_is_dropped(park):
    readiness = Readiness()
    a, b = socket.socketpair()
    async with trio.open_nursery() as nursery:
        await nursery.start(readiness.run)
        with trio.move_on_after(0.05) as scope:
            await _wait(readiness, a.fileno(), [])
        assert scope.cancelled_caught
        assert readiness._waiting == {}
        b.send(b"late")  # still armed: the watcher finds nobody waiting
        await trio.sleep(0.05)
        woken: list = []
        nursery.start_soon(_wait, readiness, a.fileno(), woken)  # armed again: the unread input wakes it
        with trio.fail_after(5):
            while not woken:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    a.close()
    b.close()


async def test_a_descriptor_number_used_again_is_registered_again():
    readiness = Readiness()
    async with trio.open_nursery() as nursery:
        await nursery.start(readiness.run)
        a, b = socket.socketpair()
        with trio.move_on_after(0.02):
            await _wait(readiness, a.fileno(), [])
        fd = a.fileno()
        a.close()  # leaves the epoll with its last reference
        b.close()
        c, d = socket.socketpair()
        assert fd in (c.fileno(), d.fileno())  # the lowest free numbers come back
        again = c if c.fileno() == fd else d
        other = d if again is c else c
        woken: list = []
        nursery.start_soon(_wait, readiness, again.fileno(), woken)
        await wait_all_tasks_blocked()
        other.send(b"z")
        with trio.fail_after(5):
            while not woken:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    c.close()
    d.close()


async def test_stopping_the_watcher_wakes_the_waiters_and_later_arms_say_none(park):
    readiness = Readiness()
    a, b = socket.socketpair()
    woken: list = []
    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as watcher:
            await watcher.start(readiness.run)
            outer.start_soon(_wait, readiness, a.fileno(), woken)
            await wait_all_tasks_blocked()
            watcher.cancel_scope.cancel()
        with trio.fail_after(5):
            while not woken:
                await trio.sleep(0.01)
    assert readiness.arm(a.fileno()) is None
    a.close()
    b.close()


async def test_a_wake_says_whether_its_socket_was_alone_in_its_poll(park):
    """What a waiter's ``await`` answers: True for the only socket of its
    poll, False for each of two sockets found ready in the same poll (the
    gateway's reader then keeps its ordering checkpoint before routing a
    PUBLISH, gateway/publishing.py), None when the watcher stops."""
    readiness = Readiness()
    (a, b), (c, d), (e, f), (g, h) = pairs = [socket.socketpair() for _ in range(4)]
    answers: dict = {}

    async def wait(fd: int) -> None:
        waiter = readiness.arm(fd)
        assert waiter is not None
        answers[fd] = await waiter

    async def until(*fds: int) -> None:
        with trio.fail_after(5):
            while not all(fd in answers for fd in fds):
                await trio.sleep(0.01)

    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as watcher:
            await watcher.start(readiness.run)
            for s in (a, c, e, g):
                outer.start_soon(wait, s.fileno())
            await wait_all_tasks_blocked()
            b.send(b"x")
            await until(a.fileno())
            assert answers == {a.fileno(): True}
            d.send(b"y")  # no checkpoint between the two sends: one poll finds both
            f.send(b"z")
            await until(c.fileno(), e.fileno())
            assert answers[c.fileno()] is False and answers[e.fileno()] is False
            watcher.cancel_scope.cancel()
        await until(g.fileno())
    assert answers[g.fileno()] is None
    for pair in pairs:
        for s in pair:
            s.close()


async def test_an_idle_gateway_connection_waits_in_the_gateways_epoll(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        client, _ = await client_cls.connect(port, "idle", version=4)
        await wait_all_tasks_blocked()
        assert len(gw.readiness._waiting) == 1
        waiter = next(iter(gw.readiness._waiting.values()))
        frames, coro = [], waiter.task.coro
        while hasattr(coro, "cr_code"):
            frames.append(coro.cr_code.co_name)
            coro = coro.cr_await
        assert frames == ["run"]  # the task is Connection.run itself, with no frame of trio's below it
        assert coro is waiter
        sub, _ = await client_cls.connect(port, "sub", version=4)
        await sub.subscribe("t", qos=0)
        await client.publish("t", b"seen")  # the idle one wakes and acts
        with trio.fail_after(5):
            assert (await sub.expect(Publish)).payload == b"seen"
        await client.close()
        await sub.close()
