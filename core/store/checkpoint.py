"""The 4 KiB checkpoint file (reference 5.4) and the ``abort`` marker.

Layout: physicMsgTimestamp int64 @0, logicsMsgTimestamp int64 @8,
indexMsgTimestamp int64 @16, the rest zeros.  Each is the store timestamp of
the last entry known durable in the commit log, the consume queues and the
index.  RocketMQ 5 keeps masterFlushedOffset @24 and confirmPhyOffset @32
(zeros here).  Ours @40: the commit-log offset known durable (every byte
below it was fsynced before the page was written), and @48 a magic saying
the field is there (a checkpoint of an older store has zeros: unknown).
Recovery needs it after a power cut: past it, a hole (a page the kernel
never wrote back) followed by valid-looking entries is the torn tail of
writes nobody was told are durable, not corruption.  The file is rewritten
in place (one 4 KiB page, a single ``pwrite`` then ``fdatasync``), as
RocketMQ does with its mapped page.

The ``abort`` file exists while a store is running; finding it at start
means the last exit was abnormal.
"""

from __future__ import annotations

import os
import struct

SIZE = 4096
_LAYOUT = struct.Struct(">qqq")
_FLUSHED = struct.Struct(">qq")  # @40: log flushed offset, magic
_FLUSHED_AT = 40
_FLUSHED_MAGIC = 0x4D51_4754_464C_5348  # "MQGTFLSH"
SLACK_MS = 3000  # StoreCheckpoint.getMinTimestamp subtracts 3 s


class Checkpoint:
    def __init__(self, path: str):
        self.path = path
        self.physic_ts = 0
        self.logics_ts = 0
        self.index_ts = 0
        self.log_flushed: int | None = None  # None: unknown (an older checkpoint, or none)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        data = os.pread(self.fd, SIZE, 0)
        if len(data) >= _LAYOUT.size:
            self.physic_ts, self.logics_ts, self.index_ts = _LAYOUT.unpack_from(data, 0)
        if len(data) >= _FLUSHED_AT + _FLUSHED.size:
            flushed, magic = _FLUSHED.unpack_from(data, _FLUSHED_AT)
            if magic == _FLUSHED_MAGIC and flushed >= 0:
                self.log_flushed = flushed

    def min_ts(self) -> int:
        return max(min(self.physic_ts, self.logics_ts) - SLACK_MS, 0)

    def min_ts_index(self) -> int:
        return min(self.min_ts(), self.index_ts)

    def write(self) -> None:
        page = bytearray(SIZE)
        _LAYOUT.pack_into(page, 0, self.physic_ts, self.logics_ts, self.index_ts)
        if self.log_flushed is not None:
            _FLUSHED.pack_into(page, _FLUSHED_AT, self.log_flushed, _FLUSHED_MAGIC)
        os.pwrite(self.fd, page, 0)
        os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def create_abort(root: str) -> None:
    path = os.path.join(root, "abort")
    with open(path, "wb"):
        pass
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def abort_exists(root: str) -> bool:
    return os.path.exists(os.path.join(root, "abort"))


def remove_abort(root: str) -> None:
    try:
        os.unlink(os.path.join(root, "abort"))
    except FileNotFoundError:
        pass
