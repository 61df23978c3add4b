"""A token bucket: a client's publish quota (``maxPublishRate``) and the listeners' accept rate (``maxConnectionRate``).

Rules kept here:
- The bucket holds at most one second's worth of messages (``rate``), and
  starts full: a client may publish ``rate`` messages at once, then ``rate``
  per second.
- ``take`` never waits: it says whether one more message is within the
  quota (MQTT 5 clients are told 0x97 Quota exceeded for one that is not).
- ``wait`` takes ``n`` messages and sleeps off any debt first, so a client
  that cannot be told (MQTT 3.1.1) is slowed down: while its reader sleeps,
  its socket is not read and TCP pushes back. Nothing is dropped.
- Time is trio's clock, so tests can run it under an autojump clock.
"""

from __future__ import annotations

import trio


class PublishQuota:
    __slots__ = ("rate", "_tokens", "_at")

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._tokens = float(rate)
        self._at = trio.current_time()

    def _refill(self) -> None:
        now = trio.current_time()
        self._tokens = min(float(self.rate), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def take(self) -> bool:
        """Whether one more message is within the quota (and count it if so)."""
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    async def wait(self, n: int) -> None:
        """Count ``n`` messages, first sleeping until the bucket can pay for them."""
        self._refill()
        self._tokens -= n
        if self._tokens < 0:
            await trio.sleep(-self._tokens / self.rate)
