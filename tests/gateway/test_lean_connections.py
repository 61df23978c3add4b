"""What an idle connection holds, and what a slow subscriber may cost (issue 13).

* After CONNACK an idle connection is one task (the listener's, whose coroutine is
  the reader itself) with no nursery of its own; a writer task exists only while
  output from elsewhere waits, and ends when it is written.
* It keeps no copy of its CONNECT (password, will properties) and no read
  buffer.
* A subscriber that never reads: its socket fills, the write blocks, and
  after ``writeTimeout`` the connection is dropped; the others, and the
  publisher, are never held up by it.
* QoS 0 messages waiting behind its blocked write are bounded by
  ``maxQueuedMessages``; ``queueOverflow`` chooses which go; every drop is
  counted (session and ``$SYS``).
"""

from __future__ import annotations

import gc
import socket

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from gateway.mqtt import ConnAck, Connect, PubAck, Publish, Will
from gateway.sys_topics import sys_values


def _tasks() -> set:
    out = set()
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        out.add(task)
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return out


def _connection_of(gw, client_id: str):
    return gw.router.sessions[client_id].conn


async def _stuck_client(client_cls, port: int, client_id: str, *, version: int = 4):
    """A client whose socket has a small receive buffer and that never reads
    after its SUBACK: the server's writes to it soon block."""
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", port))
    client = client_cls(trio.SocketStream(sock), version)
    await client.send(Connect(protocol_version=version, client_id=client_id, clean_start=True))
    await client.expect(ConnAck)
    return client


async def test_an_idle_connection_is_its_reader_task_and_nothing_else(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        await wait_all_tasks_blocked()
        before = _tasks()
        clients = []
        for i in range(6):
            c, _ = await client_cls.connect(port, f"idle{i}", version=4 if i % 2 else 5)
            clients.append(c)
        await clients[0].subscribe("news", qos=0)
        await clients[1].publish("news", b"hello")
        assert (await clients[0].expect(Publish)).payload == b"hello"  # the publisher's reader wrote it
        await wait_all_tasks_blocked()
        new = _tasks() - before
        assert len(new) == len(clients)  # one task per connection: no writer left, no other
        assert {t.coro.cr_code.co_name for t in new} == {"run"}  # Connection.run is the listener's task itself
        assert not any(t.child_nurseries for t in new)
        for c in clients:
            await c.close()


def _reachable(root) -> list:
    seen, todo, out = {id(root)}, [root], []
    while todo:
        obj = todo.pop()
        out.append(obj)
        for ref in gc.get_referents(obj):
            if id(ref) not in seen and not isinstance(ref, type):
                seen.add(id(ref))
                todo.append(ref)
    return out


async def test_no_copy_of_the_connect_packet_or_read_buffer_after_connack(gateway_factory, client_cls):
    async with gateway_factory({"sysInterval": 0}) as (broker, gw, port):
        will = Will(topic="dev/gone", payload=b"will-payload-7f3a", qos=1)
        client, _ = await client_cls.connect(port, "dev", version=5, username="u",
                                             password=b"password-9c2e", will=will, keep_alive=60)
        conn = _connection_of(gw, "dev")
        await wait_all_tasks_blocked()
        held = _reachable(conn.mq)
        assert not any(isinstance(o, Connect) for o in held)
        assert not any(isinstance(o, bytes) and b"password-9c2e" in o for o in held)
        assert conn.mq._buf == b""  # the read is consumed: no buffer kept
        assert conn.will == will  # the will itself is kept (it may be published)
        await client.disconnect()


async def test_a_stuck_subscriber_is_dropped_after_the_write_timeout_and_holds_nobody_up(
        gateway_factory, client_cls):
    n, size = 300, 16 * 1024
    async with gateway_factory({"sysInterval": 0, "writeTimeout": 3.0}) as (broker, gw, port):
        stuck = await _stuck_client(client_cls, port, "stuck")
        await stuck.subscribe("load/#", qos=0)
        stuck_conn = _connection_of(gw, "stuck")
        fast, _ = await client_cls.connect(port, "fast", version=4)
        await fast.subscribe("load/#", qos=0)
        pub, _ = await client_cls.connect(port, "pub", version=4)
        got = []

        async def read_fast():
            while len(got) < n:
                got.append(int((await fast.expect(Publish)).payload[:8]))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_fast)
            for i in range(n):
                await pub.publish("load/a", b"%08d" % i + bytes(size - 8))
            await pub.publish("marker", b"", qos=1)
            await pub.expect(PubAck)  # the publisher's reader was not held up by the stuck one
        assert got == list(range(n))
        assert not stuck_conn.done.is_set()  # all that happened while it was still connected
        with trio.fail_after(20):
            await stuck_conn.done.wait()  # dropped: its write blocked for writeTimeout
        assert "stuck" not in gw.router.sessions and gw.stats.connected == 2
        await pub.publish("load/a", b"%08d" % n + b"after")
        assert (await fast.expect(Publish)).payload.endswith(b"after")


@pytest.mark.parametrize("policy", ["dropOldest", "dropNew"])
async def test_qos0_behind_a_blocked_write_is_bounded_and_counted(gateway_factory, client_cls, policy):
    n, size, limit = 400, 16 * 1024, 10
    settings = {"sysInterval": 0, "maxQueuedMessages": limit, "queueOverflow": policy, "writeTimeout": 60.0}
    async with gateway_factory(settings) as (broker, gw, port):
        slow = await _stuck_client(client_cls, port, "slow")
        await slow.subscribe("flood/#", qos=0)
        conn = _connection_of(gw, "slow")
        pub, _ = await client_cls.connect(port, "pub", version=4)
        for i in range(n):
            await pub.publish("flood/a", b"%08d" % i + bytes(size - 8))
        await pub.publish("marker", b"", qos=1)
        await pub.expect(PubAck)  # every flood message has been routed
        dropped = gw.stats.dropped
        assert dropped > 0
        assert gw.router.sessions["slow"].dropped == dropped
        assert sys_values(gw, 0)["$SYS/broker/messages/dropped"] == str(dropped)
        assert conn.out_bytes <= limit * (size + 16)  # what waits behind the write: at most the limit
        # The client reads at last: what it was sent, in order, plus what waited.
        got = []
        while len(got) + dropped < n:
            got.append(int((await slow.expect(Publish, timeout=20)).payload[:8]))
        assert got == sorted(got)
        assert len(got) + dropped == n
        if policy == "dropOldest":
            assert got[-limit:] == list(range(n - limit, n))  # the newest waited, older ones went
        else:
            assert n - 1 not in got  # the newest were refused
        assert gw.stats.dropped == dropped
