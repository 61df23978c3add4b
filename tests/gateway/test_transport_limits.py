"""gateway.limits: defaults, ranges, the [mqtt] table and its unknown keys."""

import pytest

from gateway.auth import SECURITY_KEYS
from gateway.config import ConfigError
from gateway.limits import LIMIT_KEYS, Limits, QueueOverflow
from gateway.listeners import LISTENER_KEYS


def test_defaults():
    limits = Limits()
    assert limits.max_connections == 100_000
    assert limits.max_packet_size == 1_048_576
    assert limits.max_inflight_messages == 32
    assert limits.max_queued_messages == 1000
    assert limits.queue_overflow is QueueOverflow.DROP_OLDEST
    assert limits.max_topic_alias == 10
    assert (limits.min_keepalive, limits.max_keepalive) == (0, 65535)
    assert limits.max_session_expiry_interval == 7 * 24 * 3600
    assert limits.connect_timeout == 10.0
    assert Limits.from_dict({}) == limits


def test_from_dict_reads_camel_case_keys():
    limits = Limits.from_dict({"maxConnections": 5, "maxPacketSize": 4096, "maxInflightMessages": 1,
                               "maxQueuedMessages": 0, "queueOverflow": "dropNew", "maxTopicAlias": 0,
                               "minKeepalive": 10, "maxKeepalive": 600,
                               "maxSessionExpiryInterval": 0xFFFFFFFF, "connectTimeout": 2})
    assert limits.max_connections == 5 and limits.queue_overflow is QueueOverflow.DROP_NEW
    assert limits.max_session_expiry_interval == 0xFFFFFFFF and limits.connect_timeout == 2


def test_unknown_key_is_rejected_with_a_hint():
    with pytest.raises(ConfigError, match=r"\[mqtt\] unknown key 'maxConnection' \(did you mean "
                                          r"'maxConnections'\?\)"):
        Limits.from_dict({"maxConnection": 5})
    with pytest.raises(ConfigError, match="certFile"):
        Limits.from_dict({"certFile": "x"})  # someone else's key, not declared


def test_other_rooms_keys_are_skipped_when_declared():
    table = {"certFile": "x", "allowAnonymous": False, "maxConnections": 7, "wsPath": "/ws"}
    limits = Limits.from_dict(table, other_keys=LISTENER_KEYS | SECURITY_KEYS)
    assert limits.max_connections == 7
    assert not (LIMIT_KEYS & LISTENER_KEYS) and not (LIMIT_KEYS & SECURITY_KEYS)


@pytest.mark.parametrize("table, key", [
    ({"maxConnections": 0}, "maxConnections"),
    ({"maxConnections": True}, "maxConnections"),
    ({"maxPacketSize": 268435461}, "maxPacketSize"),
    ({"maxInflightMessages": 65536}, "maxInflightMessages"),
    ({"maxQueuedMessages": -1}, "maxQueuedMessages"),
    ({"queueOverflow": "dropAll"}, "queueOverflow"),
    ({"maxTopicAlias": 1.5}, "maxTopicAlias"),
    ({"minKeepalive": 100, "maxKeepalive": 50}, "minKeepalive"),
    ({"maxKeepalive": 0}, "maxKeepalive"),
    ({"maxSessionExpiryInterval": 2**32}, "maxSessionExpiryInterval"),
    ({"connectTimeout": 0}, "connectTimeout"),
])
def test_bad_values_name_the_key(table, key):
    with pytest.raises(ConfigError, match=rf"\[mqtt\] {key}"):
        Limits.from_dict(table)


def test_effective_keepalive_and_session_expiry():
    free = Limits()
    assert free.effective_keepalive(0) == 0 and free.effective_keepalive(60) == 60
    bounded = Limits(min_keepalive=10, max_keepalive=300)
    assert bounded.effective_keepalive(0) == 300
    assert bounded.effective_keepalive(5) == 10
    assert bounded.effective_keepalive(1000) == 300
    assert bounded.effective_keepalive(60) == 60
    assert Limits(max_session_expiry_interval=100).effective_session_expiry(0xFFFFFFFF) == 100
    assert free.effective_session_expiry(30) == 30
