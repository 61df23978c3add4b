"""Remoting frames: byte fixtures, streaming three ways, errors, fuzz, clients."""

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.remoting import (
    FrameDecoder,
    LanguageCode,
    RemotingCommand,
    RemotingProtocolError,
    RequestCode,
    ResponseCode,
    SerializeType,
    decode_frame,
    encode_frame,
    encode_frame_parts,
)

# -- reference section 1.5, byte for byte --------------------------------

JSON_RESPONSE_HEADER = (
    b'{"code":0,"flag":1,"language":"JAVA","opaque":5,'
    b'"serializeTypeCurrentRPC":"JSON","version":395}'
)
JSON_FRAME = bytes.fromhex("00000063 0000005f") + JSON_RESPONSE_HEADER
ROCKETMQ_FRAME = bytes.fromhex(
    "00000021 0100001d 0022 00 018b 00000005 00000000 00000000 00000008"
    " 0001 61 00000001 62"
)
JSON_CMD = RemotingCommand(code=0, version=395, opaque=5, flag=1)
ROCKETMQ_CMD = RemotingCommand(
    code=34, version=395, opaque=5, ext_fields={"a": "b"},
    serialize_type=SerializeType.ROCKETMQ,
)


def test_worked_example_json():
    assert len(JSON_RESPONSE_HEADER) == 95 and len(JSON_FRAME) == 103
    assert encode_frame(JSON_CMD) == JSON_FRAME
    assert decode_frame(JSON_FRAME) == JSON_CMD


def test_worked_example_rocketmq():
    assert encode_frame(ROCKETMQ_CMD) == ROCKETMQ_FRAME
    assert decode_frame(ROCKETMQ_FRAME) == ROCKETMQ_CMD


# -- a mixed stream, decoded whole, byte by byte, with trailing bytes ------

SEND = RemotingCommand.request(
    RequestCode.SEND_MESSAGE_V2,
    {"a": "pg", "b": "TopicTest", "c": "TBW102", "d": 4, "e": 1, "f": 0,
     "g": 1700000000000, "h": 0, "i": "KEYS\x01k1\x02WAIT\x01true\x02", "j": 0,
     "k": False, "l": 16, "m": False},
    body=b"x" * 100, opaque=7,
)
STREAM_CMDS = [
    JSON_CMD,
    ROCKETMQ_CMD,
    SEND,
    SEND.make_response(ResponseCode.SYSTEM_ERROR, remark="ünïcode remark"),
    RemotingCommand(code=40, flag=2, remark="", ext_fields={"consumerGroup": "G"},
                    serialize_type=SerializeType.ROCKETMQ, body=b"\x00\xff"),
]
STREAM = b"".join(encode_frame(c) for c in STREAM_CMDS)


def _expected(cmd):
    # A ROCKETMQ remark "" reads back as None (0-length string = null).
    if cmd.serialize_type == SerializeType.ROCKETMQ and cmd.remark == "":
        return RemotingCommand(**{**_fields(cmd), "remark": None})
    return cmd


def _fields(cmd):
    return {name: getattr(cmd, name) for name in cmd.__dataclass_fields__}


def test_stream_whole():
    dec = FrameDecoder()
    dec.receive_data(STREAM)
    assert list(dec.frames()) == [_expected(c) for c in STREAM_CMDS]
    assert dec.buffered == 0


def test_stream_one_byte_at_a_time():
    dec = FrameDecoder()
    out = []
    for i in range(len(STREAM)):
        dec.receive_data(STREAM[i:i + 1])
        out.extend(dec.frames())
    assert out == [_expected(c) for c in STREAM_CMDS]
    assert dec.buffered == 0


def test_stream_with_trailing_bytes():
    dec = FrameDecoder()
    tail = encode_frame(SEND)[:-3]
    dec.receive_data(STREAM + tail)
    assert list(dec.frames()) == [_expected(c) for c in STREAM_CMDS]
    assert dec.buffered == len(tail)
    assert list(dec.frames()) == []
    dec.receive_data(encode_frame(SEND)[-3:])
    assert list(dec.frames()) == [SEND]
    dec.receive_data(b"")
    assert dec.at_eof and dec.buffered == 0


def test_abandoned_iteration_loses_nothing():
    dec = FrameDecoder()
    dec.receive_data(STREAM)
    first = next(iter(dec.frames()))
    assert first == JSON_CMD
    dec.receive_data(encode_frame(JSON_CMD))  # arrives while frames remain
    assert list(dec.frames()) == [_expected(c) for c in STREAM_CMDS[1:]] + [JSON_CMD]


@pytest.mark.parametrize("split", [1, 3, 4, 7, 8, 50])
def test_any_split_point(split):
    dec = FrameDecoder()
    dec.receive_data(STREAM[:split])
    out = list(dec.frames())
    dec.receive_data(STREAM[split:])
    out += list(dec.frames())
    assert out == [_expected(c) for c in STREAM_CMDS]


def test_decode_frame_rejects_trailing_bytes():
    with pytest.raises(RemotingProtocolError, match="does not match"):
        decode_frame(JSON_FRAME + b"x")


