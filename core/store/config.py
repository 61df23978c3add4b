"""`StoreConfig`: the store's settings, named after RocketMQ's ``MessageStoreConfig``.

Each field's comment gives the RocketMQ key it stands for (the TOML file uses
those camelCase names) and its default.  Defaults that differ from RocketMQ's
say why.  `validate` is called by `MessageStore.__init__`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .errors import StoreConfigError

CQ_UNIT_SIZE = 20


class FlushDiskType(enum.Enum):
    """RocketMQ ``FlushDiskType``."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclass
class StoreConfig:
    # storePathRootDir: the directory holding commitlog/, consumequeue/, index/,
    # checkpoint, abort and lock.
    store_path_root_dir: str = "./data/store"
    # mappedFileSizeCommitLog: bytes per commit-log segment.  RocketMQ: 1 GiB;
    # ours 128 MiB (smaller sparse files, quicker retention steps).
    mapped_file_size_commit_log: int = 128 * 1024 * 1024
    # mappedFileSizeConsumeQueue: bytes per consume-queue file, a multiple of 20
    # (300,000 units = 6,000,000 bytes, RocketMQ's default).
    mapped_file_size_consume_queue: int = 300_000 * CQ_UNIT_SIZE
    # flushDiskType: ASYNC_FLUSH (the caller flushes the log every
    # flush_interval_commit_log ms) or SYNC_FLUSH (put waits for group commit).
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    # flushIntervalCommitLog: ms between the caller's log flushes in ASYNC_FLUSH.
    flush_interval_commit_log: int = 500
    # syncFlushTimeout: ms a SYNC_FLUSH put waits before FLUSH_DISK_TIMEOUT.
    sync_flush_timeout: int = 5000
    # fileReservedTime: hours a finished segment is kept (fractions allowed).
    file_reserved_time: float = 72
    # diskMaxUsedSpaceRatio: percent of the disk in use above which the oldest
    # segments are deleted whatever their age.
    disk_max_used_space_ratio: int = 75
    # maxMessageSize: largest body accepted, bytes (4 MiB).
    max_message_size: int = 4 * 1024 * 1024
    # checkCRCOnRecover: verify body CRCs while recovering.
    check_crc_on_recover: bool = True
    # messageIndexEnable: build index files (UNIQ_KEY and KEYS).
    message_index_enable: bool = True
    # maxHashSlotNum: hash slots per index file.  RocketMQ: 5,000,000; ours
    # 500,000 so an index file is 42 MB rather than 420 MB.
    max_hash_slot_num: int = 500_000
    # maxIndexNum: entries per index file.  RocketMQ: 20,000,000; ours 2,000,000.
    max_index_num: int = 2_000_000
    # maxTransferBytesOnMessageInMemory: default byte limit of one get_messages.
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    # maxTransferCountOnMessageInMemory: default count limit of one get_messages.
    max_transfer_count_on_message_in_memory: int = 32
    # warmMapedFileEnable: write every new commit-log segment with zeros and
    # sync it before any message goes in (blocks real on the device: a thin-
    # provisioned device running out fails the segment's creation, a refused
    # put, not the fsync of acknowledged data); the next segment is made ahead
    # in a worker thread.  Default off, as RocketMQ's: see docs/RELIABILITY.md.
    warm_maped_file_enable: bool = False
    # (ours, no RocketMQ key) when recovery finds a corrupt entry followed by
    # valid data: False = refuse to start (CorruptSegmentError), True = truncate
    # the log at the corrupt entry and start.
    truncate_on_corruption: bool = False

    def validate(self) -> None:
        if self.mapped_file_size_commit_log < 4096:
            raise StoreConfigError("mappedFileSizeCommitLog must be at least 4096 bytes")
        if self.mapped_file_size_consume_queue <= 0 or self.mapped_file_size_consume_queue % CQ_UNIT_SIZE:
            raise StoreConfigError("mappedFileSizeConsumeQueue must be a positive multiple of 20")
        if self.max_hash_slot_num <= 0 or self.max_index_num <= 1:
            raise StoreConfigError("maxHashSlotNum and maxIndexNum must be positive")
        if not isinstance(self.flush_disk_type, FlushDiskType):
            try:
                self.flush_disk_type = FlushDiskType(self.flush_disk_type)
            except ValueError:
                raise StoreConfigError(f"flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, not {self.flush_disk_type!r}") from None
