"""END_TRANSACTION (37): a producer commits or rolls back a half message.

Reference 2.1, 7 (``EndTransactionProcessor``). Rules kept here:

- Java, C++ and Go send it **oneway**; a request that expects an answer
  (ours, or any other) gets one, the same as Java would build.
- Header: producerGroup*, tranStateTableOffset*, commitLogOffset*,
  commitOrRollback* (8 commit, 12 rollback, 0 unknown), fromTransactionCheck,
  msgId*, transactionId; the remark may carry the producer's note.
- A slave answers SLAVE_NOT_AVAILABLE. Unknown (0) changes nothing: the
  half stays for checking (answered SUCCESS); any other value is a
  SYSTEM_ERROR.
- The half is looked up by commitLogOffset (the offset msgId's offset); it
  must be in RMQ_SYS_TRANS_HALF_TOPIC, and its PGROUP, its queue offset
  (tranStateTableOffset) and its commit-log offset must match, each failure
  a SYSTEM_ERROR with Java's remark. Commit and rollback themselves are
  `core.transactions.TransactionService.end_transaction`; ending a
  transaction that already ended does nothing and is answered SUCCESS.
"""

from __future__ import annotations

import logging

from core.broker import TRANS_HALF_TOPIC, BrokerRole
from core.processors.context import BrokerContext
from core.remoting import RemotingCommand, ResponseCode
from core.remoting.server import Channel
from core.store.message import (
    PROPERTY_PGROUP, TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE, MessageFormatError,
    decode_message,
)
from core.transactions import TransactionService

__all__ = ["end_transaction_route"]

log = logging.getLogger("mqgate.processors.transactions")


def end_transaction_route(service: TransactionService):
    async def end_transaction(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = req.get_str("producerGroup")
        table_offset = req.get_long("tranStateTableOffset")
        log_offset = req.get_long("commitLogOffset")
        kind = req.get_int("commitOrRollback")
        from_check = req.get_bool("fromTransactionCheck", False)
        req.get_str("msgId")
        if ctx.broker.config.broker_role is BrokerRole.SLAVE:
            return req.make_response(ResponseCode.SLAVE_NOT_AVAILABLE, "the broker is a slave, it ends no transaction")
        if kind == TRANSACTION_NOT_TYPE:
            if from_check:
                log.info("producer %s answered a check with UNKNOWN (group %s, half %d)%s", channel.remote, group,
                         table_offset, f": {req.remark}" if req.remark else "")
            return req.make_response(ResponseCode.SUCCESS, "the transaction state is unknown; it will be checked")
        if kind not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"illegal commitOrRollback {kind}")
        raw = await ctx.broker.read_at(log_offset)
        try:
            half = decode_message(raw) if raw is not None else None
        except MessageFormatError:
            half = None
        if half is None or half.topic != TRANS_HALF_TOPIC:
            return req.make_response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        if half.properties.get(PROPERTY_PGROUP) != group:
            return req.make_response(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if half.queue_offset != table_offset:
            return req.make_response(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        if half.physical_offset != log_offset:
            return req.make_response(ResponseCode.SYSTEM_ERROR, "The commit log offset wrong")
        commit = kind == TRANSACTION_COMMIT_TYPE
        if from_check or not commit:
            log.info("producer %s %s transaction of half %d (group %s)%s%s", channel.remote,
                     "commits" if commit else "rolls back", table_offset, group,
                     " after a check" if from_check else "", f": {req.remark}" if req.remark else "")
        result = await service.end_transaction(half, commit)
        if result is None or result.ok:
            return req.make_response(ResponseCode.SUCCESS)
        return req.make_response(result.status.code, result.remark or result.status.name)

    return end_transaction
