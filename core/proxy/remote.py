"""Light queues of other broker groups, read over remoting: how a lite consumer
connected to this broker also gets the lite messages a producer sent to
another group of the parent topic (each group stores and multi-dispatches
the lite messages it receives; the consumer subscribes and receives here).

Rules kept here:
- A remote light queue is popped here like a local one: its pop state
  lives in this broker's `PopTable` under (group, light queue, `queue_id`
  of the remote group), so receipt handles name the group, acks and
  invisible-time changes need no remote call, and the state is saved and
  replicated with the rest. A light queue has only queue 0 in its own
  store: a pop key with another queue id is always a remote one.
- Reads are PULL_MESSAGE without suspension, filter ``*``: a light queue
  holds no gaps, so the n-th message of an answer from offset o is at o+n.
- A group that does not answer (or errs) gives nothing this time; it costs
  at most ``timeout`` seconds, and the receive goes on with the others.
"""

from __future__ import annotations

import logging
import zlib

import trio

from core.broker import PullStatus
from core.broker.results import PullResult
from core.client.api import ClientApi, MQClientError
from core.client.model import MessageQueue
from core.remoting.client import RemotingConnectionError, RemotingTimeoutError

log = logging.getLogger("mqgate.proxy")

_ERRORS = (MQClientError, RemotingConnectionError, RemotingTimeoutError, OSError, trio.TooSlowError)


def remote_queue_id(broker_name: str) -> int:
    """The pop key's queue id for another group's light queues (never 0: that is ours)."""
    return 1 + zlib.crc32(broker_name.encode()) % 999_983


class RemoteQueues:
    def __init__(self, api: ClientApi | None, timeout: float = 1.0) -> None:
        self.api = api
        self.timeout = timeout

    async def pull(self, addr: str, broker_name: str, group: str, queue: str, offset: int, count: int) -> PullResult:
        """Up to ``count`` messages of light queue ``queue`` of the master at ``addr`` from ``offset``."""
        if self.api is None:
            return PullResult(PullStatus.SERVICE_NOT_AVAILABLE, remark="no remoting client")
        try:
            with trio.fail_after(self.timeout):
                resp = await self.api.pull(addr, group, MessageQueue(queue, broker_name, 0), offset, count,
                                           subscription="*", sub_version=0, commit_offset=None, suspend_ms=0,
                                           timeout=self.timeout)
        except _ERRORS as e:
            log.debug("light queue %s of %s (%s) not read: %s", queue, broker_name, addr, e)
            return PullResult(PullStatus.SERVICE_NOT_AVAILABLE, remark=str(e))
        try:
            status = PullStatus(resp.code)
        except ValueError:
            return PullResult(PullStatus.SYSTEM_ERROR, remark=f"pull answered {resp.code}")
        result = PullResult(status, next_begin_offset=resp.next_begin_offset, min_offset=resp.min_offset,
                            max_offset=resp.max_offset)
        if status is PullStatus.FOUND and resp.body:
            result.entries = [resp.body]
            result.queue_offsets = [offset + i for i in range(len(result.messages()))]
        return result
