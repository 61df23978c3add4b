"""The trace record layout as RocketMQ's Java ``TraceDataEncoder`` reads it, written out
field by field, independent of ``core.trace``: the tests judge our encoder with it.

Java splits with ``String.split``, which drops trailing empty strings; `java_split`
does the same, so a record that Java would read short is read short here too.
"""

CONTENT = "\x01"
FIELD = "\x02"


def java_split(text: str, sep: str) -> list[str]:
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts or [""]


def read(data: str) -> list[dict]:
    """Each record as a dict of the reference field names (Java's decoder's indexes)."""
    out = []
    for chunk in java_split(data, FIELD):
        line = java_split(chunk, CONTENT)
        kind = line[0]
        if kind == "Pub":
            rec = dict(type=kind, timeStamp=int(line[1]), regionId=line[2], groupName=line[3], topic=line[4],
                       msgId=line[5], tags=line[6], keys=line[7], storeHost=line[8], bodyLength=int(line[9]),
                       costTime=int(line[10]), msgType=int(line[11]))
            assert 0 <= rec["msgType"] <= 4
            if len(line) == 13:
                rec["success"] = line[12] == "true"
            else:
                rec.update(offsetMsgId=line[12], success=line[13] == "true")
            if len(line) >= 15:
                rec["clientHost"] = line[14]
        elif kind == "SubBefore":
            rec = dict(type=kind, timeStamp=int(line[1]), regionId=line[2], groupName=line[3], requestId=line[4],
                       msgId=line[5], retryTimes=int(line[6]), keys=line[7])
        elif kind == "SubAfter":
            rec = dict(type=kind, requestId=line[1], msgId=line[2], costTime=int(line[3]), success=line[4] == "true",
                       keys=line[5])
            if len(line) >= 7:
                rec["contextCode"] = int(line[6])
            if len(line) >= 9:
                rec.update(timeStamp=int(line[7]), groupName=line[8])
        elif kind == "EndTransaction":
            rec = dict(type=kind, timeStamp=int(line[1]), regionId=line[2], groupName=line[3], topic=line[4],
                       msgId=line[5], tags=line[6], keys=line[7], storeHost=line[8], msgType=int(line[9]),
                       transactionId=line[10], transactionState=line[11], fromTransactionCheck=line[12] == "true")
            assert rec["transactionState"] in ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW")
        else:
            continue
        out.append(rec)
    return out
