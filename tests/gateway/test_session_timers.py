"""Keepalive, will delay and session expiry, driven in-process on trio's
autojump clock (no real sleeps): the gateway's timers fire in virtual time.

Topics a will goes to are created before the clock runs: creating one writes
topics.json in a worker thread, which the autojump clock counts as idleness.

The clock jumps after 10 ms of real idleness rather than at once: the broker
does some work in worker threads (file creation, fsync), and a clock that
jumps the moment the loop waits for a thread would fire every timeout
before the thread could answer. For the same reason the upper bounds below
are loose: they only tell "on time" from "at the wrong deadline"."""

from __future__ import annotations

import pytest
import trio
from thread_aware_clock import thread_aware_clock

from gateway.mqtt import Disconnect, Publish, ReasonCode, Will

BIG = 1e6  # a virtual-time timeout that never fires first


@pytest.fixture
def clock():
    return thread_aware_clock(0.01)


async def test_keepalive_expiry_at_one_and_a_half(clock, memory_factory, memory_connect):
    async with memory_factory() as (broker, gw, nursery):
        c, ack = await memory_connect(gw, nursery, "ka", keep_alive=10)
        start = trio.current_time()
        d = await c.recv(timeout=BIG)
        assert isinstance(d, Disconnect) and d.reason_code == ReasonCode.KEEP_ALIVE_TIMEOUT
        assert 14.9 <= trio.current_time() - start < 20
        assert await c.recv(timeout=BIG) is None


async def test_pings_keep_the_connection(clock, memory_factory, memory_connect):
    from gateway.mqtt import PingResp

    async with memory_factory() as (broker, gw, nursery):
        c, _ = await memory_connect(gw, nursery, "ka", keep_alive=10)
        for _ in range(5):
            await trio.sleep(9)
            await c.ping()
            await c.expect(PingResp, timeout=BIG)
        assert gw.stats.connected == 1


async def test_server_keepalive_is_announced_and_enforced(clock, memory_factory, memory_connect):
    async with memory_factory({"sysInterval": 0, "maxKeepalive": 20}) as (broker, gw, nursery):
        c, ack = await memory_connect(gw, nursery, "ka", keep_alive=0)
        assert ack.server_keep_alive == 20
        start = trio.current_time()
        d = await c.recv(timeout=BIG)
        assert isinstance(d, Disconnect) and d.reason_code == ReasonCode.KEEP_ALIVE_TIMEOUT
        assert 29.9 <= trio.current_time() - start < 40


async def test_will_after_its_delay(clock, memory_factory, memory_connect):
    async with memory_factory() as (broker, gw, nursery):
        await broker.ensure_topic("will", 4)  # made now: no topics.json write in a worker thread at the deadline
        w, _ = await memory_connect(gw, nursery, "watcher")
        await w.subscribe("will/#", qos=1)
        dev, _ = await memory_connect(gw, nursery, "dev", clean_start=True, session_expiry_interval=100,
                                      will=Will(topic="will/dev", payload=b"bye", qos=1, will_delay_interval=30))
        await dev.close()  # no DISCONNECT: the will is due
        start = trio.current_time()
        m = await w.expect(Publish, timeout=BIG)
        assert m.payload == b"bye"
        assert 29.9 <= trio.current_time() - start < 100  # before the session ends


async def test_no_will_when_client_returns_in_time(clock, memory_factory, memory_connect):
    async with memory_factory() as (broker, gw, nursery):
        await broker.ensure_topic("will", 4)  # made now: no topics.json write in a worker thread at the deadline
        w, _ = await memory_connect(gw, nursery, "watcher")
        await w.subscribe("will/#")
        dev, _ = await memory_connect(gw, nursery, "dev", clean_start=True, session_expiry_interval=100,
                                      will=Will(topic="will/dev", payload=b"bye", will_delay_interval=30))
        await dev.close()
        await trio.sleep(10)
        dev, ack = await memory_connect(gw, nursery, "dev", clean_start=False, session_expiry_interval=100)
        assert ack.session_present
        with trio.move_on_after(200):
            m = await w.recv(timeout=BIG)
            raise AssertionError(f"will sent although the client came back: {m!r}")


async def test_will_at_session_end_when_sooner_than_delay(clock, memory_factory, memory_connect):
    async with memory_factory() as (broker, gw, nursery):
        await broker.ensure_topic("will", 4)  # made now: no topics.json write in a worker thread at the deadline
        w, _ = await memory_connect(gw, nursery, "watcher")
        await w.subscribe("will/#")
        dev, _ = await memory_connect(gw, nursery, "dev", clean_start=True, session_expiry_interval=5,
                                      will=Will(topic="will/dev", payload=b"bye", will_delay_interval=60))
        await dev.close()
        start = trio.current_time()
        await w.expect(Publish, timeout=BIG)
        assert 4.9 <= trio.current_time() - start < 30  # long before the delay


