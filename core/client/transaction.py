"""The transactional producer (Java ``TransactionMQProducer``): half message, local transaction, END_TRANSACTION, check-back.

Rules kept here:

- `AsyncTransactionProducer.send_message_in_transaction` sends the message
  as a half: properties ``TRAN_MSG=true``, ``PGROUP=<group>`` and a
  ``UNIQ_KEY`` (the transaction id, set on the caller's message so the
  listener sees it), sysFlag |= 0x4, through SEND_MESSAGE_V2 like every
  send. A ``DELAY`` level or timer property is kept: the broker applies it
  at commit (Java's client drops ``DELAY``).
- After SEND_OK the listener's ``execute_local_transaction(msg, arg)``
  decides; its answer goes to the broker as END_TRANSACTION, **oneway**
  like Java: ``commitLogOffset`` from the offset msgId,
  ``tranStateTableOffset`` = the send's queue offset, ``msgId`` and
  ``transactionId`` = UNIQ_KEY. A send stored with FLUSH_DISK_TIMEOUT,
  FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE is rolled back (Java). A
  listener that raises or answers None means UNKNOWN (the exception goes in
  the remark); the broker will check back. A failed send raises and no
  END_TRANSACTION is sent.
- CHECK_TRANSACTION_STATE (39) from a broker runs
  ``check_local_transaction(msg)`` in its own task; the answer goes back
  to that broker as END_TRANSACTION with ``fromTransactionCheck=true`` and
  the offsets of the check request. A check for another group is ignored.
- A broker can check back only with producers that heartbeated to it, so
  the group is in every heartbeat (as for any producer) and `prepare`
  heartbeats the brokers of given topics before any send (a producer that
  restarts with transactions still open calls it).
- Listener methods may be plain functions or coroutine functions; the
  blocking `TransactionProducer` runs plain ones in worker threads.
"""

from __future__ import annotations

import enum
import inspect
import logging
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, fields
from typing import Any, Awaitable, Protocol

import trio

from core.client.api import MQClientError
from core.client.blocking import _Facade, _LoopThread
from core.client.ids import UniqKeyFactory
from core.client.model import Message, MessageExt, SendResult, SendStatus
from core.client.producer import AsyncProducer
from core.client.instance import run_client
from core.remoting import RemotingCommand, RequestCode
from core.store.message import (
    PROPERTY_PGROUP, PROPERTY_TRAN_MSG, PROPERTY_UNIQ_KEY, TRANSACTION_PREPARED_TYPE, MessageFormatError, decode_message,
    parse_offset_msg_id,
)

__all__ = [
    "AsyncTransactionProducer",
    "LocalTransactionState",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "open_transaction_producer",
]

log = logging.getLogger("mqgate.client.transaction")


class LocalTransactionState(enum.Enum):
    """What a listener answers; the values are END_TRANSACTION's ``commitOrRollback``."""

    COMMIT = 8
    ROLLBACK = 12
    UNKNOWN = 0
    # Java's names
    COMMIT_MESSAGE = 8
    ROLLBACK_MESSAGE = 12
    UNKNOW = 0


_JAVA_STATE = {8: "COMMIT_MESSAGE", 12: "ROLLBACK_MESSAGE", 0: "UNKNOW"}  # trace records name states as Java does


