"""Request builders shared by the processor tests (the C++ client's header shapes)."""

from core.remoting import RemotingCommand, RequestCode
from core.store.message import encode_properties


def send_req(topic, body, *, tags=None, queue_id=-1, cpp=True, props=None, batch=None):
    p = {"UNIQ_KEY": "X" * 32, "WAIT": "true"}
    if tags:
        p["TAGS"] = tags
    p.update(props or {})
    ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
           "queueId": queue_id, "sysFlag": 0, "bornTimestamp": 1, "flag": 0, "properties": encode_properties(p),
           "reconsumeTimes": 0, "unitMode": "0" if cpp else "false"}
    if batch is not None:
        ext["batch"] = batch
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body)
    return req


def pull_req(topic, queue_id, offset, *, group="G", sub="*", suspend_ms=0, sys_flag=0x4):
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": 32,
        "sysFlag": sys_flag | (0x2 if suspend_ms else 0), "commitOffset": 0, "suspendTimeoutMillis": suspend_ms,
        "subscription": sub, "subVersion": 0})
