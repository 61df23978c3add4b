"""Lean raw-socket MQTT clients: pre-encoded packets, non-blocking sockets.

These exist so that the generator is not what is measured: a publisher
stamps a payload behind a prefix encoded once, and writes many packets per
``send``; a subscriber parses only what it must and answers acks in one write
per read.

Rules it keeps:

- Connecting is blocking and bounded by a timeout; after that, a client is
  driven by the worker's selector loop through ``fill`` / ``flush`` /
  ``on_data`` and never blocks.
- A publisher never has more than ``inflight`` QoS 1/2 messages unacked, and
  never more than ``count`` messages sent; with a ``rate`` it sends message i
  no earlier than ``start + i / rate``.
- A QoS 2 subscriber records a packet id once until its PUBREL (the broker
  may resend the PUBLISH before that), so only real duplicates are counted.
"""

from __future__ import annotations

import socket
import struct
import time

from . import codec
from .accounting import STAMP, MAGIC, SubscriberLog

_U16 = struct.Struct("!H")
MAX_BUFFERED = 256 * 1024
BATCH = 256


class ConnectError(Exception):
    pass


def open_connection(host: str, port: int, client_id: str, *, version: int,
                    clean: bool = True, keepalive: int = 600,
                    timeout: float = 10.0, receive_maximum: int = 0):
    """A connected socket whose CONNACK said yes, the reader holding any bytes
    that came after the CONNACK, those packets, and the server's Receive
    Maximum (the most QoS 1/2 publishes this client may have unacknowledged)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(codec.connect(client_id, version=version, clean=clean,
                               keepalive=keepalive,
                               session_expiry=0 if clean else 3600,
                               receive_maximum=receive_maximum))
    reader = codec.PacketReader()
    kind, body, rest = expect(sock, reader, codec.CONNACK)
    code = codec.connack_code(body, version)
    if code:
        sock.close()
        raise ConnectError(f"{client_id}: CONNACK refused with code {code}")
    return sock, reader, rest, codec.connack_receive_maximum(body, version)


def expect(sock, reader, kind: int):
    """Read until a packet of ``kind`` arrives: (kind, body, packets after it)."""
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectError(f"connection closed while waiting for packet type {kind}")
        packets = reader.feed(data)
        for i, (k, _flags, body) in enumerate(packets):
            if k == kind:
                return k, body, packets[i + 1:]


class RawPublisher:
    def __init__(self, sock, spec, *, qos: int, payload: int, inflight: int,
                 version: int, start_ns: int, buckets):
        self.sock, self.spec, self.qos = sock, spec, qos
        self.size, self.inflight, self.version = payload, inflight, version
        self.start_ns, self.buckets = start_ns, buckets
        self.count = spec.count
        self.sent = 0
        self.out = bytearray()
        self.unacked: dict[int, int] = {}
        self.next_id = 1
        self.reader = codec.PacketReader()
        topic = spec.topic.encode()
        variable_len = 2 + len(topic) + (2 if qos else 0) + (1 if version == 5 else 0)
        self.head = (bytes([codec.PUBLISH << 4 | qos << 1])
                     + codec.varint(variable_len + payload)
                     + _U16.pack(len(topic)) + topic)
        self.tail = b"\x00" if version == 5 else b""
        self.padding = bytes(max(0, payload - STAMP.size))
        self.closed = False
        self.last_ns = 0

    @property
    def done(self) -> bool:
        if self.closed:  # the broker hung up: what is missing is lost
            return True
        return self.sent >= self.count and not self.unacked and not self.out

    def can_send(self) -> bool:
        """Whether ``fill`` would add a packet now, the rate aside: not closed,
        messages left, room in the buffer and, at QoS 1/2, in the window. A
        publisher whose window is full waits for an ack, not for time."""
        return (not self.closed and self.sent < self.count and len(self.out) <= MAX_BUFFERED
                and (not self.qos or len(self.unacked) < self.inflight))

    def next_due(self, now_ns: int) -> float | None:
        """Seconds until this publisher may send again (None: not waiting on time)."""
        if not self.spec.rate or self.sent >= self.count:
            return None
        due = self.start_ns + int(self.sent * 1e9 / self.spec.rate)
        return max(0.0, (due - now_ns) / 1e9)

    def fill(self, now_ns: int) -> None:
        if self.closed or self.sent >= self.count or len(self.out) > MAX_BUFFERED:
            return
        allowed = self.count - self.sent
        if self.spec.rate:
            allowed = min(allowed, int((now_ns - self.start_ns) * self.spec.rate / 1e9)
                          + 1 - self.sent)
        if self.qos:
            allowed = min(allowed, self.inflight - len(self.unacked))
        allowed = min(allowed, BATCH)
        if allowed <= 0:
            return
        out, pack, pub = self.out, STAMP.pack, self.spec.publisher
        head, tail, padding, qos = self.head, self.tail, self.padding, self.qos
        now = time.monotonic_ns()
        for _ in range(allowed):
            seq = self.sent
            if qos:
                pid = self._packet_id()
                self.unacked[pid] = seq
                out += head + _U16.pack(pid) + tail
            else:
                out += head + tail
            out += pack(MAGIC, pub, seq, now)
            out += padding
            self.sent += 1
        self.buckets.add(now, allowed)
        self.last_ns = now

    def _packet_id(self) -> int:
        pid = self.next_id
        while pid in self.unacked:
            pid = pid % 65535 + 1
        self.next_id = pid % 65535 + 1
        return pid

    def on_data(self, data: bytes, now_ns: int) -> None:
        for kind, _flags, body in self.reader.feed(data):
            if kind in (codec.PUBACK, codec.PUBCOMP):
                self.unacked.pop(codec.packet_id_of(body), None)
            elif kind == codec.PUBREC:
                pid = codec.packet_id_of(body)
                reason = body[2] if len(body) > 2 else 0
                if reason >= 0x80:  # refused: the flow ends here (MQTT 5)
                    self.unacked.pop(pid, None)
                else:
                    self.out += codec.pubrel(pid)


class RawSubscriber:
    def __init__(self, sock, spec, *, version: int, buckets, log: SubscriberLog):
        self.sock, self.spec, self.version = sock, spec, version
        self.buckets, self.log = buckets, log
        self.reader = codec.PacketReader()
        self.out = bytearray()
        self.awaiting_rel: set[int] = set()
        self.arrivals = 0
        self.last_ns = 0
        self.closed = False

    @property
    def done(self) -> bool:
        return self.spec.expected is not None and self.arrivals >= self.spec.expected

    def next_due(self, now_ns: int) -> None:
        return None

    def fill(self, now_ns: int) -> None:
        pass

    def handle(self, packets, now_ns: int) -> None:
        out, log, version = self.out, self.log, self.version
        got = 0
        for kind, flags, body in packets:
            if kind == codec.PUBLISH:
                _topic, qos, pid, payload = codec.parse_publish(flags, body, version)
                if qos == 2:
                    out += codec.pubrec(pid)
                    if pid in self.awaiting_rel:
                        continue
                    self.awaiting_rel.add(pid)
                elif qos == 1:
                    out += codec.puback(pid)
                log.record(payload, now_ns)
                got += 1
            elif kind == codec.PUBREL:
                pid = codec.packet_id_of(body)
                self.awaiting_rel.discard(pid)
                out += codec.pubcomp(pid)
        if got:
            self.arrivals += got
            self.last_ns = now_ns
            self.buckets.add(now_ns, got)

    def on_data(self, data: bytes, now_ns: int) -> None:
        self.handle(self.reader.feed(data), now_ns)


def subscribe(sock, reader, spec, *, qos: int, version: int) -> list:
    """Send SUBSCRIBE and wait for a SUBACK granting every filter; returns
    packets that arrived after the SUBACK."""
    sock.sendall(codec.subscribe(1, [(f, qos) for f in spec.filters], version=version))
    _kind, body, rest = expect(sock, reader, codec.SUBACK)
    codes = bytes(body[2:])
    if version == 5 and codes:
        plen, pos = codec.read_varint(codes, 0)
        codes = codes[pos + plen:]
    if any(c >= 0x80 for c in codes):
        raise ConnectError(f"{spec.client_id}: SUBACK refused {spec.filters}: {codes.hex()}")
    return rest