async def test_normal_disconnect_discards_will_0x04_sends_it(clock, memory_factory, memory_connect):
    async with memory_factory() as (broker, gw, nursery):
        await broker.ensure_topic("will", 4)  # made now: no topics.json write in a worker thread at the deadline
        w, _ = await memory_connect(gw, nursery, "watcher")
        await w.subscribe("will/#")
        a, _ = await memory_connect(gw, nursery, "a", will=Will(topic="will/a", payload=b"a"))
        await a.disconnect()
        b, _ = await memory_connect(gw, nursery, "b", will=Will(topic="will/b", payload=b"b"))
        await b.disconnect(reason_code=ReasonCode.DISCONNECT_WITH_WILL_MESSAGE)
        m = await w.expect(Publish, timeout=BIG)
        assert m.payload == b"b"


async def test_session_expiry(clock, memory_factory, memory_connect):
    async with memory_factory() as (broker, gw, nursery):
        c, _ = await memory_connect(gw, nursery, "exp", clean_start=False, session_expiry_interval=50)
        await c.subscribe("e", qos=1)
        await c.disconnect()
        await trio.sleep(40)
        c, ack = await memory_connect(gw, nursery, "exp", clean_start=False, session_expiry_interval=50)
        assert ack.session_present
        await c.disconnect()
        await trio.sleep(51)
        assert "exp" not in gw.router.sessions
        assert len(gw.router.trie) == 0
        c, ack = await memory_connect(gw, nursery, "exp", clean_start=False, session_expiry_interval=50)
        assert not ack.session_present


async def test_disconnect_may_shorten_session_expiry(clock, memory_factory, memory_connect):
    async with memory_factory() as (broker, gw, nursery):
        c, _ = await memory_connect(gw, nursery, "exp", clean_start=False, session_expiry_interval=500)
        await c.disconnect(session_expiry_interval=0)
        await trio.sleep(0.1)
        assert "exp" not in gw.router.sessions


async def test_connect_timeout(clock, memory_factory):
    from trio.testing import memory_stream_pair

    from gateway.listeners import ConnectionInfo

    async with memory_factory({"sysInterval": 0, "connectTimeout": 3}) as (broker, gw, nursery):
        cs, ss = memory_stream_pair()
        nursery.start_soon(gw.handle, ss, ConnectionInfo("tcp", "m", ("m", 0), 0, 1))
        start = trio.current_time()
        assert await cs.receive_some(10) == b""
        assert 2.9 <= trio.current_time() - start < 10


async def test_sys_topics_every_interval(clock, memory_factory, memory_connect):
    async with memory_factory({"sysInterval": 10}) as (broker, gw, nursery):
        c, _ = await memory_connect(gw, nursery, "sys")
        await c.subscribe("$SYS/broker/clients/connected", "#")
        m = await c.expect(Publish, timeout=BIG)  # retained value at subscribe
        assert m.topic == "$SYS/broker/clients/connected" and m.retain
        start = trio.current_time()
        m = await c.expect(Publish, timeout=BIG)
        assert m.topic == "$SYS/broker/clients/connected" and m.payload == b"1" and not m.retain
        assert 0 < trio.current_time() - start <= 20


async def test_sys_topics_carry_every_counter_and_each_listener(clock, memory_factory, memory_connect):
    """Mosquitto's names where Mosquitto has one; refusals, store errors, ACL denials,
    quota and per-listener connections too; the version is the package's."""
    from gateway.sys_topics import package_version

    async with memory_factory({"sysInterval": 10}) as (broker, gw, nursery):
        c, _ = await memory_connect(gw, nursery, "sys-all")
        await c.subscribe("$SYS/broker/#", "#")
        await c.expect(Publish, timeout=BIG)  # the retained values at subscribe, then the next round
        seen: dict[str, bytes] = {}
        while True:  # one whole round of the interval's publishes: until a topic comes again
            m = await c.expect(Publish, timeout=BIG)
            if m.retain:
                continue
            if m.topic in seen:
                break
            seen[m.topic] = m.payload
        assert seen["$SYS/broker/version"] == f"mqgate {package_version()}".encode()
        assert seen["$SYS/broker/listeners/memory/connected"] == b"1"
        assert seen["$SYS/broker/clients/disconnected"] == b"0"
        assert int(seen["$SYS/broker/bytes/received"]) > 0 and int(seen["$SYS/broker/bytes/sent"]) > 0
        for topic in ("errors/store", "clients/refused", "clients/auth-failures", "messages/denied",
                      "messages/quota-exceeded", "listeners/sockets-refused", "listeners/handshake-failures"):
            assert seen[f"$SYS/broker/{topic}"] == b"0", topic


