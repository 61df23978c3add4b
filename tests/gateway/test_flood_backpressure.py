"""MQTT edge flow control under a publish flood (issue 14, "Flow control",
MQTT edge): the gateway holds publishers back with TCP rather than
buffering their input.

A real ``mqgate serve`` subprocess with ``flushDiskType = SYNC_FLUSH``, so
the store (fsync per group commit) is slower than the publishers can write.
Four raw-socket MQTT 5 publishers each push 48 MB of QoS 0 PUBLISHes as
fast as their sockets take them. Each connection's reader decodes one read
(at most 64 KB), stores the batch and only then reads again, so what the
gateway holds per publisher is one read; the rest waits in the kernel's
socket buffers and then in the publishers' own ``sendall`` (TCP
back-pressure). Meanwhile a fifth client keeps doing QoS 1 round trips on
another topic.

Checked: the gateway's anonymous memory (``RssAnon``: the commit log's
mapped pages are file-backed and not counted) grows by far less than what
the publishers wrote; every round trip of the other client completes. The
figures are printed (``-s``), never compared with a speed.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from serve_process import ServeProcess, free_port

from gateway.mqtt import ConnAck, Connect, PubAck, Publish, SubAck, Subscribe, Subscription, decode_all, encode

PUBLISHERS = 4
PER_PUBLISHER = 48 << 20
GROWTH_BOUND = 64 << 20  # what the gateway may hold beyond its start: far less than 4 x 48 MB
ROUND_TRIP_TIMEOUT = 30.0  # a liveness bound on a loaded 2-core machine, not a speed


def rss_anon(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc")


def connect(port: int, client_id: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=ROUND_TRIP_TIMEOUT)
    s.sendall(encode(Connect(protocol_version=5, client_id=client_id, clean_start=True), 5))
    assert isinstance(read_packet(s), ConnAck)
    return s


def read_packet(s: socket.socket, buf: bytearray | None = None):
    """One packet (enough for this test's small answers)."""
    buf = bytearray() if buf is None else buf
    while True:
        if len(buf) >= 2:
            length, mult, i = 0, 1, 1
            while i < len(buf):
                length += (buf[i] & 0x7F) * mult
                mult *= 128
                if not buf[i] & 0x80:
                    break
                i += 1
            else:
                i = None
            if i is not None and len(buf) >= i + 1 + length:
                packet = bytes(buf[: i + 1 + length])
                del buf[: i + 1 + length]
                return decode_all(packet, 5)[0]
        data = s.recv(65536)
        assert data, "the gateway closed the connection"
        buf += data


def test_a_publish_flood_is_held_back_by_tcp_and_others_keep_working(tmp_path):
    cfg = tmp_path / "mqgate.toml"
    cfg.write_text('[broker]\nflushDiskType = "SYNC_FLUSH"\n')
    with ServeProcess(tmp_path / "data", "--config", str(cfg), "--mqtt-port", str(free_port()), "--ws-port", "0",
                      "--namesrv-port", "0", "--broker-port", "0") as server:
        port, pid = server.ports["mqtt-tcp"], server.proc.pid
        other = connect(port, "other")
        other.sendall(encode(Subscribe(packet_id=1, subscriptions=[Subscription(topic_filter="calm/t", qos=1)]), 5))
        assert isinstance(read_packet(other), SubAck)
        base = rss_anon(pid)
        peak = base
        errors: list[BaseException] = []
        written = [0] * PUBLISHERS
        chunk = b"".join(encode(Publish(topic=f"flood/{i}", payload=os.urandom(16384), qos=0), 5) for i in range(16))

        def flood(i: int) -> None:
            try:
                s = connect(port, f"flood-{i}")
                while written[i] < PER_PUBLISHER:
                    s.sendall(chunk)
                    written[i] += len(chunk)
                s.close()
            except BaseException as e:  # noqa: BLE001 - reported by the test
                errors.append(e)

        threads = [threading.Thread(target=flood, args=(i,)) for i in range(PUBLISHERS)]
        started = time.monotonic()
        for t in threads:
            t.start()
        trips, slowest, buf = 0, 0.0, bytearray()
        while any(t.is_alive() for t in threads):
            t0 = time.monotonic()
            trips += 1
            other.sendall(encode(Publish(topic="calm/t", payload=b"%d" % trips, qos=1, packet_id=trips % 65535 + 1), 5))
            got = [read_packet(other, buf) for _ in range(2)]  # its PUBACK and the delivery, in either order
            assert {type(p) for p in got} == {PubAck, Publish}, got
            delivery = next(p for p in got if isinstance(p, Publish))
            assert delivery.payload == b"%d" % trips
            other.sendall(encode(PubAck(packet_id=delivery.packet_id), 5))
            slowest = max(slowest, time.monotonic() - t0)
            peak = max(peak, rss_anon(pid))
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        assert not errors, errors
        total = sum(written)
        print(f"\nflood: {PUBLISHERS} publishers wrote {total >> 20} MB of QoS 0 in {elapsed:.1f} s; gateway RssAnon "
              f"{base >> 20} MB at start, peak {peak >> 20} MB (+{(peak - base) >> 20} MB); other client: {trips} "
              f"QoS 1 round trips, slowest {slowest:.2f} s")
        assert total >= PUBLISHERS * PER_PUBLISHER
        assert trips >= 1
        assert peak - base < GROWTH_BOUND, f"the gateway held {(peak - base) >> 20} MB of a {total >> 20} MB flood"