def test_encode_frame_parts_shares_the_body():
    body = b"B" * 1000
    cmd = RemotingCommand(code=0, flag=1, body=body)
    prefix, tail = encode_frame_parts(cmd)
    assert tail is body
    assert prefix + tail == encode_frame(cmd)


# -- round trips ----------------------------------------------------------


@pytest.mark.parametrize("stype", list(SerializeType))
def test_round_trip_and_response_keeps_type(stype):
    req = RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {"consumerGroup": "G", "queueId": 3, "queueOffset": 2**40, "sysFlag": 3},
        opaque=99, serialize_type=stype,
    )
    got = decode_frame(encode_frame(req))
    assert got == req and got.serialize_type == stype
    resp = got.make_response(ResponseCode.PULL_NOT_FOUND, remark="NO_MESSAGE_IN_QUEUE",
                             ext={"nextBeginOffset": 5, "suggestWhichBrokerId": 0})
    assert resp.serialize_type == stype and resp.opaque == 99 and resp.is_response
    back = decode_frame(encode_frame(resp))
    assert back == resp
    assert back.ext_fields == {"nextBeginOffset": "5", "suggestWhichBrokerId": "0"}


def test_json_output_is_compact_java_order():
    resp = RemotingCommand(code=17, flag=1, opaque=3, remark="No topic route info",
                           ext_fields={"k": "v"}, version=405)
    header = encode_frame(resp)[8:]
    assert header == (
        b'{"code":17,"extFields":{"k":"v"},"flag":1,"language":"JAVA","opaque":3,'
        b'"remark":"No topic route info","serializeTypeCurrentRPC":"JSON","version":405}'
    )


def _json_frame(header: dict | bytes, body: bytes = b"") -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


# -- what real clients send (reference 1.6) -------------------------------


def test_cpp_style_request():
    header = (
        b'{"code":10,"language":"CPP","version":59,"opaque":12,"flag":0,"remark":"",'
        b'"extFields":{"producerGroup":"pg","topic":"T","defaultTopic":"TBW102",'
        b'"defaultTopicQueueNums":4,"queueId":-1,"sysFlag":0,'
        b'"bornTimestamp":"1700000000000","flag":0,"properties":"","reconsumeTimes":"0",'
        b'"unitMode":"0","batch":"1","Signature":"","AccessKey":"","ONSChannelKey":""}}'
    )
    cmd = decode_frame(_json_frame(header, b"hello"))
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque) == (10, LanguageCode.CPP, 59, 12)
    assert cmd.remark == "" and cmd.body == b"hello"
    assert all(type(v) is str for v in cmd.ext_fields.values())
    assert cmd.ext_fields["queueId"] == "-1"
    assert cmd.get_int("defaultTopicQueueNums") == 4
    assert cmd.get_long("bornTimestamp") == 1700000000000
    assert cmd.get_bool("batch") is False  # what a Java broker reads
    assert cmd.get_bool("batch", cpp_compatible=True) is True
    assert cmd.get_bool("unitMode", cpp_compatible=True) is False
    # The answer goes back as JSON whatever the high byte, since C++ does not mask it.
    resp = cmd.make_response(ResponseCode.SUCCESS, ext={"queueId": 1})
    assert encode_frame(resp)[4] == 0


def test_ali_ons_style_request():
    header = {
        "code": 310, "language": "JAVA", "opaque": 1, "flag": 0, "version": 121,
        "remark": None,
        "extFields": {"a": "pg", "b": "T", "c": "TBW102", "d": 4, "e": 0, "f": 0,
                      "g": 1700000000000, "h": 0, "i": None, "j": 0, "k": False,
                      "l": 16, "x": 1.5, "y": {"n": [1, True]}},
    }
    cmd = decode_frame(_json_frame(header))
    assert cmd.remark is None
    assert cmd.ext_fields == {
        "a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "0", "f": "0",
        "g": "1700000000000", "h": "0", "j": "0", "k": "false", "l": "16",
        "x": "1.5", "y": '{"n":[1,true]}',
    }
    assert cmd.get_bool("k") is False and cmd.get_long("g") == 1700000000000


def test_go_style_and_tolerant_fields():
    cmd = decode_frame(_json_frame(
        b' { "code" : 105 , "language" : "GO" , "version" : 317 , "opaque" : 1 ,'
        b' "flag" : 0 , "extFields" : { "topic" : "T" } } '
    ))
    assert cmd.language == LanguageCode.GO and cmd.get_str("topic") == "T"
    cmd = decode_frame(_json_frame({"code": "34", "language": "KLINGON"}))
    assert (cmd.code, cmd.language, cmd.opaque, cmd.flag) == (34, LanguageCode.OTHER, 0, 0)
    assert decode_frame(_json_frame({"code": 1, "language": 9})).language == LanguageCode.GO


def _rmq_frame(header: bytes) -> bytes:
    return struct.pack(">ii", 4 + len(header), 1 << 24 | len(header)) + header


