"""`Pending`: the in-memory deliveries a session holds back for the window."""

from __future__ import annotations

from gateway.mapping import Outbound
from gateway.sessions import Delivery, Pending


def _delivery(payload: bytes) -> Delivery:
    return Delivery(Outbound("t", payload, 0, False, None, 0, None, {}), 0, False, ())


def test_pending_counts_items_and_bytes_in_order():
    p = Pending()
    assert not p and len(p) == 0 and list(p) == [] and p.bytes == 0
    a, b = _delivery(b"aa"), _delivery(b"bbb")
    p.append(a)
    p.extend([b])
    assert len(p) == 2 and list(p) == [a, b] and p.bytes == 5
    assert p.popleft() is a and p.bytes == 3
    p.clear()
    assert not p and p.bytes == 0
    p.append(a)  # usable again after clear
    assert list(p) == [a] and p.bytes == 2
