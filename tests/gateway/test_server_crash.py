"""Crash and abuse: SIGKILL of a SYNC_FLUSH server loses no acknowledged message
of a persistent subscriber; random bytes from many connections leave the
server serving a well-behaved client."""

from __future__ import annotations

import os
import random
import signal
import sys
from functools import partial
from pathlib import Path

import trio

from gateway.mqtt import PubAck, Publish

PROC = str(Path(__file__).with_name("gateway_proc.py"))


async def _start(data_dir: Path, nursery) -> tuple[trio.Process, int]:
    port_file = data_dir.parent / f"port-{random.random()}"
    proc = await nursery.start(partial(trio.run_process, [sys.executable, PROC, str(data_dir), str(port_file), "SYNC_FLUSH"],
                                      check=False))
    with trio.fail_after(30):
        while not port_file.exists():
            await trio.sleep(0.05)
    return proc, int(port_file.read_text())


async def test_sigkill_after_pubacks_loses_nothing(tmp_path, client_cls):
    data = tmp_path / "store"
    acked = []
    async with trio.open_nursery() as nursery:
        proc, port = await _start(data, nursery)
        sub, _ = await client_cls.connect(port, "durable", version=4, clean_start=False)
        await sub.subscribe("crash/#", qos=1)
        await sub.disconnect()
        pub, _ = await client_cls.connect(port, "pub", version=4)
        # a window of 20 publishes in flight at once, so acks come in batches
        sent = {}
        for i in range(200):
            pid = await pub.publish("crash/t", b"%d" % i, qos=1)
            sent[pid] = i
            if i % 20 == 19:
                for _ in range(20):
                    ack = await pub.expect(PubAck)
                    acked.append(sent[ack.packet_id])
        for i in range(200, 230):
            sent[await pub.publish("crash/t", b"%d" % i, qos=1)] = i
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        nursery.cancel_scope.cancel()
    assert len(acked) == 200
    async with trio.open_nursery() as nursery:
        proc, port = await _start(data, nursery)
        sub, ack = await client_cls.connect(port, "durable", version=4, clean_start=False)
        assert ack.session_present
        got = set()
        with trio.move_on_after(10):
            while not set(acked) <= got:
                m = await sub.expect(Publish, timeout=10)
                got.add(int(m.payload))
                await sub.send(PubAck(packet_id=m.packet_id))
        assert set(acked) <= got, f"lost {sorted(set(acked) - got)[:10]}"
        proc.terminate()
        await proc.wait()
        nursery.cancel_scope.cancel()


async def test_fuzz_live_listener_keeps_serving(gateway_factory, client_cls):
    rng = random.Random(1234)
    async with gateway_factory() as (broker, gw, port):
        good, _ = await client_cls.connect(port, "good")
        await good.subscribe("alive")

        async def fuzzer(seed: int):
            r = random.Random(seed)
            for _ in range(15):
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                    prefix = b"" if r.random() < 0.5 else bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([r.choice([3, 4, 5]), 2, 0, 60, 0, 0])
                    await stream.send_all(prefix + os.urandom(r.randint(1, 300)))
                    with trio.move_on_after(0.2):
                        while await stream.receive_some(4096):
                            pass
                    await stream.aclose()
                except (trio.BrokenResourceError, OSError):
                    pass

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(fuzzer, rng.randint(0, 1 << 30))
        await good.publish("alive", b"yes")
        m = await good.expect(Publish)
        assert m.payload == b"yes"
        assert gw.stats.connected == 1
