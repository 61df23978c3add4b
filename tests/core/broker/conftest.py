"""Fixtures for the broker core: a real store in a temp directory, small files."""

from __future__ import annotations

import pytest

from core.broker import BrokerConfig
from core.store import StoreConfig


def small_store_config(root) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=20 * 1024,
        max_hash_slot_num=1024,
        max_index_num=8192,
    )


@pytest.fixture
def store_config(tmp_path) -> StoreConfig:
    return small_store_config(tmp_path / "store")


@pytest.fixture
def broker_config() -> BrokerConfig:
    return BrokerConfig(default_topic_queue_nums=4)
