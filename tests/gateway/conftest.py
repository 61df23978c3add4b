"""Fixtures for the gateway's session core: a real broker on a temp store, the
gateway on an OS-chosen port, and a minimal MQTT client built on
``gateway.mqtt`` (encode events, decode what the server sends)."""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio

from core.broker import BrokerConfig, open_broker
from core.store import StoreConfig
from gateway.app import MQTTGateway
from gateway.listeners import ListenerSpec
from gateway.mqtt import (ConnAck, Connect, Disconnect, PingReq, PubAck, Publish, SubAck, Subscribe, Subscription,
                          UnsubAck, Unsubscribe, encode)
from gateway.mqtt._decode import decode_packet, read_fixed_header
from gateway.settings import GatewaySettings


def small_store_config(root, **kw) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=4 << 20,
                       mapped_file_size_consume_queue=20 * 4096, max_hash_slot_num=1024, max_index_num=8192, **kw)


@asynccontextmanager
async def running_gateway(root, settings=None, *, broker_config=None):
    """(broker, gateway, port) for the duration of the block."""
    cfg = broker_config or BrokerConfig(default_topic_queue_nums=4, listen_port=0)
    async with open_broker(cfg, small_store_config(root)) as broker:
        gw = MQTTGateway(broker, GatewaySettings.from_dict(settings or {"sysInterval": 0}))
        async with trio.open_nursery() as nursery:
            ports = await nursery.start(gw.run, [ListenerSpec(transport="tcp", ephemeral=True)])
            try:
                yield broker, gw, ports["tcp"]
            finally:
                nursery.cancel_scope.cancel()


class Client:
    """A bare MQTT client for tests: send events, receive decoded events."""

    def __init__(self, stream: trio.SocketStream, version: int, *, default_timeout: float = 5.0) -> None:
        self.stream = stream
        self.version = version
        self.buf = b""
        self.pid = 0
        # Real seconds for socket clients. Memory clients run on the autojump
        # clock, where a wait on a broker worker thread counts as idle: a short
        # virtual timeout would be the next deadline and fire while the thread
        # works, so they wait "forever" in virtual time (still no real time).
        self.default_timeout = default_timeout

    @classmethod
    async def connect(cls, port: int, client_id: str = "", *, version: int = 5, expect: int | None = 0,
                      **connect_kw) -> tuple["Client", ConnAck | None]:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        self = cls(stream, version)
        connect_kw.setdefault("clean_start", True)
        await self.send(Connect(protocol_version=version, client_id=client_id, **connect_kw))
        ack = await self.recv()
        if expect is not None:
            assert isinstance(ack, ConnAck), ack
            assert ack.reason_code == expect, ack
        return self, ack

    def next_pid(self) -> int:
        self.pid = self.pid % 65535 + 1
        return self.pid

    async def read_exactly(self, n: int, timeout: float = 10.0) -> bytes:
        """The next ``n`` bytes from the server, undecoded (for tests of exact bytes)."""
        with trio.fail_after(timeout):
            while len(self.buf) < n:
                data = await self.stream.receive_some(65536)
                assert data, "connection closed"
                self.buf += data
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    async def send(self, *events) -> None:
        await self.stream.send_all(b"".join(encode(e, self.version) for e in events))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def recv(self, timeout: float | None = None):
        """The next packet, or None at EOF."""
        with trio.fail_after(self.default_timeout if timeout is None else timeout):
            while True:
                header = read_fixed_header(self.buf, 0, len(self.buf))
                if header is not None:
                    first, length, body = header
                    if len(self.buf) >= body + length:
                        ev = decode_packet(first, self.buf, body, body + length, self.version)
                        self.buf = self.buf[body + length:]
                        return ev
                try:
                    data = await self.stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if not data:
                    return None
                self.buf += data

    async def expect(self, cls, timeout: float | None = None):
        ev = await self.recv(timeout)
        assert isinstance(ev, cls), f"expected {cls.__name__}, got {ev!r}"
        return ev

    async def subscribe(self, *filters, qos: int = 0, **kw):
        subs = [f if isinstance(f, Subscription) else Subscription(topic_filter=f, qos=qos) for f in filters]
        await self.send(Subscribe(packet_id=self.next_pid(), subscriptions=subs, **kw))
        from gateway.mqtt import SubAck

        return await self.expect(SubAck)

    async def publish(self, topic: str, payload: bytes = b"", qos: int = 0, **kw) -> int | None:
        pid = self.next_pid() if qos else None
        await self.send(Publish(topic=topic, payload=payload, qos=qos, packet_id=pid, **kw))
        return pid

    async def ping(self) -> None:
        await self.send(PingReq())

    async def disconnect(self, **kw) -> None:
        await self.send(Disconnect(**kw))
        await self.stream.aclose()

    async def close(self) -> None:
        await self.stream.aclose()



