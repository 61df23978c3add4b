"""fastjson-compatible body JSON: encode_json and the tolerant decode_json."""

import enum
from dataclasses import dataclass

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from core.remoting import decode_json, encode_json

ROUTE = {
    "brokerDatas": [{"cluster": "DefaultCluster", "brokerName": "broker-a",
                     "brokerAddrs": {1: "10.0.0.2:10911", 0: "10.0.0.1:10911"}}],
    "filterServerTable": {},
    "queueDatas": [{"writeQueueNums": 4, "readQueueNums": 4, "perm": 6,
                    "topicSysFlag": 0, "brokerName": "broker-a"}],
    "orderTopicConf": None,
}


def test_route_data_non_standard():
    assert encode_json(ROUTE, standard=False) == (
        '{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
        '"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
        '"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
        '"topicSysFlag":0,"writeQueueNums":4}]}'
    )


def test_route_data_standard():
    text = encode_json(ROUTE, standard=True)
    assert '"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"}' in text
    assert " " not in text


def test_non_ascii():
    assert encode_json({"k": "é"}, standard=False) == '{"k":"é"}'
    assert encode_json({"k": "é"}, standard=True) == '{"k":"\\u00e9"}'


class Model(enum.Enum):
    BROADCASTING = 0
    CLUSTERING = 1


class Kind(enum.IntEnum):
    CONSUME_ACTIVELY = 0


@dataclass
class QueueData:
    brokerName: str
    perm: int
    topicSysFlag: int | None = None


def test_values():
    assert encode_json(
        [None, True, False, 1.5, -3, Model.CLUSTERING, Kind.CONSUME_ACTIVELY,
         ("t",), {"b", "a"}, QueueData("b", 6)],
        standard=False,
    ) == '[null,true,false,1.5,-3,"CLUSTERING","CONSUME_ACTIVELY",["t"],["a","b"],' \
         '{"brokerName":"b","perm":6}]'
    with pytest.raises(ValueError):
        encode_json(float("nan"), standard=False)
    with pytest.raises(TypeError):
        encode_json(b"x", standard=False)


MQ_KEY = (("brokerName", "b"), ("queueId", 0), ("topic", "t"))


def test_object_keys():
    body = {"offsetTable": {MQ_KEY: 123}}
    text = encode_json(body, standard=False)
    assert text == '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:123}}'
    assert decode_json(text) == body
    std = encode_json(body, standard=True)
    assert std == '{"offsetTable":{"{\\"brokerName\\":\\"b\\",\\"queueId\\":0,\\"topic\\":\\"t\\"}":123}}'
    assert decode_json(std) == {
        "offsetTable": {'{"brokerName":"b","queueId":0,"topic":"t"}': 123}}


@pytest.mark.parametrize("text,value", [
    ('{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}', {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}),
    ('{"0":"a"}', {"0": "a"}),
    ('{"offsetTable":{"T@G":{0:12,1:7}}}', {"offsetTable": {"T@G": {0: 12, 1: 7}}}),
    (' { -1 : [ 1 , 2.5 , "x" , null , true ] , 1.5e1 : {} } ',
     {-1: [1, 2.5, "x", None, True], 15.0: {}}),
    ('{{"b":{"c":1},"a":[1,2]}:"v"}', {(("a", (1, 2)), ("b", (("c", 1),))): "v"}),
    ('{[1,2]:3}', {(1, 2): 3}),
    (b'{0:"\xc3\xa9"}', {0: "é"}),
    ('{"s":"a\\"b\\u00e9"}', {"s": 'a"bé'}),
])
def test_decode_tolerant(text, value):
    assert decode_json(text) == value


@pytest.mark.parametrize("text", ["", "{", "{0:}", "{a:1}", "{0:1,}", "[1,]", "{0:1} x",
                                  "{0 1}", "[1 2]", '{"a":1', "{true:1}", "{0:tru}"])
def test_decode_rejects(text):
    with pytest.raises(ValueError):
        decode_json(text)


def test_deep_nesting_is_a_value_error():
    with pytest.raises(ValueError):
        decode_json("{0:" * 100000)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(max_size=6) | st.integers(-5, 5), inner, max_size=4),
    max_leaves=20,
)


def _drop_none_values(v):
    if isinstance(v, dict):
        return {k: _drop_none_values(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_drop_none_values(x) for x in v]
    return v


@settings(max_examples=200, deadline=None)
@given(json_values, st.booleans())
def test_round_trip(value, standard):
    text = encode_json(value, standard=standard)
    want = _drop_none_values(value)
    if standard:  # int keys come back as strings
        def strkeys(v):
            if isinstance(v, dict):
                assume(len({str(k) for k in v}) == len(v))  # {0:.., "0":..}
                return {str(k): strkeys(x) for k, x in v.items()}
            if isinstance(v, list):
                return [strkeys(x) for x in v]
            return v
        want = strkeys(want)
    assert decode_json(text) == want


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='{}[]:,"0123456789-.eE truefalsn\\', max_size=30))
def test_fuzz_decode_only_value_error(text):
    try:
        decode_json(text)
    except ValueError:
        pass
