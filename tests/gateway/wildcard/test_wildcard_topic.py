"""Topic name / filter validation and single-filter matching, table-driven."""

import pytest

import gateway.wildcard as wc
from gateway.wildcard import TopicError, parse_filter, topic_matches

VALID_NAMES = [
    "a",
    "/",
    "a/b/c",
    "a//b",
    "/finance",
    "finance/",
    "$SYS/broker/uptime",
    "sport/tennis/player1",
    "ünïcödé/🙂",
    " ",
    "a" * 65535,
    "é" * 32767,  # 65534 bytes
]

BAD_NAMES = [
    ("", "empty"),
    ("a/+", "wildcard"),
    ("a/#", "wildcard"),
    ("#", "wildcard"),
    ("sport+", "wildcard"),
    ("a\x00b", "U+0000"),
    ("a" * 65536, "65536 bytes"),
    ("é" * 32768, "65536 bytes"),
    ("\ud800", "UTF-8"),
    (b"a", "must be a str"),
]

VALID_FILTERS = [
    "#",
    "+",
    "+/+",
    "/+",
    "+/",
    "a/#",
    "a/+/c",
    "sport/tennis/player1/#",
    "sport/+/player1",
    "+/tennis/#",
    "a//#",
    "$SYS/#",
    "$share",  # no slash: an ordinary filter
    "$shared/a",
]

BAD_FILTERS = [
    ("", "empty"),
    ("sport/tennis#", "'#' must be a whole level"),
    ("sport/tennis/#/ranking", "'#' must be the last level"),
    ("#/a", "'#' must be the last level"),
    ("##", "'#' must be a whole level"),
    ("sport+", "'+' must be a whole level"),
    ("a/b+/c", "'+' must be a whole level"),
    ("++", "'+' must be a whole level"),
    ("a\x00", "U+0000"),
    ("a" * 65536, "65536 bytes"),
    ("$share/", "share name is empty"),
    ("$share//a", "share name is empty"),
    ("$share/g", "topic filter is empty"),
    ("$share/g/", "topic filter is empty"),
    ("$share/g+/a", "share name contains a wildcard"),
    ("$share/#/a", "share name contains a wildcard"),
    ("$share/g/a#", "'#' must be a whole level"),
]


@pytest.mark.parametrize("name", VALID_NAMES)
def test_valid_topic_names(name):
    wc.validate_topic_name(name)


@pytest.mark.parametrize("name,why", BAD_NAMES)
def test_bad_topic_names(name, why):
    with pytest.raises(TopicError, match=why.replace("+", r"\+")):
        wc.validate_topic_name(name)


@pytest.mark.parametrize("text", VALID_FILTERS + VALID_NAMES)
def test_valid_filters(text):
    f = parse_filter(text)
    assert f.group is None
    assert f.filter == f.text == text
    assert f.levels == tuple(text.split("/"))


@pytest.mark.parametrize("text,why", BAD_FILTERS)
def test_bad_filters(text, why):
    with pytest.raises(TopicError) as info:
        wc.validate_topic_filter(text)
    assert why in str(info.value)


@pytest.mark.parametrize(
    "text,group,inner",
    [
        ("$share/g/a", "g", "a"),
        ("$share/consumer1/sport/tennis/+", "consumer1", "sport/tennis/+"),
        ("$share/g/#", "g", "#"),
        ("$share/g//", "g", "/"),
        ("$share/g/$share/x", "g", "$share/x"),
    ],
)
def test_shared_filters(text, group, inner):
    f = parse_filter(text)
    assert (f.group, f.filter, f.text) == (group, inner, text)
    assert f.is_shared
    assert f.levels == tuple(inner.split("/"))


def test_topic_error_is_value_error():
    assert issubclass(TopicError, ValueError)


# (filter, topic, matches): MQTT 3.1.1 section 4.7 and 5.0 section 4.7 examples
MATCH_TABLE = [
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),
    ("#", "sport/tennis", True),
    ("#", "/", True),
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player2", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("+", "a", True),
    ("a/+/c", "a//c", True),
    ("a//c", "a//c", True),
    ("a/b", "a/b/", False),
    ("a/b/", "a/b/", True),
    ("a/b", "A/b", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("#", "$SYS/x", False),
    ("#", "$SYS", False),
    ("$SYS/#", "$SYS/monitor/Clients", True),
    ("$SYS/#", "$SYS", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ("a/+", "a/$b", True),
    ("$share/g/#", "sport", True),
    ("$share/g/#", "$SYS/x", False),
    ("$share/g/a/+", "a/b", True),
]


@pytest.mark.parametrize("flt,topic,expected", MATCH_TABLE)
def test_topic_matches_table(flt, topic, expected):
    assert topic_matches(flt, topic) is expected
    assert topic_matches(parse_filter(flt), topic) is expected


def test_exports():
    for name in wc.__all__:
        assert getattr(wc, name) is not None
        assert not name.startswith("_")