async def subscribe_with_a_publish(sub: "Client", write_subscribe, pub: "Client", i: int, between=None) -> bool:
    """One round of the SUBSCRIBE/PUBLISH race (5.0 clients): ``write_subscribe``
    puts ``sub``'s SUBSCRIBE of ``race/t`` (packet id ``i``, the encoded
    bytes given) on the wire, then ``pub``'s QoS 1 PUBLISH of ``i`` goes out
    with no checkpoint between the two writes, so the server finds both in
    one wake-up (``between``: awaited between the two writes instead). True
    when the subscription was in force for that PUBLISH (the subscriber gets
    it before a later one); the subscription is removed again."""
    write_subscribe(encode(Subscribe(packet_id=i, subscriptions=[Subscription(topic_filter="race/t", qos=1)]), 5))
    if between is not None:
        await between()
    os.write(pub.stream.socket.fileno(), encode(Publish(topic="race/t", payload=b"%d" % i, qos=1, packet_id=i), 5))
    await sub.expect(SubAck)
    await pub.expect(PubAck)
    await pub.publish("race/t", b"after")
    m = await sub.expect(Publish)
    in_force = m.payload == b"%d" % i
    if in_force:
        await sub.send(PubAck(packet_id=m.packet_id))
        m = await sub.expect(Publish)
    assert m.payload == b"after"
    await sub.send(Unsubscribe(packet_id=i, topic_filters=["race/t"]))
    await sub.expect(UnsubAck)
    return in_force

@pytest.fixture
def gateway_factory(tmp_path):
    return partial(running_gateway, tmp_path / "store")


@pytest.fixture
def client_cls():
    return Client


async def memory_client(gw, nursery, client_id: str = "", *, version: int = 5, expect: int | None = 0,
                        stream_pair=None, **connect_kw):
    """A Client talking to ``gw`` over an in-memory stream (for MockClock tests);
    ``stream_pair``: trio.testing's ``memory_stream_pair`` unless given (e.g.
    ``lockstep_stream_pair``, which takes a write only when the other side reads)."""
    from trio.testing import memory_stream_pair

    from gateway.listeners import ConnectionInfo

    client_stream, server_stream = (stream_pair or memory_stream_pair)()
    info = ConnectionInfo(transport="tcp", listener="memory", peer=("memory", 0), local_port=0,
                          connection_id=id(client_stream))
    nursery.start_soon(gw.handle, server_stream, info)
    self = Client(client_stream, version, default_timeout=1e6)
    connect_kw.setdefault("clean_start", True)
    await self.send(Connect(protocol_version=version, client_id=client_id, **connect_kw))
    ack = await self.recv(timeout=1e6)
    if expect is not None:
        assert isinstance(ack, ConnAck), ack
        assert ack.reason_code == expect, ack
    return self, ack


@asynccontextmanager
async def memory_gateway(root, settings=None):
    """(broker, gateway, nursery) with no listener: clients come in via memory_client.

    The broker's periodic tasks (flush, offset persistence, retention) are
    pushed out of the way: each runs in a worker thread, and while a thread
    runs the autojump clock leaps to the next deadline, so they would make
    virtual time race ahead."""
    cfg = BrokerConfig(default_topic_queue_nums=4, listen_port=0, flush_interval_commit_log=10**9,
                       flush_interval_consume_queue=10**9, flush_consumer_offset_interval=10**9,
                       clean_resource_interval=10**9)
    async with open_broker(cfg, small_store_config(root)) as broker:
        gw = MQTTGateway(broker, GatewaySettings.from_dict(settings or {"sysInterval": 0}))
        async with trio.open_nursery() as nursery:
            await nursery.start(gw.run, [])
            try:
                yield broker, gw, nursery
            finally:
                nursery.cancel_scope.cancel()


@pytest.fixture
def memory_factory(tmp_path):
    return partial(memory_gateway, tmp_path / "store")


@pytest.fixture
def memory_connect():
    return memory_client
