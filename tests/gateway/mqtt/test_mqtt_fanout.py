"""PublishTemplate: encode once, stamp packet ids; same bytes as a full encode."""

from dataclasses import replace

import pytest

from gateway.mqtt import LocalProtocolError, Publish, PublishTemplate, decode_all, encode, encode_publish_v4_qos0

PUB = Publish(
    topic="fan/out", payload=b"x" * 100, qos=2, packet_id=77, retain=True,
    message_expiry_interval=60, user_properties=[("k", "v")], topic_alias=3,
)


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("retain", [False, True])
@pytest.mark.parametrize("sub_ids", [None, (5,), (1, 300)])
def test_template_matches_full_encode(version, qos, retain, sub_ids):
    tpl = PublishTemplate(PUB, version, qos=qos, retain=retain, subscription_identifiers=sub_ids)
    base = replace(PUB, qos=qos, retain=retain, topic_alias=None, packet_id=1 if qos else None, dup=False,
                   subscription_identifiers=sub_ids or ())
    if qos == 0:
        assert tpl.data == encode(base, version) and tpl.size == len(tpl.data)
        with pytest.raises(LocalProtocolError):
            tpl.render(1)
        return
    for pid, dup in ((1, False), (0xBEEF, True), (65535, False)):
        data = tpl.render(pid, dup)
        assert data == encode(replace(base, packet_id=pid, dup=dup), version)
        assert data[tpl.packet_id_offset : tpl.packet_id_offset + 2] == pid.to_bytes(2, "big")
        assert len(data) == tpl.size
        assert decode_all(data, version)[0].packet_id == pid


@pytest.mark.parametrize("retain", [False, True])
@pytest.mark.parametrize("topic,size", [("fan/out", 0), ("t", 200), ("été/漢字", 20000), ("a" * 300, 2_100_000)])
def test_v4_qos0_fast_encoding_is_the_template(retain, topic, size):
    """The router's QoS 0 fast path sends the bytes a template would (and
    that a full encode gives), across the remaining length's 1-4 bytes."""
    payload = bytes(range(256)) * (size // 256) + b"p" * (size % 256)
    pub = Publish(topic=topic, payload=payload, qos=0, retain=retain)
    data = encode_publish_v4_qos0(topic, payload, retain)
    assert data == PublishTemplate(pub, 4, qos=0, retain=retain).data == encode(pub, 4)
    assert decode_all(data, 4)[0] == pub


def test_template_rejects_bad_packet_ids():
    tpl = PublishTemplate(PUB, 5)
    for bad in (0, 65536, -1):
        with pytest.raises(LocalProtocolError):
            tpl.render(bad)
