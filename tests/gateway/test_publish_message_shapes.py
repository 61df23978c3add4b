"""The broker message of an inbound PUBLISH, built the short ways the publish
path takes, is the message the long way gives: the same fields, the same
properties in the same order (the order written to disk).

* ``plain_publish_to_message`` (a 3.1/3.1.1 PUBLISH: no 5.0 properties to
  look for) equals ``publish_to_message`` for every PUBLISH without them;
* the positional construction of ``Message`` is used only while its fields
  are what ``gateway.mapping`` expects, and gives what keywords give.
"""

from __future__ import annotations

from dataclasses import fields

import pytest

import gateway.mapping as mapping
from core.store import Message
from gateway.mapping import message_of, plain_publish_to_message, publish_properties, publish_to_message
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


def test_the_positional_message_is_the_keyword_message():
    assert mapping._MESSAGE_POSITIONAL, "Message's fields changed: gateway.mapping builds it by keyword (slower)"
    pub = Publish(topic="a/b", payload=b"x")
    props = {"mqttTopic": "a/b"}
    by_position = publish_to_message(pub, "a", "c", 5, base=props)
    _same(by_position, message_of("a", b"x", dict(props), 5, pub))
    assert by_position.queue_id == 0 and by_position.sysflag == 0 and by_position.flag == 0