class TransactionListener(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState | Awaitable[LocalTransactionState]: ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState | Awaitable[LocalTransactionState]: ...


@dataclass(frozen=True, slots=True)
class TransactionSendResult(SendResult):
    """A `SendResult` (of the half) and what the local transaction decided."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOWN


async def _ask(fn: Any, *args: Any) -> tuple[LocalTransactionState, BaseException | None]:
    try:
        out = fn(*args)
        if inspect.isawaitable(out):
            out = await out
    except Exception as exc:
        log.warning("transaction listener %s raised %r; the state is UNKNOWN", getattr(fn, "__name__", fn), exc)
        return LocalTransactionState.UNKNOWN, exc
    if out is None:
        return LocalTransactionState.UNKNOWN, None
    return LocalTransactionState(out.value if isinstance(out, enum.Enum) else out), None


class AsyncTransactionProducer(AsyncProducer):
    """An `AsyncProducer` that also sends transactional messages; see the module docstring."""

    def __init__(self, nursery: trio.Nursery, namesrv: str | list[str], group: str,
                 listener: TransactionListener, **options: Any) -> None:
        super().__init__(nursery, namesrv, group, **options)
        self.listener = listener
        self._tx_ids = UniqKeyFactory(self.instance.client_ip)
        self.instance.remoting.handlers[RequestCode.CHECK_TRANSACTION_STATE] = self._on_check
        self.checks_answered = 0

    def _prepare(self, msg: Message) -> tuple[dict[str, str], bytes, int]:
        props, body, sys_flag = super()._prepare(msg)
        if props.get(PROPERTY_TRAN_MSG) == "true":
            sys_flag |= TRANSACTION_PREPARED_TYPE
        return props, body, sys_flag

    async def prepare(self, *topics: str) -> None:
        """Learn the brokers of ``topics`` and heartbeat them now, so their checks can reach this producer."""
        for topic in topics:
            await self.fetch_publish_queues(topic)
        await self.instance.heartbeat()

    async def send_message_in_transaction(self, msg: Message, arg: Any = None, *,
                                          timeout: float | None = None) -> TransactionSendResult:
        """Send ``msg`` as a half, run the local transaction, tell the broker its outcome."""
        props = msg.properties
        props[PROPERTY_TRAN_MSG] = "true"
        props[PROPERTY_PGROUP] = self.group
        props.setdefault(PROPERTY_UNIQ_KEY, self._tx_ids.new())
        result = await self.send(msg, timeout=timeout)
        error: BaseException | None = None
        if result.status is SendStatus.SEND_OK:
            state, error = await _ask(self.listener.execute_local_transaction, msg, arg)
        else:
            state = LocalTransactionState.ROLLBACK
        remark = f"executeLocalTransactionBranch exception: {error!r}" if error is not None else None
        try:
            await self._end_transaction(result, state, remark, msg)
        except Exception as exc:
            log.warning("END_TRANSACTION for %s failed (%s); the broker will check back", result.msg_id, exc)
        return TransactionSendResult(**{f.name: getattr(result, f.name) for f in fields(SendResult)},
                                     local_transaction_state=state)

    async def _end_transaction(self, result: SendResult, state: LocalTransactionState, remark: str | None,
                               msg: Message | None = None) -> None:
        _host, commit_log_offset = parse_offset_msg_id(result.offset_msg_id or result.msg_id)
        addr = await self.instance.find_broker_addr(result.queue.broker_name, result.queue.topic)
        header = {
            "producerGroup": self.group, "tranStateTableOffset": result.queue_offset,
            "commitLogOffset": commit_log_offset, "commitOrRollback": state.value, "fromTransactionCheck": False,
            "msgId": result.msg_id, "transactionId": result.transaction_id or result.msg_id,
        }
        req = RemotingCommand.request(RequestCode.END_TRANSACTION, header, remark=remark)
        await self.instance.remoting.invoke_oneway(addr, req, self.send_timeout)
        if self.tracer is not None and msg is not None:
            self.tracer.on_end_transaction(self.group, msg, result.msg_id, header["transactionId"],
                                           _JAVA_STATE[state.value], addr, False)

    async def _on_check(self, addr: str, cmd: RemotingCommand) -> None:
        try:
            stored = decode_message(cmd.body)
        except MessageFormatError as exc:
            log.warning("CHECK_TRANSACTION_STATE from %s with an unreadable message: %s", addr, exc)
            return None
        group = stored.properties.get(PROPERTY_PGROUP)
        if group != self.group:
            log.info("CHECK_TRANSACTION_STATE from %s for group %s ignored (this producer is %s)", addr, group, self.group)
            return None
        broker_name = next((n for n, a in self.instance.broker_addrs.items() if a == addr), "")
        msg = MessageExt.from_stored(stored, broker_name)
        state, error = await _ask(self.listener.check_local_transaction, msg)
        header = {
            "producerGroup": self.group,
            "tranStateTableOffset": cmd.get_long("tranStateTableOffset", stored.queue_offset),
            "commitLogOffset": cmd.get_long("commitLogOffset", stored.physical_offset),
            "commitOrRollback": state.value, "fromTransactionCheck": True,
            "msgId": stored.properties.get(PROPERTY_UNIQ_KEY) or stored.msg_id,
            "transactionId": cmd.get_str("transactionId", None),
        }
        remark = f"checkLocalTransactionState exception: {error!r}" if error is not None else None
        try:
            await self.instance.remoting.invoke_oneway(
                addr, RemotingCommand.request(RequestCode.END_TRANSACTION, header, remark=remark), self.send_timeout)
            self.checks_answered += 1
            if self.tracer is not None:
                self.tracer.on_end_transaction(self.group, msg, header["msgId"], header["transactionId"],
                                               _JAVA_STATE[state.value], addr, True)
        except Exception as exc:
            log.warning("answering the check of %s to %s failed: %s", msg.msg_id, addr, exc)
        return None


def open_transaction_producer(namesrv: str | list[str], group: str, listener: TransactionListener,
                              **options: Any) -> AbstractAsyncContextManager[AsyncTransactionProducer]:
    """``async with open_transaction_producer(ns, "PG", listener) as p: await p.send_message_in_transaction(msg)``."""
    return run_client(lambda nursery: AsyncTransactionProducer(nursery, namesrv, group, listener, **options))


class _ThreadedListener:
    """Plain listener methods run in worker threads, so a slow one does not stall the loop."""

    def __init__(self, listener: TransactionListener) -> None:
        self._listener = listener

    async def _call(self, fn: Any, *args: Any) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(*args)
        return await trio.to_thread.run_sync(fn, *args)

    async def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
        return await self._call(self._listener.execute_local_transaction, msg, arg)

    async def check_local_transaction(self, msg: MessageExt) -> Any:
        return await self._call(self._listener.check_local_transaction, msg)


class TransactionProducer(_Facade):
    """Blocking facade: ``p = TransactionProducer(ns, "PG", listener).start(); p.send_message_in_transaction(msg)``."""

    _CLIENT = "_p"

    def __init__(self, namesrv: str | list[str], group: str, listener: TransactionListener, **options: Any) -> None:
        if listener is None:
            raise MQClientError("a transaction producer needs a listener")
        self.namesrv, self.group, self.listener, self.options = namesrv, group, listener, options
        self._loop: _LoopThread | None = None
        self._p: AsyncTransactionProducer | None = None

    def start(self) -> "TransactionProducer":
        self._loop = _LoopThread(f"mqgate-tx-producer-{self.group}")

        async def start() -> AsyncTransactionProducer:
            p = AsyncTransactionProducer(self._loop.nursery, self.namesrv, self.group,
                                         _ThreadedListener(self.listener), **self.options)
            await p.start()
            return p

        try:
            self._p = self._loop.run(start)
        except BaseException:
            self._loop.stop()
            self._loop = None
            raise
        return self

    def _need(self) -> tuple[_LoopThread, AsyncTransactionProducer]:
        if self._loop is None or self._p is None:
            raise RuntimeError("call start() first")
        return self._loop, self._p

    def prepare(self, *topics: str) -> None:
        loop, p = self._need()
        loop.run(p.prepare, *topics)

    def send_message_in_transaction(self, msg: Message, arg: Any = None, **kwargs: Any) -> TransactionSendResult:
        loop, p = self._need()
        return loop.run(p.send_message_in_transaction, msg, arg, **kwargs)

    def send(self, msg: Message, **kwargs: Any) -> SendResult:
        loop, p = self._need()
        return loop.run(p.send, msg, **kwargs)

