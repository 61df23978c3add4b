"""The broker message of an inbound PUBLISH, built the short ways the publish
path takes, is the message the long way gives: the same fields, the same
properties in the same order (the order written to disk).

* ``plain_publish_to_message`` (a 3.1/3.1.1 PUBLISH: no 5.0 properties to
  look for) equals ``publish_to_message`` for every PUBLISH without them;
* the base properties keep their order and content (their table only has
  room for the broker's two stamps: tests/core/store/test_new_message.py).
"""

from __future__ import annotations

from dataclasses import fields

import pytest

from core.store import Message
from gateway.mapping import plain_publish_to_message, publish_properties, publish_to_message
from gateway.mqtt import Publish
from gateway.mqtt._decode import decode_all

_FIELDS = [f.name for f in fields(Message)]


def _same(a: Message, b: Message) -> None:
    assert [getattr(a, n) for n in _FIELDS] == [getattr(b, n) for n in _FIELDS]
    assert list(a.properties.items()) == list(b.properties.items())
    assert a.note is b.note


@pytest.mark.parametrize("pub", [
    Publish(topic="a/b", payload=b"plain"),
    Publish(topic="a/b", payload=b"kept", qos=1, packet_id=7, retain=True),
    decode_all(bytes((0x34, 9, 0, 3)) + b"a/b" + b"\x00\x09xy", 4)[0],  # as the decoder makes it
])
def test_a_plain_publish_makes_the_message_the_general_path_makes(pub):
    base = publish_properties(pub.topic, pub.qos, pub.retain, "client-1", 1_700_000_000_123)
    kept = dict(base)
    plain = plain_publish_to_message(pub, "a", base, 1_700_000_000_123)
    general = publish_to_message(pub, "a", "client-1", 1_700_000_000_123)
    _same(plain, general)
    assert plain.properties is not base and base == kept


def test_the_base_properties_are_the_plain_dict_in_the_same_order():
    base = publish_properties("a/b", 1, False, "client-1", 5)
    assert list(base.items()) == [("mqttTopic", "a/b"), ("mqttQos", "1"), ("mqttRetain", "false"),
                                  ("mqttClientId", "client-1"), ("mqttPublishTime", "5")]
    pub = Publish(topic="a/b", payload=b"x", qos=1, packet_id=1)
    msg = publish_to_message(pub, "a", "client-1", 5, base=base)
    _same(msg, Message(topic="a", body=b"x", properties=dict(base), born_timestamp=5, note=pub))
    assert msg.queue_id == 0 and msg.sysflag == 0 and msg.flag == 0
