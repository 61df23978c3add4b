"""Every filter-pattern operator: matching, non-matching and malformed patterns (core.events.pattern)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.events.pattern import PatternError, compile_pattern

EVENT = {
    "specversion": "1.0", "id": "e1", "source": "devices", "type": "telemetry",
    "subject": "building-a/floor-2/dev-7", "time": "2026-11-26T10:00:00Z",
    "data": {"temp": 31.5, "humidity": 40, "on": True, "off": False, "note": None, "name": "Sensor-7",
             "ip": "10.1.2.3", "tags": ["hot", "indoor"], "levels": [3, 12],
             "readings": [{"kind": "t", "v": 1}, {"kind": "h", "v": 2}], "site": {"building": "A", "floor": 2}},
}

# (name, pattern, matches EVENT)
CASES = [
    ("empty pattern matches all", {}, True),
    ("specified value", {"source": ["devices"]}, True),
    ("specified value, other", {"source": ["cloud"]}, False),
    ("or within the list", {"source": ["cloud", "devices"]}, True),
    ("and across fields", {"source": ["devices"], "type": ["telemetry"]}, True),
    ("and across fields, one fails", {"source": ["devices"], "type": ["alert"]}, False),
    ("number equality", {"data": {"humidity": [40]}}, True),
    ("number equality, int vs float", {"data": {"humidity": [40.0]}}, True),
    ("number vs string", {"data": {"humidity": ["40"]}}, False),
    ("bool true", {"data": {"on": [True]}}, True),
    ("bool is not 1", {"data": {"on": [1]}}, False),
    ("false is not 0", {"data": {"off": [0]}}, False),
    ("null", {"data": {"note": [None]}}, True),
    ("null vs missing", {"data": {"nope": [None]}}, False),
    ("prefix", {"subject": [{"prefix": "building-a/"}]}, True),
    ("prefix, other", {"subject": [{"prefix": "building-b/"}]}, False),
    ("prefix on a number", {"data": {"humidity": [{"prefix": "4"}]}}, False),
    ("suffix", {"subject": [{"suffix": "dev-7"}]}, True),
    ("suffix, other", {"subject": [{"suffix": "dev-8"}]}, False),
    ("equals-ignore-case", {"data": {"name": [{"equals-ignore-case": "sensor-7"}]}}, True),
    ("equals-ignore-case, other", {"data": {"name": [{"equals-ignore-case": "sensor-8"}]}}, False),
    ("anything-but value", {"type": [{"anything-but": "debug"}]}, True),
    ("anything-but value, excluded", {"type": [{"anything-but": "telemetry"}]}, False),
    ("anything-but list", {"type": [{"anything-but": ["debug", "trace"]}]}, True),
    ("anything-but list, excluded", {"type": [{"anything-but": ["debug", "telemetry"]}]}, False),
    ("anything-but number", {"data": {"humidity": [{"anything-but": 41}]}}, True),
    ("anything-but number, excluded", {"data": {"humidity": [{"anything-but": [40]}]}}, False),
    ("anything-but prefix", {"subject": [{"anything-but": {"prefix": "building-b"}}]}, True),
    ("anything-but prefix, excluded", {"subject": [{"anything-but": {"prefix": "building-a"}}]}, False),
    ("anything-but suffix, excluded", {"subject": [{"anything-but": {"suffix": "dev-7"}}]}, False),
    ("anything-but never matches missing", {"data": {"nope": [{"anything-but": "x"}]}}, False),
    ("numeric >", {"data": {"temp": [{"numeric": [">", 30]}]}}, True),
    ("numeric >, below", {"data": {"temp": [{"numeric": [">", 32]}]}}, False),
    ("numeric range", {"data": {"temp": [{"numeric": [">=", 30, "<", 32]}]}}, True),
    ("numeric range, outside", {"data": {"temp": [{"numeric": [">", 0, "<=", 31]}]}}, False),
    ("numeric =", {"data": {"humidity": [{"numeric": ["=", 40]}]}}, True),
    ("numeric !=", {"data": {"humidity": [{"numeric": ["!=", 40]}]}}, False),
    ("numeric on a string", {"data": {"name": [{"numeric": [">", 0]}]}}, False),
    ("numeric on a bool", {"data": {"on": [{"numeric": [">", 0]}]}}, False),
    ("numeric on missing", {"data": {"nope": [{"numeric": [">", 0]}]}}, False),
    ("exists true", {"data": {"temp": [{"exists": True}]}}, True),
    ("exists true, missing", {"data": {"nope": [{"exists": True}]}}, False),
    ("exists false", {"data": {"nope": [{"exists": False}]}}, True),
    ("exists false, present", {"data": {"temp": [{"exists": False}]}}, False),
    ("exists false under a missing parent", {"data": {"nope": {"deeper": [{"exists": False}]}}}, True),
    ("exists true under a missing parent", {"data": {"nope": {"deeper": [{"exists": True}]}}}, False),
    ("cidr", {"data": {"ip": [{"cidr": "10.0.0.0/8"}]}}, True),
    ("cidr, other net", {"data": {"ip": [{"cidr": "192.168.0.0/16"}]}}, False),
    ("cidr on a non-address", {"data": {"name": [{"cidr": "10.0.0.0/8"}]}}, False),
    ("array: any element", {"data": {"tags": ["hot"]}}, True),
    ("array: no element", {"data": {"tags": ["cold"]}}, False),
    ("array: numeric on elements", {"data": {"levels": [{"numeric": [">", 10]}]}}, True),
    ("array: numeric, none", {"data": {"levels": [{"numeric": [">", 20]}]}}, False),
    ("array of objects", {"data": {"readings": {"kind": ["h"], "v": [2]}}}, True),
    ("array of objects, fields from different elements", {"data": {"readings": {"kind": ["h"], "v": [1]}}}, False),
    ("nested object", {"data": {"site": {"building": ["A"]}}}, True),
    ("nested object, other", {"data": {"site": {"building": ["B"]}}}, False),
    ("nested pattern on a scalar", {"data": {"temp": {"x": ["y"]}}}, False),
    ("leaf pattern on an object", {"data": {"site": ["A"]}}, False),
    ("$or: second", {"$or": [{"type": ["alert"]}, {"data": {"temp": [{"numeric": [">", 30]}]}}]}, True),
    ("$or: none", {"$or": [{"type": ["alert"]}, {"source": ["cloud"]}]}, False),
    ("$or and a field", {"source": ["devices"], "$or": [{"type": ["alert"]}, {"type": ["telemetry"]}]}, True),
    ("$or and a failing field", {"source": ["cloud"], "$or": [{"type": ["telemetry"]}]}, False),
    ("nested $or", {"data": {"$or": [{"humidity": [1]}, {"name": [{"prefix": "Sensor"}]}]}}, True),
    ("mixed values and operators", {"data": {"temp": [1, {"numeric": [">", 30]}]}}, True),
]


@pytest.mark.parametrize("name,pattern,expected", CASES, ids=[c[0] for c in CASES])
def test_operator(name, pattern, expected):
    assert compile_pattern(pattern).matches(EVENT) is expected


def test_a_pattern_as_json_text():
    assert compile_pattern('{"data": {"temp": [{"numeric": [">", 30]}]}}').matches(EVENT)


# (pattern, the error's start)
MALFORMED = [
    ({"data": {"temp": [{"numeric": [">"]}]}}, "data.temp: numeric needs an operator and a number"),
    ({"data": {"temp": [{"numeric": ["~", 3]}]}}, "data.temp: numeric operator '~'"),
    ({"data": {"temp": [{"numeric": [">", "3"]}]}}, "data.temp: numeric bound '3' is not a finite number"),
    ({"data": {"temp": [{"numeric": [">", True]}]}}, "data.temp: numeric bound True"),
    ({"subject": [{"prefix": 3}]}, "subject: prefix needs a string"),
    ({"subject": [{"suffix": None}]}, "subject: suffix needs a string"),
    ({"subject": [{"equals-ignore-case": 1}]}, "subject: equals-ignore-case needs a string"),
    ({"type": [{"anything-but": []}]}, "type: anything-but needs a string"),
    ({"type": [{"anything-but": {"wildcard": "x"}}]}, "type: anything-but takes a value"),
    ({"type": [{"anything-but": {"prefix": ""}}]}, "type: anything-but prefix needs a non-empty string"),
    ({"data": {"x": [{"exists": "yes"}]}}, "data.x: exists needs true or false"),
    ({"data": {"ip": [{"cidr": "10.0.0.0/33"}]}}, "data.ip: cidr needs a network"),
    ({"data": {"x": [{"between": [1, 2]}]}}, "data.x: unknown operator 'between'"),
    ({"data": {"x": [{"prefix": "a", "suffix": "b"}]}}, "data.x: an operator object has exactly one key"),
    ({"source": []}, "source: an empty list matches nothing"),
    ({"source": "devices"}, "source: a field's pattern is a list of values or a nested object"),
    ({"source": [["a"]]}, "source: item 0 is a list"),
    ({"data": {}}, "data: an empty object"),
    ({"$or": {"a": ["b"]}}, "$or: $or needs a list of patterns"),
    ({"$or": [{"a": ["b"]}, {"c": 1}]}, "$or[1].c: a field's pattern"),
    (["source"], "(top): a pattern is a JSON object"),
    ("{not json", "(top): the pattern is not JSON"),
]


@pytest.mark.parametrize("pattern,message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_pattern_names_the_path(pattern, message):
    with pytest.raises(PatternError) as e:
        compile_pattern(pattern)
    assert str(e.value).startswith(message), str(e.value)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(event=JSON, case=st.sampled_from(CASES))
def test_matching_never_raises_on_arbitrary_json(event, case):
    pattern = compile_pattern(case[1])
    assert pattern.matches(event) in (True, False)
    assert pattern.matches({"data": event, "subject": event, "type": event}) in (True, False)
