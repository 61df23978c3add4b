"""What survives a restart: consumer offsets, subscription groups, topic configs, messages."""

from __future__ import annotations

import json

from core.broker import (
    PERM_READ, BrokerConfig, PullStatus, SendStatus, SubscriptionGroupConfig, TopicConfig, open_broker,
)
from core.store.message import Message


async def test_consumer_offsets_survive_restart(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 2, 2))
        for i in range(6):
            assert (await broker.send(Message("T", b"%d" % i))).ok
        broker.commit_offset("G1", "T", 0, 2)
        broker.commit_offset("G1", "T", 1, 1)
        # COMMIT_OFFSET riding on a pull
        got = await broker.pull("G2", "T", 0, 0, 32, "*", commit_offset=3)
        assert got.status is PullStatus.FOUND and got.message_count == 3
        assert broker.query_offset("G9", "T", 0) is None

    async with open_broker(broker_config, store_config) as broker:
        assert broker.query_offset("G1", "T", 0) == 2
        assert broker.query_offset("G1", "T", 1) == 1
        assert broker.query_offset("G2", "T", 0) == 3
        assert broker.query_offset("G1", "T", 5) is None
        assert broker.get_group("G1") == SubscriptionGroupConfig("G1")
        got = await broker.pull("G1", "T", 0, broker.query_offset("G1", "T", 0), 32, "*")
        assert [m.body for m in got.messages()] == [b"4"]
        assert broker.max_offset("T", 0) == 3 and broker.max_offset("T", 1) == 3

    data = json.loads((store_config_root(store_config) / "config" / "consumerOffset.json").read_text())
    assert data["offsetTable"]["T@G1"] == {"0": 2, "1": 1}


def store_config_root(store_config):
    from pathlib import Path
    return Path(store_config.store_path_root_dir)


async def test_topic_configs_survive_restart(broker_config, store_config):
    async with open_broker(broker_config, store_config) as broker:
        await broker.update_topic(TopicConfig("Kept", 3, 5, PERM_READ, order=True))
        assert (await broker.send(Message("Auto", b"x"))).ok  # auto-created
        await broker.update_topic(TopicConfig("Gone", 1, 1))
        assert await broker.delete_topic("Gone")
        version = broker.topics.data_version

    async with open_broker(broker_config.replace(auto_create_topic_enable=False), store_config) as broker:
        assert broker.get_topic("Kept") == TopicConfig("Kept", 3, 5, PERM_READ, order=True)
        assert broker.get_topic("Auto").write_queue_nums == broker_config.default_topic_queue_nums
        assert broker.get_topic("Gone") is None
        assert broker.topics.data_version.counter > version.counter
        # TBW102 was saved with INHERIT, but auto-creation is now off
        assert (await broker.send(Message("New", b"x"))).status is SendStatus.TOPIC_NOT_EXIST
        got = await broker.pull("G", "Auto", 0, 0)
        assert [m.body for m in got.messages()] == [b"x"]


async def test_subscription_group_auto_create_off(store_config):
    config = BrokerConfig(auto_create_subscription_group=False)
    async with open_broker(config, store_config) as broker:
        await broker.update_topic(TopicConfig("T", 1, 1))
        got = await broker.pull("Unknown", "T", 0, 0)
        assert got.status is PullStatus.SUBSCRIPTION_GROUP_NOT_EXIST and got.status.code == 26
        broker.groups.put(SubscriptionGroupConfig("Known", retry_max_times=3))
        assert (await broker.pull("Known", "T", 0, 0)).status is PullStatus.PULL_NOT_FOUND
        broker.groups.update("Known", consume_enable=False)
        assert (await broker.pull("Known", "T", 0, 0)).status is PullStatus.NO_PERMISSION


async def test_store_is_shut_down_even_when_shutdown_runs_out_of_time(autojump_clock, broker_config, store_config):
    # With the autojump clock, the 30 s shutdown bound expires while a worker
    # thread persists the config files; the store must still be shut down
    # (lock released, clean marker), or the next open in this process fails.
    for i in range(15):
        async with open_broker(broker_config, store_config) as broker:
            assert not broker.recovery_report.abnormal_exit
            assert (await broker.send(Message("T", b"%d" % i), queue_id=0)).ok
    async with open_broker(broker_config, store_config) as broker:
        assert broker.max_offset("T", 0) == 15
