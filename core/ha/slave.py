"""`HAClient`: a slave's side of RocketMQ 4.x replication (reference 8).

It connects to its master's HA port, reports its log end, and appends every
frame's bytes to its own commit log at the same offsets
(`MessageStore.append_replica`, which dispatches consume queues, session
queues and index from them).

Rules kept:
- A report goes out on connecting, after every read that appended bytes,
  and at least every ``haSendHeartbeatInterval``; what is reported is the
  log's end, so the master resumes there after any reconnect or restart.
- A frame whose offset is not this log's end (when the log is not empty)
  closes the link (4.x: the slave drops a master that disagrees); so does
  a master silent for ``haHousekeepingInterval`` and bytes the store
  refuses.  The link is then opened again after ``retry_s``, from the log's
  end at that time.
- The master's address is asked for at each attempt (``haMasterAddress``,
  or what the name server answered), so a new master is followed.
- One line is logged per outage, not one per attempt.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import trio

from core.store import MessageStore, ReplicaError

from .wire import FrameDecoder, HAProtocolError, encode_report

log = logging.getLogger("mqgate.ha.slave")


class RestartForCut(Exception):
    """The slave's log must be cut before it may follow its master (raised by ``before_link``)."""


class HAClient:
    def __init__(self, store: MessageStore, master_addr: Callable[[], str | None], *, heartbeat_s: float = 5.0,
                 housekeeping_s: float = 20.0, retry_s: float = 1.0, connect_timeout_s: float = 3.0):
        self.store = store
        self.master_addr = master_addr
        self.heartbeat_s = heartbeat_s
        self.housekeeping_s = housekeeping_s
        self.retry_s = retry_s
        self.connect_timeout_s = connect_timeout_s
        self.connected_to: str | None = None
        self.last_frame_at = 0.0  # wall clock, ms resolution for status
        self.frames = 0
        self.links_opened = 0
        self._failing: str | None = None
        # async () -> None, awaited before each link: may raise OSError (try again later)
        # or RestartForCut (stop linking: the broker restarts with its log cut)
        self.before_link = None

    @classmethod
    def from_config(cls, store: MessageStore, master_addr: Callable[[], str | None], config) -> "HAClient":
        return cls(store, master_addr, heartbeat_s=config.ha_send_heartbeat_interval / 1000,
                   housekeeping_s=config.ha_housekeeping_interval / 1000)

    def status(self) -> dict:
        return {"masterHaAddr": self.connected_to or self.master_addr() or "", "connected": self.connected_to is not None,
                "offset": self.store.max_phy_offset, "lastFrameTimestamp": int(self.last_frame_at * 1000)}

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            addr = self.master_addr()
            if addr:
                try:
                    if self.before_link is not None:
                        await self.before_link()
                    await self._link(addr)
                except RestartForCut as e:
                    log.warning("replication from master %s paused: %s", addr, e)
                    await trio.sleep_forever()
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                        HAProtocolError, ReplicaError) as e:
                    reason = f"{addr}: {e}"
                    if self._failing != reason:
                        log.warning("replication from master %s stopped: %s (retrying every %.0f s)", addr, e, self.retry_s)
                        self._failing = reason
                finally:
                    self.connected_to = None
            await trio.sleep(self.retry_s)

    async def _link(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        with trio.fail_after(self.connect_timeout_s):
            stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            store = self.store
            await self._report(stream)
            self.connected_to = addr
            self.links_opened += 1
            if self._failing:
                log.info("replication from master %s resumed at offset %d", addr, store.max_phy_offset)
            self._failing = None
            decoder = FrameDecoder()
            last_report = last_heard = time.monotonic()
            while True:
                now = time.monotonic()
                if now - last_report >= self.heartbeat_s:
                    await self._report(stream)
                    last_report = now
                wait = min(self.heartbeat_s - (now - last_report), self.housekeeping_s - (now - last_heard))
                with trio.move_on_after(max(wait, 0.01)):
                    data = await stream.receive_some(256 * 1024)
                    if not data:
                        raise trio.BrokenResourceError("the master closed the link")
                    last_heard = time.monotonic()
                    decoder.receive_data(data)
                    if self._apply(decoder):
                        await self._report(stream)
                        last_report = time.monotonic()
                if time.monotonic() - last_heard >= self.housekeeping_s:
                    raise HAProtocolError(f"master silent for {self.housekeeping_s:.0f} s")

    def _apply(self, decoder: FrameDecoder) -> bool:
        """Append every complete frame; True if any bytes were appended."""
        store = self.store
        appended = False
        while (frame := decoder.next_frame()) is not None:
            offset, body = frame
            mine = store.max_phy_offset
            if mine and offset != mine:
                raise HAProtocolError(f"master sent offset {offset}, this log ends at {mine}")
            self.frames += 1
            self.last_frame_at = time.time()
            if body:
                store.append_replica(offset, body)
                appended = True
        return appended

    async def _report(self, stream: trio.SocketStream) -> None:
        with trio.fail_after(self.housekeeping_s):
            await stream.send_all(encode_report(self.store.max_phy_offset))
