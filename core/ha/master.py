"""`HAService`: a master's side of RocketMQ 4.x replication (reference 8).

It listens on ``haListenPort``; each slave that connects reports its log end
and gets the master's commit log streamed from there, in frames of at most
``haTransferBatchSize`` bytes, an empty frame after
``haSendHeartbeatInterval`` of idleness.

Rules kept:
- A link starts at the slave's first report: its log end, or, for a slave
  with an empty log (report 0), the start of the master's log (4.x starts
  at its last segment; we send everything still kept, so a new slave holds
  every message the master holds).  A slave that reports an offset the
  master cannot serve (past its end: a diverged log; before its start:
  deleted by retention) gets nothing and is not counted as in sync.
- The acknowledged offset of a link only grows with the slave's reports;
  `acked_offset` is the highest over the links (4.x ``push2SlaveMaxOffset``).
- `wait_replicated` (SYNC_MASTER, `core.broker.Replicator`): None when no
  slave is fit (none connected, or the best is more than
  ``haSlaveFallbehindMax`` behind: SLAVE_NOT_AVAILABLE), True once a slave
  holds the log up to the offset, False at the deadline
  (FLUSH_SLAVE_TIMEOUT).  Concurrent waiters share the links' reports: one
  report wakes every waiter it covers (group transfer).
- A link silent for ``haHousekeepingInterval`` is closed; one broken link
  never disturbs another.  Every send and receive is bounded in time.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import trio

from core.store import LatencyHistogram, MessageStore, ReplicaError

from .wire import HAProtocolError, ReportDecoder, encode_frame

log = logging.getLogger("mqgate.ha.master")


@dataclass(eq=False)
class SlaveLink:
    """One connected slave, as the master sees it."""

    addr: str
    acked: int = -1  # last reported log end; -1 before the first report
    next_offset: int = -1  # where the next frame starts
    sent_end: int = -1  # the end of what has been handed to the socket (set before the send)
    connected_at: float = field(default_factory=time.time)
    last_report: float = field(default_factory=time.monotonic)
    servable: bool = True  # False: its offset is outside what the master holds

    def lag(self, master_end: int) -> int:
        return max(0, master_end - max(self.acked, 0))


class HAService:
    def __init__(self, store: MessageStore, *, batch_size: int = 32 * 1024, heartbeat_s: float = 5.0,
                 housekeeping_s: float = 20.0, fallbehind_max: int = 256 * 1024 * 1024):
        self.store = store
        self.batch_size = batch_size
        self.heartbeat_s = heartbeat_s
        self.housekeeping_s = housekeeping_s
        self.fallbehind_max = fallbehind_max
        self.links: set[SlaveLink] = set()
        self._written = trio.Event()
        self._acked = trio.Event()
        self.port: int | None = None
        self.confirmed = 0  # highest end offset a SYNC wait saw replicated (the controller publishes it)
        self.latency = LatencyHistogram()  # seconds of each SYNC_MASTER wait that a slave confirmed (/metrics)

    @classmethod
    def from_config(cls, store: MessageStore, config) -> "HAService":
        """Built from a `core.broker.BrokerConfig`'s HA keys."""
        return cls(store, batch_size=config.ha_transfer_batch_size, heartbeat_s=config.ha_send_heartbeat_interval / 1000,
                   housekeeping_s=config.ha_housekeeping_interval / 1000, fallbehind_max=config.ha_slave_fallbehind_max)

    # ---------------------------------------------------------------- state

    @property
    def acked_offset(self) -> int:
        """The highest log end a servable slave reported (``push2SlaveMaxOffset``); -1 if none."""
        return max((link.acked for link in self.links if link.servable), default=-1)

    def slave_ok(self) -> bool:
        """4.x ``isSlaveOK``: a slave is connected and not too far behind."""
        acked = self.acked_offset
        return acked >= 0 and self.store.max_phy_offset - acked < self.fallbehind_max

    def notify_written(self, *_args) -> None:
        """The log grew: wake the links' writers (a dispatch listener; trio thread)."""
        self._written.set()

    def status(self) -> list[dict]:
        end = self.store.max_phy_offset
        return [{"addr": link.addr, "ackedOffset": link.acked, "lagBytes": link.lag(end), "inSync": link.servable
                 and link.acked >= 0 and end - link.acked < self.fallbehind_max,
                 "connectedSince": int(link.connected_at * 1000)} for link in sorted(self.links, key=lambda x: x.addr)]

    async def wait_replicated(self, end_offset: int, deadline: float) -> bool | None:
        if not self.slave_ok():
            await trio.lowlevel.checkpoint()
            return None
        self._written.set()  # entries with no queue unit (markers, halves) are not announced
        started = time.perf_counter()
        with trio.move_on_at(deadline):
            while self.acked_offset < end_offset:
                event = self._acked
                await event.wait()
            self.confirmed = max(self.confirmed, end_offset)
            self.latency.observe(time.perf_counter() - started)
            return True
        return False

    # ---------------------------------------------------------------- serving

    async def serve(self, host: str | None, port: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Listen for slaves until cancelled; reports the bound port."""
        listeners = await trio.open_tcp_listeners(port, host=host or None)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(self._serve_link, listeners, handler_nursery=nursery)

    async def _serve_link(self, stream: trio.SocketStream) -> None:
        try:
            peer = stream.socket.getpeername()
        except OSError:  # gone before it was served (ENOTCONN): not a reason to stop serving the others
            await trio.aclose_forcefully(stream)
            return
        link = SlaveLink(f"{peer[0]}:{peer[1]}")
        self.links.add(link)
        log.info("slave %s connected", link.addr)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guard, self._read_reports, stream, link, nursery.cancel_scope)
                nursery.start_soon(self._guard, self._transfer, stream, link, nursery.cancel_scope)
        finally:
            self.links.discard(link)
            self._wake_waiters()
            with trio.move_on_after(1) as cs:
                cs.shield = True
                await stream.aclose()

    async def _guard(self, fn, stream: trio.SocketStream, link: SlaveLink, scope: trio.CancelScope) -> None:
        """Run one side of a link; any end of it (the peer's or a rule broken) closes the whole link, logged once."""
        try:
            await fn(stream, link)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError, HAProtocolError,
                ReplicaError) as e:
            if not scope.cancel_called:
                log.warning("slave %s link closed: %s", link.addr, e)
        finally:
            scope.cancel()

    async def _read_reports(self, stream: trio.SocketStream, link: SlaveLink) -> None:
        decoder = ReportDecoder()
        while True:
            with trio.move_on_after(self.housekeeping_s) as timeout:
                data = await stream.receive_some(4096)
            if timeout.cancelled_caught:
                raise HAProtocolError(f"no report for {self.housekeeping_s:.0f} s")
            if not data:
                raise trio.BrokenResourceError("the slave closed the link")
            offset = decoder.receive_data(data)
            if offset is None:
                continue
            link.last_report = time.monotonic()
            if link.acked < 0:
                self._first_report(link, offset)
            elif link.servable and offset > link.sent_end:
                # an honest slave reports only what it received: taking this as
                # replicated would let a SYNC_MASTER acknowledge bytes no slave has
                raise HAProtocolError(f"slave reported offset {offset}, beyond the {link.sent_end} sent to it")
            if offset > link.acked:
                link.acked = offset
                self._wake_waiters()

    def _first_report(self, link: SlaveLink, offset: int) -> None:
        store = self.store
        start = offset if offset else store.min_phy_offset
        if not store.min_phy_offset <= start <= store.max_phy_offset:
            link.servable = False
            log.error("slave %s reports offset %d, outside this master's log %d..%d: it is not served "
                      "(a diverged or stale slave; truncate or empty its store)", link.addr, offset,
                      store.min_phy_offset, store.max_phy_offset)
        link.next_offset = link.sent_end = start

    def _wake_waiters(self) -> None:
        self._acked.set()
        self._acked = trio.Event()

    async def _transfer(self, stream: trio.SocketStream, link: SlaveLink) -> None:
        while link.next_offset < 0:  # the first report says where to start
            await trio.sleep(0.01)
        last_sent = time.monotonic()
        while True:
            data = self.store.read_log(link.next_offset, self.batch_size) if link.servable else b""
            if data:
                link.sent_end = link.next_offset + len(data)  # before: the slave may answer before send_all returns
                with trio.fail_after(self.housekeeping_s):
                    await stream.send_all(encode_frame(link.next_offset, data))
                link.next_offset += len(data)
                last_sent = time.monotonic()
                continue
            written = self._written
            if written.is_set():
                self._written = written = trio.Event()
                continue  # re-read: the event may be for bytes this link has not sent yet
            idle = time.monotonic() - last_sent
            if idle >= self.heartbeat_s:
                with trio.fail_after(self.housekeeping_s):
                    await stream.send_all(encode_frame(link.next_offset))
                last_sent = time.monotonic()
                continue
            with trio.move_on_after(min(self.heartbeat_s - idle, 1.0)):
                await written.wait()
