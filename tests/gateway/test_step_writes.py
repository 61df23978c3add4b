"""Deliveries written at the end of the publisher's read, not by a writer task
(gateway/step_writes.py, issue 13).

* A delivery to an idle plain-TCP subscriber (QoS 0 or 1) starts no task:
  the publisher's reader writes it when it has acted on its read, and a
  read of many PUBLISHes fanned in to one subscriber is written once.
* A subscriber whose socket is full gets everything, in order: what the
  kernel does not take goes to a writer task, later deliveries queue
  behind it.
* A write that fails ends that subscriber only: the publisher (subscribed
  to the same topic) and the other subscribers go on.
"""

from __future__ import annotations

import socket

import trio

from gateway.mqtt import ConnAck, Connect, PubAck, Publish


class _Spawned(trio.abc.Instrument):
    """The names of the tasks started while it is installed."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task) -> None:
        self.names.append(task.name)

    def writers(self) -> int:
        return sum(name.endswith("._writer") for name in self.names)


async def _spawned_during(body):
    spawned = _Spawned()
    trio.lowlevel.add_instrument(spawned)
    try:
        await body()
    finally:
        trio.lowlevel.remove_instrument(spawned)
    return spawned


async def test_a_delivery_to_an_idle_subscriber_starts_no_task(gateway_factory, client_cls):
    n = 100
    async with gateway_factory() as (broker, gw, port):
        sub0, _ = await client_cls.connect(port, "sub0", version=4)
        await sub0.subscribe("fan/#", qos=0)
        sub1, _ = await client_cls.connect(port, "sub1", version=5)
        await sub1.subscribe("one", qos=1)
        pub, _ = await client_cls.connect(port, "pub", version=4)

        async def fan_in_and_qos1():
            # n PUBLISHes in one write: one read (or a few), each written to sub0 once
            await pub.send(*[Publish(topic=f"fan/{i % 3}", payload=b"%03d" % i) for i in range(n)])
            assert [(await sub0.expect(Publish)).payload for _ in range(n)] == [b"%03d" % i for i in range(n)]
            await pub.publish("one", b"q1", qos=1)
            await pub.expect(PubAck)
            got = await sub1.expect(Publish)
            assert (got.payload, got.qos) == (b"q1", 1)
            await sub1.send(PubAck(packet_id=got.packet_id))

        spawned = await _spawned_during(fan_in_and_qos1)
        assert spawned.names == []  # no writer task, nor any other
        assert gw.stats.sent >= n + 1
        for c in (sub0, sub1, pub):
            await c.close()


async def test_a_subscriber_whose_socket_is_full_gets_everything_in_order(gateway_factory, client_cls):
    n, size = 330, 16 * 1024  # 5.4 MB: more than the server's socket and the client's take (tcp_wmem 4 MB)
    async with gateway_factory({"sysInterval": 0, "maxQueuedMessages": 100000}) as (broker, gw, port):
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect(("127.0.0.1", port))
        slow = client_cls(trio.SocketStream(sock), 4)
        await slow.send(Connect(protocol_version=4, client_id="slow", clean_start=True))
        await slow.expect(ConnAck)
        await slow.subscribe("load/#", qos=0)
        pub, _ = await client_cls.connect(port, "pub", version=4)

        async def publish_all_unread():
            for i in range(n):
                await pub.publish("load/a", b"%08d" % i + bytes(size - 8))
            await pub.publish("marker", b"", qos=1)
            await pub.expect(PubAck)  # all routed while the subscriber read nothing

        spawned = await _spawned_during(publish_all_unread)
        assert spawned.writers() >= 1  # its socket pushed back: a writer task took the rest
        got = [int((await slow.expect(Publish, timeout=20)).payload[:8]) for _ in range(n)]
        assert got == list(range(n))
        assert gw.stats.dropped == 0
        await slow.close()
        await pub.close()


async def test_a_failed_write_ends_only_that_subscriber(gateway_factory, client_cls):
    async with gateway_factory() as (broker, gw, port):
        broken, _ = await client_cls.connect(port, "broken", version=4)
        await broken.subscribe("t", qos=0)
        other, _ = await client_cls.connect(port, "other", version=5)
        await other.subscribe("t", qos=0)
        pub, _ = await client_cls.connect(port, "pub", version=4)
        await pub.subscribe("t", qos=0)  # its own reader is the one writing the others
        broken_conn = gw.router.sessions["broken"].conn
        broken_conn.stream.socket.shutdown(socket.SHUT_WR)  # the server's next write to it fails (EPIPE)

        async def publish_once():
            await pub.publish("t", b"first", qos=1)
            assert (await pub.expect(Publish)).payload == b"first"
            await pub.expect(PubAck)
            assert (await other.expect(Publish)).payload == b"first"
            with trio.fail_after(5):
                await broken_conn.done.wait()

        spawned = await _spawned_during(publish_once)
        assert spawned.writers() == 0  # the failed write was the routing step's own
        assert "broken" not in gw.router.sessions
        assert await broken.recv() is None  # closed
        await pub.publish("t", b"second", qos=1)
        assert (await pub.expect(Publish)).payload == b"second"
        await pub.expect(PubAck)
        assert (await other.expect(Publish)).payload == b"second"
        assert gw.stats.connected == 2
        for c in (broken, other, pub):
            await c.close()


async def test_a_reads_deliveries_are_written_before_its_acks(gateway_factory, client_cls):
    """A QoS 1 PUBLISH read alone is acted on in one step; the subscriber's
    copy is written before the publisher's PUBACK (as Mosquitto writes them),
    so a publisher that has its PUBACK finds the copy already on its way.
    Seen from a thread with blocking reads of the two raw sockets: each
    time the PUBACK is in, the subscriber's socket is already readable
    (loopback hands each write to the receiving socket within the sending
    call, on the sender's CPU). With the PUBACK written first, the thread,
    which runs while the server's write releases the GIL, found the copy
    not yet sent in 1-10 of 600 rounds."""
    import os
    import select

    from gateway.mqtt import encode

    async with gateway_factory({"sysInterval": 0}) as (broker, gw, port):
        sub, _ = await client_cls.connect(port, "order-sub", version=4)
        await sub.subscribe("order/t", qos=1)
        pub, _ = await client_cls.connect(port, "order-pub", version=4)
        s_fd, p_fd = sub.stream.socket.fileno(), pub.stream.socket.fileno()

        def wait_readable(fd: int, what: str) -> None:
            assert select.select([fd], [], [], 10)[0], f"no {what} within 10 s"

        def rounds(n: int) -> list[int]:
            late = []
            for i in range(1, n + 1):
                os.write(p_fd, encode(Publish(topic="order/t", payload=b"%d" % i, qos=1, packet_id=i), 4))
                got = b""
                while len(got) < 4:  # the PUBACK: 0x40 0x02 and the packet id
                    wait_readable(p_fd, f"PUBACK {i}")
                    got += os.read(p_fd, 4 - len(got))
                assert got == bytes([0x40, 2, i >> 8, i & 0xFF]), got
                if not select.select([s_fd], [], [], 0)[0]:
                    late.append(i)
                copy = b""
                while not copy.endswith(b"%d" % i):  # the copy, then its PUBACK back
                    wait_readable(s_fd, f"copy of message {i}")
                    copy += os.read(s_fd, 4096)
                pid = copy[-len(b"%d" % i) - 2:-len(b"%d" % i)]
                os.write(s_fd, b"\x40\x02" + pid)
            return late

        late = await trio.to_thread.run_sync(rounds, 600)
        assert late == [], f"the PUBACK came before the subscriber's copy in rounds {late}"
        for c in (sub, pub):
            await c.close()
