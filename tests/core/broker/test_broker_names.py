"""Topic name rules, the MQTT level mapping, tag expressions, the topic table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.broker import (
    DEFAULT_TOPIC, PERM_INHERIT, PERM_READ, PERM_WRITE, SubscriptionParseError, TopicConfig, TopicTable,
    mqtt_level_to_topic, mqtt_topic_to_topic, parse_subscription, topic_to_mqtt_level, validate_topic,
)
from core.store.java_hash import java_string_hash


def test_validate_topic():
    assert validate_topic("TopicTest") is None
    assert validate_topic("%RETRY%group_1|a-b") is None
    assert validate_topic("a" * 127) is None
    assert "longer" in validate_topic("a" * 128)
    assert "characters" in validate_topic("a.b")
    assert "empty" in validate_topic("")


@pytest.mark.parametrize("level, topic", [
    ("sensors", "sensors"), ("sensors.v2", "sensors%2Ev2"), ("$SYS", "%24SYS"), ("", "%"),
    ("a b", "a%20b"), ("%RETRY%", "%25RETRY%25"), ("a|b", "a%7Cb"), ("é", "%C3%A9"),
])
def test_mqtt_level_mapping(level, topic):
    assert mqtt_level_to_topic(level) == topic
    assert validate_topic(topic) is None
    assert topic_to_mqtt_level(topic) == level


def test_mqtt_full_topic_maps_first_level():
    assert mqtt_topic_to_topic("sensors.v2/x/y") == "sensors%2Ev2"
    assert mqtt_topic_to_topic("/x") == "%"


@pytest.mark.parametrize("name", ["%RETRY%G", "%DLQ%G", "a|b", "a%2eb", "a%41", "%2F", "%C3", "x%"])
def test_names_that_are_no_image(name):
    assert topic_to_mqtt_level(name) is None


@pytest.mark.parametrize("level", ["." * 43, "x" * 128, "é" * 30, "TBW102", "SCHEDULE_TOPIC_XXXX",
                                   "rmq_sys_wheel_timer", "RMQ_SYS_TRANS_HALF_TOPIC"])
def test_long_or_reserved_levels_get_a_hashed_topic(level):
    topic = mqtt_level_to_topic(level)
    assert topic.startswith("%%") and len(topic) == 42
    assert validate_topic(topic) is None and topic == mqtt_level_to_topic(level)  # valid and stable
    assert topic_to_mqtt_level(topic) is None  # never taken for another level's escape image


def test_reserved_broker_topics_are_no_mqtt_level():
    for name in ("TBW102", "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"):
        assert topic_to_mqtt_level(name) is None


@given(st.text(alphabet=st.characters(blacklist_characters="/+#\x00", blacklist_categories=("Cs",)), max_size=80))
def test_mqtt_mapping_round_trips(level):
    topic = mqtt_level_to_topic(level)
    assert validate_topic(topic) is None
    if not topic.startswith("%%"):
        assert topic_to_mqtt_level(topic) == level


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="/+#\x00", blacklist_categories=("Cs",)),
                        max_size=80), min_size=2, max_size=2, unique=True))
def test_different_levels_never_share_a_topic(levels):
    a, b = levels
    assert mqtt_level_to_topic(a) != mqtt_level_to_topic(b)


def test_subscription_expressions():
    all_ = parse_subscription("T", "*")
    assert all_.matches_all and all_.code_filter() is None
    assert parse_subscription("T", None).matches_all and parse_subscription("T", "").matches_all
    sub = parse_subscription("T", " TagA || TagB ||")
    assert sub.tags == {"TagA", "TagB"}
    assert sub.codes == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert sub.matches("TagA") and not sub.matches("TagC") and not sub.matches(None)
    assert sub.matches_code(java_string_hash("TagB")) and not sub.matches_code(0)
    with pytest.raises(SubscriptionParseError):
        parse_subscription("T", "||")
    with pytest.raises(SubscriptionParseError):
        parse_subscription("T", "a > ", "SQL92")
    with pytest.raises(SubscriptionParseError, match="TAG or SQL92"):
        parse_subscription("T", "a > 1", "CLASS")
    sql = parse_subscription("T", "a > 1", "SQL92")
    assert sql.is_sql92 and not sql.matches_all and sql.code_filter() is None and sql.entry_filter() is not None
    assert sql.matches("TagC") and sql.matches(None) and sql.matches_code(0)  # SQL92 does not filter by tag


def test_topic_table_auto_create_from_tbw102():
    table = TopicTable(auto_create=True, default_queue_nums=8)
    assert table.get(DEFAULT_TOPIC).perm == PERM_READ | PERM_WRITE | PERM_INHERIT
    v0 = table.data_version
    cfg = table.create_on_send("T", DEFAULT_TOPIC, 4)
    assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (4, 4, PERM_READ | PERM_WRITE)
    assert table.data_version.counter == v0.counter + 1
    assert table.create_on_send("U", DEFAULT_TOPIC, 100).write_queue_nums == 8  # capped by TBW102
    assert table.create_on_send("V", "NoSuchDefault", 4) is None


def test_topic_table_without_auto_create():
    table = TopicTable(auto_create=False, default_queue_nums=8)
    assert table.get(DEFAULT_TOPIC) is None
    assert table.create_on_send("T") is None
    # A TBW102 saved by a run with auto-create on loses INHERIT when loaded.
    saved = TopicTable(auto_create=True, default_queue_nums=8).to_json()
    table.load_json(saved)
    assert not table.get(DEFAULT_TOPIC).inherited and table.create_on_send("T") is None


def test_topic_table_json_round_trip_and_listeners():
    seen = []
    table = TopicTable(auto_create=True, default_queue_nums=8)
    table.add_listener(lambda name, cfg: seen.append((name, cfg)))
    table.put(TopicConfig("T", 2, 3, PERM_READ, order=True))
    table.delete("T")
    assert seen == [("T", TopicConfig("T", 2, 3, PERM_READ, order=True)), ("T", None)]
    table.put(TopicConfig("T", 2, 3, PERM_READ, order=True))
    other = TopicTable(auto_create=True, default_queue_nums=8)
    other.load_json(table.to_json())
    assert other.all() == table.all()
    assert other.data_version.counter > table.data_version.counter
    with pytest.raises(ValueError):
        table.put(TopicConfig("a.b"))
