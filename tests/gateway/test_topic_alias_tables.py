"""Outbound topic alias tables on their own (the wire behaviour is in test_server_mqtt5)."""

from __future__ import annotations

from gateway.mqtt import Publish
from gateway.mqtt._topic_alias import OutboundTopicAliases


def test_a_table_without_maximum_never_aliases():
    table = OutboundTopicAliases(0)
    pub = Publish(topic="a/b", payload=b"x")
    assert table.apply(pub) is pub
    table.forget("a/b")  # a no-op, not an error
    assert table.apply(pub) is pub


def test_a_table_binds_reuses_and_rebinds_least_recently_used():
    table = OutboundTopicAliases(1)
    first = table.apply(Publish(topic="a", payload=b"x"))
    assert (first.topic, first.topic_alias) == ("a", 1)
    again = table.apply(Publish(topic="a", payload=b"x"))
    assert (again.topic, again.topic_alias) == ("", 1)
    other = table.apply(Publish(topic="b", payload=b"x"))
    assert (other.topic, other.topic_alias) == ("b", 1)
    table.forget("b")
    assert table.apply(Publish(topic="c", payload=b"x")).topic_alias == 1