# -- malformed frames -------------------------------------------------------

BAD = [
    (struct.pack(">ii", 3, 0) + b"abc", "bad frame length"),
    (struct.pack(">ii", -5, 0), "bad frame length"),
    (struct.pack(">ii", 8, 100) + b"{}{}", "longer than the frame"),
    (_json_frame(b"{nope"), "bad JSON"),
    (_json_frame(b"[1,2]"), "not an object"),
    (_json_frame(b"\xff\xfe"), "bad JSON"),
    (_json_frame({"code": True}), "not an int"),
    (_json_frame({"code": 2**31}), "out of range"),
    (_json_frame({"code": 1, "extFields": [1]}), "not an object"),
    (_json_frame({"code": 1, "language": []}), "language"),
    (struct.pack(">ii", 6, 0x02000002) + b"{}", "unknown serialize type 2"),
    (struct.pack(">ii", 8, 0x01000004) + b"\x00" * 4, "too short"),
    (_rmq_frame(bytes(13) + struct.pack(">i", 9) + bytes(8)), "bad remark length"),
    (_rmq_frame(bytes(13) + struct.pack(">i", -1) + bytes(8)), "bad remark length"),
    (_rmq_frame(bytes(13) + struct.pack(">ii", 0, 9) + bytes(4)), "bad extFields length"),
    (_rmq_frame(bytes(13) + struct.pack(">iih", 0, 8, -1) + bytes(6)), "bad key length"),
    (_rmq_frame(bytes(13) + struct.pack(">iihbi", 0, 8, 1, 97, 9) + bytes(1)),
     "bad value length"),
    (_rmq_frame(bytes(13) + struct.pack(">iib", 0, 1, 0)), "truncated extFields key"),
]


@pytest.mark.parametrize("frame,why", BAD)
def test_malformed_frames(frame, why):
    with pytest.raises(RemotingProtocolError, match=why):
        decode_frame(frame)
    dec = FrameDecoder()
    dec.receive_data(frame)
    with pytest.raises(RemotingProtocolError, match=why):
        list(dec.frames())
    # The decoder stays failed: the connection is to be closed.
    with pytest.raises(RemotingProtocolError):
        list(dec.frames())
    with pytest.raises(RemotingProtocolError):
        dec.receive_data(b"more")


def test_frame_too_big_is_rejected_on_the_length_word():
    dec = FrameDecoder()
    dec.receive_data(struct.pack(">i", 16 * 1024 * 1024 - 3))
    with pytest.raises(RemotingProtocolError, match="larger than 16777216"):
        list(dec.frames())
    dec = FrameDecoder(max_frame_size=1024)
    dec.receive_data(struct.pack(">i", 1021))
    with pytest.raises(RemotingProtocolError, match="larger than 1024"):
        list(dec.frames())
    small = RemotingCommand(code=1, body=b"x" * 900)
    dec = FrameDecoder(max_frame_size=1024)
    dec.receive_data(encode_frame(small))
    assert list(dec.frames()) == [small]


def test_good_frames_before_a_bad_one_are_delivered():
    dec = FrameDecoder()
    dec.receive_data(JSON_FRAME + _json_frame(b"{bad"))
    it = dec.frames()
    assert next(it) == JSON_CMD
    with pytest.raises(RemotingProtocolError):
        next(it)


# -- fuzz ---------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 16))
def test_fuzz_arbitrary_bytes(data, chunk):
    dec = FrameDecoder(max_frame_size=4096)
    try:
        for i in range(0, len(data), chunk):
            dec.receive_data(data[i:i + chunk])
            for cmd in dec.frames():
                assert all(type(v) is str for v in cmd.ext_fields.values())
                encode_frame(cmd)  # what we decoded we can write back
    except RemotingProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_fuzz_headers(header):
    # Valid framing around arbitrary JSON and ROCKETMQ headers.
    for kind in (0, 1):
        frame = struct.pack(">ii", 4 + len(header), kind << 24 | len(header)) + header
        try:
            decode_frame(frame)
        except RemotingProtocolError:
            pass


commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    language=st.sampled_from(list(LanguageCode)),
    version=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | st.text(min_size=1, max_size=12),
    ext_fields=st.dictionaries(st.text(min_size=1, max_size=8),
                               st.text(min_size=1, max_size=12), max_size=5),
    body=st.binary(max_size=40),
    serialize_type=st.sampled_from(list(SerializeType)),
)


@settings(max_examples=300, deadline=None)
@given(commands)
def test_round_trip_property(cmd):
    try:
        frame = encode_frame(cmd)
    except UnicodeEncodeError:
        return  # lone surrogates: not text we can ever have received
    assert decode_frame(frame) == cmd


def test_rocketmq_empty_strings_read_as_null():
    cmd = RemotingCommand(code=1, remark="", ext_fields={"k": "", "": "v", "a": "b"},
                          serialize_type=SerializeType.ROCKETMQ)
    got = decode_frame(encode_frame(cmd))
    assert got.remark is None and got.ext_fields == {"a": "b"}
