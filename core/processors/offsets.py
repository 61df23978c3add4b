"""Consumer offsets and queue offsets: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
GET_EARLIEST_MSG_STORETIME (32).

Reference 2.1 (``ConsumerManageProcessor``, ``AdminBrokerProcessor``).
Rules kept here:

- QUERY_CONSUMER_OFFSET answers the committed offset; a group that never
  committed one gets SUCCESS with 0 when the queue still starts at offset 0
  (so a new group consumes what was sent before it started, as with a Java
  broker while the data is in memory), else 22 QUERY_NOT_FOUND (the client
  then applies its consume-from-where rule).
- A slave answers both and takes UPDATE_CONSUMER_OFFSET (4.x: a consumer
  whose master is gone commits to the slave; its metadata sync keeps such
  keys when it copies the master's table).
- GET_MAX_OFFSET answers the next offset to be assigned (the entry count).
- Every value goes out as a string header field; no bodies.
"""

from __future__ import annotations

from core.processors.context import BrokerContext
from core.remoting import RemotingCommand, ResponseCode
from core.remoting.server import Channel


async def query_consumer_offset(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    group = req.get_str("consumerGroup")
    topic = req.get_str("topic")
    queue_id = req.get_int("queueId")
    offset = ctx.broker.query_offset(group, topic, queue_id)
    if offset is not None and offset >= 0:
        return req.make_response(ResponseCode.SUCCESS, ext={"offset": offset})
    if ctx.broker.min_offset(topic, queue_id) <= 0:
        return req.make_response(ResponseCode.SUCCESS, ext={"offset": 0})
    return req.make_response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")


async def update_consumer_offset(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    ctx.broker.commit_offset(
        req.get_str("consumerGroup"), req.get_str("topic"), req.get_int("queueId"), req.get_long("commitOffset")
    )
    return req.make_response(ResponseCode.SUCCESS)


async def get_max_offset(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    return req.make_response(
        ResponseCode.SUCCESS, ext={"offset": ctx.broker.max_offset(req.get_str("topic"), req.get_int("queueId"))}
    )


async def get_min_offset(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    return req.make_response(
        ResponseCode.SUCCESS, ext={"offset": ctx.broker.min_offset(req.get_str("topic"), req.get_int("queueId"))}
    )


async def search_offset_by_timestamp(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    offset = await ctx.broker.offset_by_time(req.get_str("topic"), req.get_int("queueId"), req.get_long("timestamp"))
    return req.make_response(ResponseCode.SUCCESS, ext={"offset": offset})


async def get_earliest_msg_storetime(ctx: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    ts = await ctx.broker.earliest_store_time(req.get_str("topic"), req.get_int("queueId"))
    return req.make_response(ResponseCode.SUCCESS, ext={"timestamp": ts})
