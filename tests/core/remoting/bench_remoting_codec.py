"""Micro-benchmark of the remoting codec (not collected by pytest).

Run: .venv/bin/python tests/core/remoting/bench_remoting_codec.py

A typical SEND_MESSAGE request (C++ style: code 10, long field names, 100-byte
body) and its response, encoded and decoded in both serialize types; the
decoder is fed 100 frames per receive_data call, as from one socket read.
Prints one JSON line of frames/s.
"""

import json
import time

from core.remoting import (
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    encode_frame,
)


def send_request(stype: SerializeType) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE,
        {"producerGroup": "please_rename_unique_group_name", "topic": "TopicTest",
         "defaultTopic": "TBW102", "defaultTopicQueueNums": 4, "queueId": 2,
         "sysFlag": 0, "bornTimestamp": 1700000000000, "flag": 0,
         "properties": "KEYS\x01order-17\x02UNIQ_KEY\x017F0000012A3B18B4AAC2\x02WAIT\x01true\x02TAGS\x01TagA\x02",
         "reconsumeTimes": 0, "unitMode": False, "batch": False},
        body=b"m" * 100, opaque=1234, serialize_type=stype,
    )


def rate(fn, n: int) -> float:
    start = time.perf_counter()
    fn(n)
    return n / (time.perf_counter() - start)


def main() -> None:
    out = {}
    for stype in SerializeType:
        req = send_request(stype)
        resp = req.make_response(ResponseCode.SUCCESS, ext={
            "msgId": "0A00000100002A9F0000000000001234", "queueId": 2,
            "queueOffset": 17, "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})
        batch = encode_frame(req) * 100

        def enc(n, cmd=req):
            for _ in range(n):
                encode_frame(cmd)

        def enc_resp(n, cmd=resp):
            for _ in range(n):
                encode_frame(cmd)

        def dec(n):
            d = FrameDecoder()
            for _ in range(n // 100):
                d.receive_data(batch)
                for _ in d.frames():
                    pass

        name = stype.name.lower()
        out[f"{name}_header_bytes"] = len(encode_frame(req)) - 8 - 100
        out[f"{name}_encode_request_per_s"] = round(rate(enc, 30000))
        out[f"{name}_encode_response_per_s"] = round(rate(enc_resp, 30000))
        out[f"{name}_decode_request_per_s"] = round(rate(dec, 30000))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
