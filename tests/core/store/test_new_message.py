"""`new_message` makes the `Message` the dataclass makes (compiled, it fills
the slots in C), and `roomy_properties` is the same dict, in the same order,
with room for the two properties the broker stamps (CLUSTER, UNIQ_KEY), in
its copies too. The stored bytes of such a message are those of the plain
one; `make test-pure` runs this file in the pure build too, and
tests/kernels/kernel_outcomes.py compares the two builds' messages, stamps
and entries."""

from __future__ import annotations

import sys
from dataclasses import fields

import pytest

from core.store import EncodedMessage, Message, new_message, roomy_properties

_FIELDS = [f.name for f in fields(Message)]
_BASE = {"mqttTopic": "a/b", "mqttQos": "1", "mqttRetain": "false", "mqttClientId": "c-1",
         "mqttPublishTime": "1700000000123"}


def _fields(m: Message) -> list:
    return [getattr(m, n) for n in _FIELDS]


@pytest.mark.parametrize("base", [_BASE, roomy_properties(_BASE), {}])
def test_new_message_is_the_dataclass_message(base):
    note = object()
    made = new_message("a", b"payload", base, 1_700_000_000_123, note)
    plain = Message(topic="a", body=b"payload", properties=dict(base), born_timestamp=1_700_000_000_123, note=note)
    assert type(made) is Message
    assert _fields(made) == _fields(plain) and made.note is note
    assert made.properties is not base and list(made.properties.items()) == list(base.items())
    made.properties["CLUSTER"] = "c"  # its own dict: the base is never changed
    assert "CLUSTER" not in base
    made.queue_id = 3  # an ordinary Message from then on
    assert made == Message(topic="a", body=b"payload", queue_id=3, properties={**base, "CLUSTER": "c"},
                           born_timestamp=1_700_000_000_123)
    assert bytes(EncodedMessage(made).buf) == bytes(EncodedMessage(Message(
        topic="a", body=b"payload", queue_id=3, properties={**base, "CLUSTER": "c"},
        born_timestamp=1_700_000_000_123)).buf)


def test_new_message_takes_a_non_dict_mapping_like_the_dataclass():
    class Props(dict):
        pass
    made = new_message("a", b"", Props(_BASE), 1, None)
    assert made.properties == _BASE and list(made.properties) == list(_BASE)


def test_roomy_properties_keep_order_and_content_and_their_copies_do_not_grow():
    roomy = roomy_properties(_BASE)
    assert roomy == _BASE and list(roomy.items()) == list(_BASE.items())
    copy = roomy.copy()
    size = sys.getsizeof(copy)
    copy["CLUSTER"] = "DefaultCluster"
    copy["UNIQ_KEY"] = "7F0000010001" + "0" * 20
    assert sys.getsizeof(copy) == size  # no resize: the room was there
    assert list(copy)[-2:] == ["CLUSTER", "UNIQ_KEY"] and list(copy)[:5] == list(_BASE)
    plain = _BASE.copy()
    size = sys.getsizeof(plain)
    plain["CLUSTER"] = "DefaultCluster"
    assert sys.getsizeof(plain) > size  # what the room saves: the plain copy grows
