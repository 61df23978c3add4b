"""One SparkSession for the whole run (local[2], UI off, 2 shuffle partitions).

Workers run the project's own interpreter (PYSPARK_PYTHON = sys.executable).
`log_writer` hands out `LogWriter`, a minimal commit-log writer (RocketMQ
segment rules, no store) for layouts the real store never produces: torn
tails, unpreallocated files, stale bytes. Tests that need no Spark do not ask for the `spark` fixture, so they run
(and fail) without starting a JVM.
"""

import os
import sys

import pytest

from core.store.encoder import encode_blank, encode_message
from core.store.message import Message


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark as commitlog

    session = (
        SparkSession.builder.master("local[2]")
        .appName("mqgate-tests-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    commitlog.register(session)
    yield session
    session.stop()


@pytest.fixture
def make_store():
    """``make_store(root, segment_size=64 KiB)``: a started `core.store.MessageStore`.

    Spark reads its files while it runs (the entries are in the shared
    mapping, so no flush is needed), like a live ``mqgate serve``.
    """
    from core.store import MessageStore, StoreConfig

    opened = []

    def make(root, segment_size=64 * 1024):
        store = MessageStore(StoreConfig(
            store_path_root_dir=str(root), mapped_file_size_commit_log=segment_size,
            mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=64, max_index_num=512,
            message_index_enable=False,
        ))
        store.start()
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.shutdown()


@pytest.fixture
def log_writer():
    """The `LogWriter` class: ``log_writer(data_dir, segment_size)``."""
    return LogWriter


class LogWriter:
    def __init__(self, data_dir: str, segment_size: int = 64 * 1024, preallocate: bool = True):
        self.dir = os.path.join(data_dir, "commitlog")
        os.makedirs(self.dir, exist_ok=True)
        self.segment_size = segment_size
        self.preallocate = preallocate
        self.pos = 0
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.positions: list[int] = []  # commit-log offset of every entry written
        self._open(0)

    def _path(self, base: int) -> str:
        return os.path.join(self.dir, f"{base:020d}")

    def _open(self, base: int) -> None:
        with open(self._path(base), "wb") as f:
            if self.preallocate:
                f.truncate(self.segment_size)
        self.base = base

    def _write(self, pos: int, data: bytes) -> None:
        with open(self._path(self.base), "r+b") as f:
            f.seek(pos - self.base)
            f.write(data)

    def append(self, msg: Message, store_ts: int) -> int:
        key = (msg.topic, msg.queue_id)
        qoff = self.queue_offsets.get(key, 0)
        size = len(encode_message(msg))
        if self.pos - self.base + size + 8 > self.segment_size:
            self._write(self.pos, encode_blank(self.base + self.segment_size - self.pos))
            self._open(self.base + self.segment_size)
            self.pos = self.base
        data = encode_message(msg, qoff, self.pos, store_ts)
        self._write(self.pos, data)
        self.queue_offsets[key] = qoff + 1
        self.positions.append(self.pos)
        self.pos += size
        return self.positions[-1]

    def write_raw(self, data: bytes) -> None:
        """Bytes at the write position that are not (yet) an entry: a torn tail."""
        self._write(self.pos, data)
