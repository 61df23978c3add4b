"""MQTT filter matching: a table, and the regex form held against the scalar one."""

import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from spark.topicfilter import FilterError, matches, to_regex

TABLE = [
    ("a/b/c", "a/b/c", True),
    ("a/b/c", "a/b", False),
    ("a/+/c", "a/x/c", True),
    ("a/+/c", "a//c", True),
    ("a/+/c", "a/x/y/c", False),
    ("a/#", "a", True),
    ("a/#", "a/", True),
    ("a/#", "a/b/c", True),
    ("a/#", "ab", False),
    ("#", "x/y", True),
    ("#", "/", True),
    ("#", "$SYS/uptime", False),
    ("+/uptime", "$SYS/uptime", False),
    ("$SYS/#", "$SYS/uptime", True),
    ("+", "/", False),
    ("+/+", "/", True),
    ("devices/+/telemetry", "devices/d1/telemetry", True),
    ("devices/+/telemetry", "devices/d1/status", False),
    ("a.b/(x)", "a.b/(x)", True),
    ("a.b/(x)", "axb/(x)", False),
    ("ü/+", "ü/🙂", True),
]


@pytest.mark.parametrize("flt,topic,want", TABLE)
def test_table(flt, topic, want):
    assert matches(flt, topic) is want
    assert (re.fullmatch(to_regex(flt), topic) is not None) is want
    assert pc.match_substring_regex(pa.array([topic]), to_regex(flt))[0].as_py() is want


@pytest.mark.parametrize("bad", ["", "a/#/b", "a#", "a/b+", "+a"])
def test_invalid_filters(bad):
    with pytest.raises(FilterError):
        to_regex(bad)


LEVEL = st.sampled_from(["a", "b", "", "$x", "é", ".", "(", "\n"])


@settings(max_examples=300, deadline=None)
@given(
    flt=st.lists(st.one_of(LEVEL, st.just("+")), min_size=1, max_size=4).flatmap(
        lambda ls: st.sampled_from(["/".join(ls), "/".join(ls + ["#"]), "#"])
    ),
    topic=st.lists(LEVEL, min_size=1, max_size=5).map("/".join),
)
def test_regex_agrees_with_matches(flt, topic):
    assume(flt)
    want = matches(flt, topic)
    assert (re.fullmatch(to_regex(flt), topic) is not None) is want
    assert pc.match_substring_regex(pa.array([topic]), to_regex(flt))[0].as_py() is want
