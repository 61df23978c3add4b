"""BrokerConfig: RocketMQ key names, coercion, unknown keys refused."""

from __future__ import annotations

import pytest

from core.broker import BrokerConfig, BrokerRole, ConfigError, FlushDiskType


def test_from_dict_takes_rocketmq_names():
    cfg = BrokerConfig.from_dict({
        "brokerName": "broker-b", "brokerClusterName": "C1", "brokerId": 0, "listenPort": 10921,
        "brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH", "flushIntervalCommitLog": 200,
        "syncFlushTimeout": 3000, "autoCreateTopicEnable": False, "defaultTopicQueueNums": 4,
        "autoCreateSubscriptionGroup": False, "longPollingEnable": False, "shortPollingTimeMills": 500,
        "maxMessageSize": 1024, "fileReservedTime": 48, "deleteWhen": "01;04",
    })
    assert cfg.broker_name == "broker-b" and cfg.listen_port == 10921
    assert cfg.broker_role is BrokerRole.SYNC_MASTER and cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.auto_create_topic_enable is False and cfg.default_topic_queue_nums == 4
    assert cfg.delete_hours() == frozenset({1, 4})
    assert BrokerConfig.from_dict(cfg.to_dict()) == cfg


def test_strings_from_flags_are_coerced():
    cfg = BrokerConfig.from_dict({"listenPort": "0", "autoCreateTopicEnable": "false", "flushDiskType": "sync_flush"})
    assert cfg.listen_port == 0 and cfg.auto_create_topic_enable is False
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH


def test_file_reserved_time_takes_fractions_of_an_hour():
    assert BrokerConfig.from_dict({"fileReservedTime": "0.25"}).file_reserved_time == 0.25
    assert BrokerConfig.from_dict({"fileReservedTime": 0.1}).file_reserved_time == 0.1
    whole = BrokerConfig.from_dict({"fileReservedTime": "48"})
    assert whole.file_reserved_time == 48 and whole.to_dict()["fileReservedTime"] == 48


def test_unknown_key_is_refused_with_a_hint():
    with pytest.raises(ConfigError, match=r"unknown broker configuration key 'autoCreateTopicEnabled'.*autoCreateTopicEnable"):
        BrokerConfig.from_dict({"autoCreateTopicEnabled": True})


@pytest.mark.parametrize("values", [
    {"brokerRole": "MASTER"}, {"listenPort": "x"}, {"autoCreateTopicEnable": "maybe"},
    {"syncFlushTimeout": 0}, {"deleteWhen": "25"}, {"listenPort": 70000}, {"defaultTopicQueueNums": True},
    {"brokerIP1": "localhost"}, {"fileReservedTime": -1}, {"fileReservedTime": "inf"}, {"fileReservedTime": "nan"},
    {"fileReservedTime": True},
])
def test_bad_values_are_refused(values):
    with pytest.raises(ConfigError):
        BrokerConfig.from_dict(values)


def test_every_field_is_documented():
    keys = BrokerConfig.keys()
    assert "flushDiskType" in keys and all(doc for doc in keys.values())


def test_one_table_splits_into_broker_and_store_configs(tmp_path):
    from core.broker import configs_from_dict

    broker, store = configs_from_dict({
        "brokerName": "b1", "flushDiskType": "SYNC_FLUSH", "fileReservedTime": 12,
        "storePathRootDir": str(tmp_path), "mappedFileSizeCommitLog": 1 << 20, "checkCRCOnRecover": "false",
    })
    assert broker.broker_name == "b1" and broker.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert store.store_path_root_dir == str(tmp_path) and store.mapped_file_size_commit_log == 1 << 20
    assert store.check_crc_on_recover is False
    # keys both have: the broker's value reaches the store
    assert store.flush_disk_type is FlushDiskType.SYNC_FLUSH and store.file_reserved_time == 12
    with pytest.raises(ConfigError, match="mappedFileSizeCommitLog"):
        configs_from_dict({"mappedFileSizeCommitlog": 1})
    with pytest.raises(ConfigError):
        configs_from_dict({"mappedFileSizeConsumeQueue": 7})  # not a multiple of 20
