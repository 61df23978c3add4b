"""Shared helpers: small stores in tmp dirs (64 KiB segments, tiny index)."""

import pytest

from core.store import MessageStore, StoreConfig


def small_config(root, **kw) -> StoreConfig:
    base = dict(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 200,
        max_hash_slot_num=64,
        max_index_num=512,
    )
    base.update(kw)
    return StoreConfig(**base)


@pytest.fixture
def make_store(tmp_path):
    opened = []

    def make(**kw):
        s = MessageStore(small_config(tmp_path / "store", **kw))
        s.start()
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.shutdown()
