"""Transactions for RocketMQ 5 producers, over the broker's one
`core.transactions.TransactionService`.

Rules kept here:
- A 5.x transactional send is a half of that service (``wire.to_store``
  sets ``TRAN_MSG`` and ``PGROUP`` = `wire.transaction_group` of the topic);
  its transaction id is the half's offset message id, by which
  EndTransaction finds it, as 4.x END_TRANSACTION does by commitLogOffset.
- EndTransaction checks that the half is one (in the half topic), of that
  message id and topic; UNSPECIFIED changes nothing (it will be checked).
- A check reaches a producer as a RecoverOrphanedTransactionCommand on its
  Telemetry stream (`TelemetryChannel`), whose transaction id is the check
  copy's offset id; the producer's EndTransaction with it ends the one
  transaction (the service knows copies by their origin).
"""

from __future__ import annotations

import logging

import trio

from core.broker import TRANS_HALF_TOPIC, Broker
from core.store.message import (
    PROPERTY_UNIQ_KEY, MessageFormatError, decode_message, decode_messages, parse_offset_msg_id,
)

from . import pb, wire
from .wire import WireError

log = logging.getLogger("mqgate.proxy")


async def end_transaction(broker: Broker, transactions, req: pb.EndTransactionRequest) -> None:
    """Commit or roll back the half named by ``req``, or raise `WireError`."""
    if transactions is None:
        raise WireError(pb.UNSUPPORTED, "this broker runs no transaction service (--broker-port 0)")
    if req.resolution == pb.TRANSACTION_RESOLUTION_UNSPECIFIED:
        await trio.lowlevel.checkpoint()  # unknown: the half stays and is checked again
        return
    try:
        _, log_offset = parse_offset_msg_id(req.transaction_id)
    except ValueError:
        raise WireError(pb.INVALID_TRANSACTION_ID, f"transaction id {req.transaction_id[:60]!r} is not one "
                                                   f"this broker issued") from None
    raw = await broker.read_at(log_offset)
    try:
        half = decode_message(raw) if raw is not None else None
    except MessageFormatError:
        half = None
    if half is None or half.topic != TRANS_HALF_TOPIC:
        raise WireError(pb.INVALID_TRANSACTION_ID, f"no half message at transaction id {req.transaction_id}")
    if half.properties.get(PROPERTY_UNIQ_KEY) != req.message_id:
        raise WireError(pb.INVALID_TRANSACTION_ID, f"transaction {req.transaction_id} is not the one of "
                                                   f"message {req.message_id}")
    if half.properties.get(wire.REAL_TOPIC) != req.topic.name:
        raise WireError(pb.INVALID_TRANSACTION_ID, f"transaction {req.transaction_id} is not in topic "
                                                   f"{req.topic.name}")
    commit = req.resolution == pb.COMMIT
    if req.source == pb.SOURCE_SERVER_CHECK or not commit:
        log.info("5.x producer %s transaction %s%s", "commits" if commit else "rolls back", req.message_id,
                 " after a check" if req.source == pb.SOURCE_SERVER_CHECK else "")
    result = await transactions.end_transaction(half, commit)
    if result is not None and not result.ok:
        raise WireError(pb.INTERNAL_SERVER_ERROR, result.remark or result.status.name)


class TelemetryChannel:
    """One client's Telemetry stream, as the transaction checker sees a producer:
    ``closed`` and ``send_oneway(command)``; the remoting CHECK_TRANSACTION_STATE
    command becomes a RecoverOrphanedTransactionCommand, put on the stream's
    queue (``push``, thread-safe) that the gRPC thread writes from."""

    def __init__(self, push) -> None:
        self.push = push
        self.closed = False

    def send_oneway(self, command) -> None:
        if self.closed:
            return
        half = decode_messages(command.body)[0]
        recover = pb.RecoverOrphanedTransactionCommand(
            message=wire.orphan_from_store(half), transaction_id=command.ext_fields.get("offsetMsgId", ""))
        self.push(pb.TelemetryCommand(recover_orphaned_transaction_command=recover))
