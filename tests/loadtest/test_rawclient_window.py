"""The raw publisher's window (loadtest/rawclient.py): a QoS 1 publisher
whose window is full cannot send until an ack comes, so the worker's loop
waits for the ack in ``select`` instead of polling without a timeout (a
spin that took CPU from the broker it measured on a 2-core machine)."""

from __future__ import annotations

import socket
import time

from loadtest import codec
from loadtest.accounting import Buckets
from loadtest.rawclient import RawPublisher
from loadtest.scenarios import ClientSpec


def _publisher(qos: int, inflight: int, count: int) -> RawPublisher:
    a, b = socket.socketpair()
    b.close()
    spec = ClientSpec(role="pub", client_id="p", topic="t", count=count)
    return RawPublisher(a, spec, qos=qos, payload=32, inflight=inflight, version=4,
                        start_ns=time.monotonic_ns(), buckets=Buckets(time.monotonic_ns(), 0.1))


def test_a_full_window_waits_for_an_ack():
    pub = _publisher(qos=1, inflight=3, count=10)
    assert pub.can_send()
    pub.fill(time.monotonic_ns())
    assert pub.sent == 3 and len(pub.unacked) == 3
    assert not pub.can_send()  # window full: nothing to send until an ack
    pid = next(iter(pub.unacked))
    pub.on_data(codec.puback(pid), time.monotonic_ns())
    assert pub.can_send()
    pub.fill(time.monotonic_ns())
    assert pub.sent == 4 and not pub.can_send()
    pub.sock.close()


def test_qos0_and_the_last_message():
    pub = _publisher(qos=0, inflight=1, count=5)
    pub.fill(time.monotonic_ns())
    assert pub.sent == 5
    assert not pub.can_send()  # all sent
    pub.sock.close()
