"""The HA link in one process: the sans-I/O wire (whole, byte by byte, with
trailing bytes, fuzzed) and a SYNC_MASTER broker with its real `HAService`
facing slaves that are raw sockets speaking the 4.x wire, so each answer a
SYNC_MASTER gives can be provoked: SLAVE_NOT_AVAILABLE (no slave; one too far
behind), FLUSH_SLAVE_TIMEOUT (a slave that stops acknowledging, after
``slaveTimeout``), SEND_OK once a slave reports the bytes."""

from __future__ import annotations

import struct
from contextlib import asynccontextmanager

import pytest
import trio
from hypothesis import given, settings, strategies as st

from core.broker import BrokerConfig, BrokerRole, SendStatus, open_broker
from core.ha.master import HAService
from core.ha.wire import FrameDecoder, HAProtocolError, ReportDecoder, encode_frame, encode_report
from core.store import StoreConfig
from core.store.message import Message

FRAMES = [(0, b"abc"), (3, b""), (3, bytes(range(256)) * 3), (771, b"z")]


def wire() -> bytes:
    return b"".join(encode_frame(o, b) for o, b in FRAMES)


def drain(dec: FrameDecoder) -> list:
    out = []
    while (f := dec.next_frame()) is not None:
        out.append(f)
    return out


def test_frames_whole_byte_by_byte_and_with_trailing_bytes():
    dec = FrameDecoder()
    dec.receive_data(wire())
    assert drain(dec) == FRAMES
    dec = FrameDecoder()
    got = []
    for i in range(len(wire())):
        dec.receive_data(wire()[i : i + 1])
        got += drain(dec)
    assert got == FRAMES
    dec = FrameDecoder()
    dec.receive_data(wire() + encode_frame(772, b"partial")[:-2])
    assert drain(dec) == FRAMES and dec.buffered == 12 + 5


def test_reports_keep_the_last_complete_one():
    dec = ReportDecoder()
    assert dec.receive_data(encode_report(5) + encode_report(9) + encode_report(12)[:3]) == 9
    assert dec.receive_data(encode_report(12)[3:]) == 12
    assert dec.receive_data(b"\x00" * 7) is None
    dec.receive_data(b"\x00")  # completes the pending report (offset 0)
    with pytest.raises(HAProtocolError):
        dec.receive_data(struct.pack(">q", -1))


def test_a_bad_frame_header_is_a_protocol_error_not_an_allocation():
    for header in (struct.pack(">qi", 0, -1), struct.pack(">qi", -5, 1), struct.pack(">qi", 0, 2**31 - 1)):
        dec = FrameDecoder(max_body=1 << 20)
        dec.receive_data(header)
        with pytest.raises(HAProtocolError):
            dec.next_frame()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 17))
def test_fuzz_the_decoders_raise_only_protocol_errors(data, step):
    frames, reports = FrameDecoder(max_body=1 << 16), ReportDecoder()
    try:
        for i in range(0, len(data), step):
            frames.receive_data(data[i : i + step])
            drain(frames)
    except HAProtocolError:
        pass
    try:
        for i in range(0, len(data), step):
            reports.receive_data(data[i : i + step])
    except HAProtocolError:
        pass


class RawSlave:
    """A slave that is a bare socket: it reports what the test says."""

    def __init__(self, stream: trio.SocketStream):
        self.stream = stream
        self.frames = FrameDecoder()
        self.end = 0

    async def report(self, offset: int) -> None:
        await self.stream.send_all(encode_report(offset))

    async def take_frames(self, until: int) -> None:
        """Read frames until the master has sent everything below ``until``."""
        while self.end < until:
            self.frames.receive_data(await self.stream.receive_some(65536))
            for offset, body in drain(self.frames):
                assert offset == self.end or self.end == 0
                self.end = offset + len(body)


@asynccontextmanager
async def sync_master(config, store_config):
    """(broker, its HAService, the HA port, a nursery): a SYNC_MASTER whose
    slaves are whatever the test connects to the port."""
    async with open_broker(config, store_config) as broker, trio.open_nursery() as nursery:
        ha = HAService.from_config(broker.store, config)
        port = await nursery.start(ha.serve, "127.0.0.1", 0)
        broker.add_dispatch_listener(ha.notify_written)
        broker.replicator = ha
        yield broker, ha, port, nursery


@pytest.fixture
def configs(tmp_path):
    return (BrokerConfig(listen_port=0, broker_role=BrokerRole.SYNC_MASTER, slave_timeout=300, ha_slave_fallbehind_max=4096),
            StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=1 << 20))


async def test_sync_master_answers_by_what_its_slaves_report(configs):
    config, store_config = configs
    async with sync_master(config, store_config) as (broker, ha, port, nursery):
        assert (await broker.send(Message("T", b"alone"))).status is SendStatus.SLAVE_NOT_AVAILABLE

        slave = RawSlave(await trio.open_tcp_stream("127.0.0.1", port))
        await slave.report(0)
        await slave.take_frames(broker.store.max_phy_offset)
        await slave.report(slave.end)
        with trio.fail_after(5):
            while ha.acked_offset < slave.end:
                await trio.sleep(0.01)

        async def acknowledge():  # a live slave: report every frame it gets
            while True:
                await slave.take_frames(slave.end + 1)
                await slave.report(slave.end)

        acker = trio.CancelScope()

        async def run_acker():
            with acker:
                await acknowledge()

        nursery.start_soon(run_acker)
        results = []

        async def send_one(i: int) -> None:
            results.append(await broker.send(Message("T", b"y%d" % i)))

        async with trio.open_nursery() as senders:  # concurrent sends share the slave's reports
            for i in range(20):
                senders.start_soon(send_one, i)
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        assert ha.confirmed == broker.store.max_phy_offset
        assert ha.latency.count == 20 and ha.latency.counts[-1] == 20 and 0 < ha.latency.sum < 20  # /metrics
        assert broker.durable_latency.count >= 20  # every send of a SYNC_MASTER waits (/metrics)
        acker.cancel()  # connected, silent: FLUSH_SLAVE_TIMEOUT after slaveTimeout (0.3 s)
        start = trio.current_time()
        r = await broker.send(Message("T", b"z"))
        assert r.status is SendStatus.FLUSH_SLAVE_TIMEOUT and r.ok
        assert 0.3 <= trio.current_time() - start < 2.0
        await broker.send(Message("T", bytes(5000)))  # now more than haSlaveFallbehindMax behind
        assert (await broker.send(Message("T", b"w"))).status is SendStatus.SLAVE_NOT_AVAILABLE
        assert ha.status()[0]["inSync"] is False
        nursery.cancel_scope.cancel()