async def test_keepalive_counts_from_the_last_packet(clock, memory_factory, memory_connect):
    """The keepalive task looks at a connection when its first deadline comes,
    finds it read since, and waits for the deadline counted from that read."""
    from gateway.mqtt import PingResp

    async with memory_factory() as (broker, gw, nursery):
        c, _ = await memory_connect(gw, nursery, "ka", keep_alive=10)
        await trio.sleep(9)
        await c.ping()
        await c.expect(PingResp, timeout=BIG)
        last = trio.current_time()
        d = await c.recv(timeout=BIG)
        assert isinstance(d, Disconnect) and d.reason_code == ReasonCode.KEEP_ALIVE_TIMEOUT
        assert 14.9 <= trio.current_time() - last < 20


async def test_a_shorter_keepalive_is_not_held_up_by_a_longer_one(clock, memory_factory, memory_connect):
    """The keepalive task sleeps until the earliest deadline; a connection
    with a nearer one, watched while it sleeps, brings it forward."""
    async with memory_factory() as (broker, gw, nursery):
        long, _ = await memory_connect(gw, nursery, "long", keep_alive=100)
        await trio.sleep(1)
        short, _ = await memory_connect(gw, nursery, "short", keep_alive=4)
        start = trio.current_time()
        d = await short.recv(timeout=BIG)
        assert isinstance(d, Disconnect) and d.reason_code == ReasonCode.KEEP_ALIVE_TIMEOUT
        assert 5.9 <= trio.current_time() - start < 10
        assert gw.stats.connected == 1 and gw.keepalive.watching == 1


async def test_ended_connections_leave_the_keepalive(clock, memory_factory, memory_connect):
    async with memory_factory() as (broker, gw, nursery):
        clients = [(await memory_connect(gw, nursery, f"c{i}", keep_alive=60))[0] for i in range(5)]
        none, _ = await memory_connect(gw, nursery, "none", keep_alive=0)
        assert gw.keepalive.watching == 5  # keepalive 0: not watched
        for c in clients:
            await c.disconnect()
        while gw.stats.connected > 1:
            await trio.sleep(0.1)
        assert gw.keepalive.watching == 0  # the heap holds no ended connection
        await trio.sleep(91)  # their deadlines came: the entries are gone too
        assert gw.keepalive.entries == 0 and gw.stats.connected == 1


async def test_connections_that_come_and_go_do_not_pile_up_entries(clock, memory_factory, memory_connect):
    """An ended connection's entry waits for its deadline (here 27 hours
    away) only while ended entries do not outnumber the live ones by 1,000:
    then the heap is rebuilt without them."""
    async with memory_factory() as (broker, gw, nursery):
        stay, _ = await memory_connect(gw, nursery, "stay", keep_alive=65535)
        for i in range(1500):
            c, _ = await memory_connect(gw, nursery, "churn", keep_alive=65535)
            await c.disconnect()
        while gw.stats.connected > 1:
            await trio.sleep(0.1)
        assert gw.keepalive.watching == 1
        assert gw.keepalive.entries <= 1002, gw.keepalive.entries


async def test_a_reader_writing_its_own_output_is_not_cut_by_the_keepalive(clock, memory_factory, memory_connect):
    """A client that publishes to its own subscription and then reads
    nothing: its reader blocks writing the copy to it (a lockstep stream
    takes a write only when the other side reads), and waits so for longer
    than 1.5 x keepalive. The keepalive does not close it meanwhile: the
    copy, then a PINGRESP, come when it reads again. (Its writeTimeout, 30
    s, is what bounds such a wait.)"""
    from trio.testing import lockstep_stream_pair

    from gateway.mqtt import PingResp

    async with memory_factory() as (broker, gw, nursery):
        c, _ = await memory_connect(gw, nursery, "busy", keep_alive=2, stream_pair=lockstep_stream_pair)
        await c.subscribe("busy/t")
        await c.publish("busy/t", b"to myself")
        await trio.sleep(10)  # 1.5 x keepalive is 3 s: the reader is writing all this time
        m = await c.recv()
        assert isinstance(m, Publish) and m.payload == b"to myself", m
        await c.ping()
        await c.expect(PingResp)
        assert gw.stats.connected == 1
