"""Regressions for what the fault campaign's fuzzer found (issue 17, tests/faults).

Each was an unhandled exception out of a connection's handler: a traceback
in the log (MQTT), or the end of the whole process (HTTP).
"""

from __future__ import annotations

import random
import socket
import struct
import sys
import time
from pathlib import Path

from gateway.mqtt import PingResp, PubAck, ReasonCode, UnsubAck

from serve_process import ServeProcess, free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
import fuzz  # noqa: E402  (tests/faults: the campaign's mutator and HTTP corpus)


def _str(b: bytes) -> bytes:
    return struct.pack(">H", len(b)) + b


def _packet(first: int, body: bytes) -> bytes:
    assert len(body) < 128
    return bytes([first, len(body)]) + body


async def test_unsubscribe_of_an_invalid_filter_is_answered_not_raised(gateway_factory, client_cls, caplog):
    async with gateway_factory() as (broker, gw, port):
        for version in (5, 4):
            c, _ = await client_cls.connect(port, f"unsub{version}", version=version)
            props = b"\x00" if version == 5 else b""
            await c.send_raw(_packet(0xA2, b"\x00\x07" + props + _str(b"fz.#") + _str(b"a/b")))
            ack = await c.expect(UnsubAck)
            if version == 5:
                assert ack.reason_codes == (ReasonCode.TOPIC_FILTER_INVALID, ReasonCode.NO_SUBSCRIPTION_EXISTED)
            await c.ping()
            await c.expect(PingResp)
            await c.close()
    assert "handler failed" not in caplog.text


async def test_publish_topic_with_a_control_byte_is_refused_not_raised(gateway_factory, client_cls, caplog):
    async with gateway_factory() as (broker, gw, port):
        c, _ = await client_cls.connect(port, "ctl", version=5)
        await c.send_raw(_packet(0x32, _str(b"a/\x01b") + b"\x00\x05" + b"\x00" + b"x"))
        ack = await c.expect(PubAck)
        assert (ack.packet_id, ack.reason_code) == (5, ReasonCode.TOPIC_NAME_INVALID)
        await c.ping()
        await c.expect(PingResp)
    assert "handler failed" not in caplog.text


def test_fuzzed_http_requests_do_not_end_the_server(tmp_path):
    """Mutated requests, pipelined, each connection reset at once: Hypercorn's
    close (send_eof) raced a response's write (BusyResourceError) and the
    process was gone, on the old tree within ~5,000 connections (1-2 s)."""
    http = free_port()
    rng = random.Random(1)
    counters = fuzz.Counters()
    with ServeProcess(tmp_path / "data", "--mqtt-port", str(free_port()), "--ws-port", "0", "--namesrv-port", "0",
                      "--broker-port", "0", "--grpc-port", "0", "--http-port", str(http)) as server:
        deadline = time.monotonic() + 8
        n = 0
        while n < 12_000 and time.monotonic() < deadline:
            n += 1
            fuzz.one_connection(rng, "http", http, counters, 8)
            assert server.proc.poll() is None, f"the server died after {n} connections:\n{server.output()[-3000:]}"
        with socket.create_connection(("127.0.0.1", http), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            s.settimeout(10)
            assert s.recv(12).startswith(b"HTTP/1.1 200")
        assert "Traceback" not in server.output()