async def test_a_slave_reporting_past_the_masters_end_is_not_served(configs):
    config, store_config = configs
    async with sync_master(config, store_config) as (broker, ha, port, nursery):
        await broker.send(Message("T", b"x"))
        slave = RawSlave(await trio.open_tcp_stream("127.0.0.1", port))
        await slave.report(10**9)  # a diverged log
        with trio.fail_after(5):
            while not ha.links or next(iter(ha.links)).servable:
                await trio.sleep(0.01)
        assert not ha.slave_ok() and ha.status()[0]["inSync"] is False
        nursery.cancel_scope.cancel()


async def test_a_slave_acknowledging_bytes_it_was_never_sent_is_cut_off(configs):
    """A peer on the HA port that reports a sane start, then an offset past
    what it was sent (a bug, a fuzzer, a stranger), must not make a SYNC_MASTER
    acknowledge messages as replicated: its link is closed with one line, and
    sends answer SLAVE_NOT_AVAILABLE. A real slave connecting next is served."""
    config, store_config = configs
    async with sync_master(config, store_config) as (broker, ha, port, nursery):
        await broker.send(Message("T", b"x"))
        liar = RawSlave(await trio.open_tcp_stream("127.0.0.1", port))
        await liar.report(0)
        await liar.take_frames(broker.store.max_phy_offset)
        await liar.report(broker.store.max_phy_offset + 10**6)  # far past the end it was sent
        with trio.fail_after(5):
            while ha.links:
                await trio.sleep(0.01)
        assert ha.acked_offset == -1
        assert (await broker.send(Message("T", b"not replicated"))).status is SendStatus.SLAVE_NOT_AVAILABLE

        slave = RawSlave(await trio.open_tcp_stream("127.0.0.1", port))
        await slave.report(0)

        async def acknowledge():
            while True:
                await slave.take_frames(slave.end + 1)
                await slave.report(slave.end)

        nursery.start_soon(acknowledge)
        with trio.fail_after(5):
            while ha.acked_offset < broker.store.max_phy_offset:
                await trio.sleep(0.01)
        assert (await broker.send(Message("T", b"replicated"))).status is SendStatus.SEND_OK
        nursery.cancel_scope.cancel()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(0, 400)), min_size=1, max_size=8),
       st.integers(1, 9))
def test_fuzz_the_ha_port_never_counts_a_stranger_as_a_replica_and_keeps_serving(offsets, step):
    """Random reports on the HA port (after a sane first one, so that the link
    is served), sent in pieces: whatever they say, a SYNC_MASTER's send never
    answers SEND_OK for a message no slave received, and the port serves the
    next peer."""
    import tempfile

    async def main():
        with tempfile.TemporaryDirectory() as tmp:
            config = BrokerConfig(listen_port=0, broker_role=BrokerRole.SYNC_MASTER, slave_timeout=100)
            store_config = StoreConfig(store_path_root_dir=tmp, mapped_file_size_commit_log=1 << 20)
            async with sync_master(config, store_config) as (broker, ha, port, nursery):
                await broker.send(Message("T", b"x"))
                peer = await trio.open_tcp_stream("127.0.0.1", port)
                data = encode_report(0) + b"".join(struct.pack(">q", o) for o in offsets)
                try:
                    for i in range(0, len(data), step):
                        await peer.send_all(data[i : i + step])
                except trio.BrokenResourceError:
                    pass  # the master closed the link already
                # every report read: the link closed, or it holds the last one (30 s: under a loaded
                # machine's fsyncs this took over 5 s once, with two workers and a soak beside it)
                with trio.fail_after(30):
                    while ha.links and next(iter(ha.links)).acked != max([0, *offsets]):
                        await trio.sleep(0.01)
                r = await broker.send(Message("T", b"y"))
                assert r.status is not SendStatus.SEND_OK, "acknowledged as replicated, but no slave received it"
                await peer.aclose()
                nxt = RawSlave(await trio.open_tcp_stream("127.0.0.1", port))
                await nxt.report(0)
                with trio.fail_after(5):
                    await nxt.take_frames(broker.store.max_phy_offset)
                nursery.cancel_scope.cancel()

    trio.run(main)


async def test_a_promoted_master_recreates_topics_its_log_has_but_its_config_lacks(configs):
    config, store_config = configs
    async with open_broker(config.replace(broker_role=BrokerRole.ASYNC_MASTER), store_config) as broker:
        for qid in range(3):
            assert (await broker.send(Message("Late", b"x"), qid)).ok
        await broker.send(Message("Known", b"y"))
        broker.topics.delete("Late")  # as if created on the old master after the last metadata sync
        assert await broker.recover_topics_from_store() == ["Late"]
        assert broker.get_topic("Late").queue_nums >= 3
        assert await broker.recover_topics_from_store() == []
