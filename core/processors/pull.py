"""PULL_MESSAGE (11), with long polling.

Reference 2.1, 2.4, 2.5 (``PullMessageProcessor``). Rules kept here:

- The route is *spawned*: a suspended pull parks in its own task, so the
  connection keeps serving other requests (C++ pulls every queue of a
  consumer over one connection).
- sysFlag bits: COMMIT_OFFSET (0x1) commits ``commitOffset`` for the group
  (not on a slave, as 4.x);
  SUSPEND (0x2) allows parking for ``suspendTimeoutMillis`` (the broker
  core waits on the queue's dispatch event and re-reads once at the
  deadline); SUBSCRIPTION (0x4) means use this request's ``subscription``,
  otherwise the subscription the group registered by heartbeat is used
  (SUBSCRIPTION_NOT_EXIST if it has none).
- Response: code from the broker's `PullResult` (table of 2.5), header
  ``suggestWhichBrokerId`` (the broker's 4.x rule, see core.broker.pulling), ``nextBeginOffset``, ``minOffset``,
  ``maxOffset`` as strings, remark = the store's GetMessageStatus name,
  body = the stored entries concatenated (IPv4 hosts: what we store for
  IPv4 peers, which C++ 1.2.x requires).
- Never longer than ``suspendTimeoutMillis`` plus the read: clients time
  out at 30 s (Java, C++) and a later answer is wasted.
"""

from __future__ import annotations

from core.processors.context import BrokerContext
from core.remoting import PullSysFlag, RemotingCommand, ResponseCode
from core.remoting.server import Channel

MAX_SUSPEND_MS = 25_000  # below the clients' 30 s socket timeout


async def pull_message(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    group = req.get_str("consumerGroup")
    topic = req.get_str("topic")
    queue_id = req.get_int("queueId")
    offset = req.get_long("queueOffset")
    max_nums = req.get_int("maxMsgNums")
    sys_flag = req.get_int("sysFlag")
    commit_offset = req.get_long("commitOffset")
    suspend_ms = req.get_long("suspendTimeoutMillis")
    expression_type = req.get_str("expressionType", "TAG")
    if sys_flag & PullSysFlag.SUBSCRIPTION:
        subscription = req.get_str("subscription", "*")
    else:
        sub = ctx.clients.subscription(group, topic)
        if sub is None:
            return req.make_response(
                ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's subscription not exist, group: {group}"
            )
        subscription = sub.sub_string
        expression_type = sub.expression_type or "TAG"
    result = await ctx.broker.pull(
        group,
        topic,
        queue_id,
        offset,
        max(1, min(max_nums, 1024)),
        subscription,
        suspend_timeout_ms=min(max(suspend_ms, 0), MAX_SUSPEND_MS) if sys_flag & PullSysFlag.SUSPEND else None,
        commit_offset=commit_offset if sys_flag & PullSysFlag.COMMIT_OFFSET else None,
        expression_type=expression_type,
    )
    if result.status.code not in (0, 19, 20, 21):
        return req.make_response(result.status.code, result.remark or result.status.name)
    return req.make_response(
        result.status.code,
        result.store_status or result.status.name,
        ext={
            "suggestWhichBrokerId": result.suggest_which_broker_id,
            "nextBeginOffset": result.next_begin_offset,
            "minOffset": result.min_offset,
            "maxOffset": result.max_offset,
        },
        body=result.body if result.status.code == 0 else b"",
    )
