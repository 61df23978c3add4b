"""`MappedFile`: one fixed-size file named by its starting offset, mapped in memory.

Rules kept:
- The name is the 20-digit zero-padded start offset (``UtilAll.offset2FileName``);
  the file always has its full size (a sparse file: unwritten bytes are zeros).
- Writes go through the map (a slice assignment, no system call); `sync`
  makes them durable with ``fdatasync`` on the descriptor, which flushes the
  pages dirtied through the map and, unlike ``mmap.flush``, releases the GIL.
- Nothing keeps a ``memoryview`` of the map past a call: readers get ``bytes``
  copies, so `close` never fails on exported buffers.
- `zero_from` erases the tail by shrinking and re-growing the file (the kernel
  frees the blocks and reads give zeros), so recovery never meets stale entries
  past a truncation point.
- A file made by `create` has its blocks allocated up front
  (``posix_fallocate``): a full disk fails the creation with ``OSError``
  (ENOSPC), which the store turns into a status.  A sparse file would fail
  later, inside a write through the map, as SIGBUS: the process dies.  A
  creation that fails leaves no file behind.  A file may also be created
  with only its first ``initial`` bytes allocated and grown with
  `allocate_to` before each write past ``allocated`` (consume queues: one
  6 MB file per MQTT session queue must not cost 6 MB of disk up front).
- A *warm* file (``warm=True``, RocketMQ's ``warmMapedFileEnable``) is
  created by writing zeros over all of it and ``fdatasync``: its blocks are
  real and written on the device before any data goes in, so a device that
  refuses new blocks (thin provisioning running out) fails the creation
  (``OSError``, no file left) rather than a later sync of acknowledged data.
  `zero_from` on a warm file writes zeros too, so it stays warm.
- `prefault` stores a byte back unchanged: only its owner calls it, before
  anyone appends into that page (the commit log, at its write position after
  recovery and on a segment it makes).
- `sync` after `close` is a no-op, and a close waits for a running sync: the
  flusher syncs outside the store lock, so retention or ``delete_queue`` may
  close a file it is syncing.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading

NAME_DIGITS = 20
_ZERO_WRITE_MAX = 1 << 20  # allocation steps up to this size are written as zeros
_ZEROS = bytes(_ZERO_WRITE_MAX)


def offset_to_name(offset: int) -> str:
    return f"{offset:0{NAME_DIGITS}d}"


def list_offset_files(directory: str) -> list[tuple[int, str]]:
    """(start offset, path) of the 20-digit files in ``directory``, sorted."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = [(int(n), os.path.join(directory, n)) for n in names if len(n) == NAME_DIGITS and n.isdigit()]
    out.sort()
    return out


def allocate(fd: int, offset: int, length: int) -> None:
    """Reserve disk blocks for ``[offset, offset + length)``; ENOSPC if the disk is full.
    File systems without fallocate keep a sparse file (the old behaviour)."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise


def write_zeros(fd: int, offset: int, end: int) -> None:
    """``pwrite`` zeros over ``[offset, end)`` (not synced); ``OSError`` (ENOSPC) if the disk refuses."""
    while offset < end:
        n = os.pwrite(fd, memoryview(_ZEROS)[: min(_ZERO_WRITE_MAX, end - offset)], offset)
        if n <= 0:
            raise OSError(errno.ENOSPC, "short write of zeros")
        offset += n


class MappedFile:
    __slots__ = ("path", "start", "size", "fd", "mm", "_io", "allocated", "warm")

    def __init__(self, path: str, start: int, size: int, *, preallocate: bool | int = False, warm: bool = False):
        self.path = path
        self.start = start
        self.size = size
        self.warm = warm
        # bytes from the start known to have disk blocks (an existing file: all of it,
        # unless its owner knows better, see ConsumeQueue.load)
        self.allocated = size if preallocate is True or preallocate is False else 0
        self._io = threading.Lock()  # orders sync against close
        created = preallocate and not os.path.exists(path)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if preallocate is True and warm:
                os.ftruncate(self.fd, size)  # full size first: a crash meanwhile leaves a file `load` accepts
                write_zeros(self.fd, 0, size)
                os.fdatasync(self.fd)  # the device's error, if any, is the creation's
            elif preallocate is True:
                allocate(self.fd, 0, size)
            if preallocate is not True and preallocate:
                self.allocate_to(preallocate)  # the first step, written before the file is sized
            if os.fstat(self.fd).st_size != size:
                os.ftruncate(self.fd, size)
            self.mm = mmap.mmap(self.fd, size)
        except BaseException as e:
            os.close(self.fd)
            self.fd = -1
            if created:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            if isinstance(e, OSError) and e.filename is None:  # say which file the disk refused
                raise OSError(e.errno, e.strerror, path) from None
            raise

    @classmethod
    def create(cls, directory: str, start: int, size: int, initial: int | None = None, *, warm: bool = False) -> "MappedFile":
        """A new file with its blocks allocated (only the first ``initial`` bytes
        if given; all of them written as zeros and synced if ``warm``);
        ``OSError`` (e.g. ENOSPC, or EIO from the sync) leaves no file."""
        return cls(os.path.join(directory, offset_to_name(start)), start, size,
                   preallocate=True if initial is None else max(1, initial), warm=warm)

    def allocate_to(self, rel_end: int) -> None:
        """Make sure bytes ``[0, rel_end)`` have disk blocks; ``OSError`` (ENOSPC) before any write.

        Small steps are written as zeros rather than fallocated: the blocks are
        then real and in the page cache, so the first store through the map
        does not fault on an unwritten extent (~2 ms each on ext4, which
        made the first message to 1,600 new session queues take seconds)."""
        if rel_end > self.allocated:
            rel_end = min(self.size, rel_end)
            n = rel_end - self.allocated
            if n > _ZERO_WRITE_MAX:
                allocate(self.fd, self.allocated, n)
            else:
                write_zeros(self.fd, self.allocated, rel_end)
            self.allocated = rel_end

    def prefault(self, rel: int) -> None:
        """Take now the write fault of the page holding byte ``rel`` (its byte
        stored back unchanged): the first store into a fallocated page of a
        fresh mapping costs ~2 ms on ext4, which would otherwise fall on the
        first message after a start or a roll."""
        if 0 <= rel < self.size:
            self.mm[rel] = self.mm[rel]

    @property
    def end(self) -> int:
        return self.start + self.size

    def sync(self) -> None:
        with self._io:
            if self.fd >= 0:
                os.fdatasync(self.fd)

    def read(self, rel: int, n: int) -> bytes:
        return self.mm[rel : rel + n]

    def zero_from(self, rel: int) -> None:
        """Make bytes ``rel..size`` zeros (durably once synced)."""
        if self.warm:  # written zeros, not freed blocks: the tail stays real on the device
            write_zeros(self.fd, rel, self.size)
            return
        self.mm.close()
        os.ftruncate(self.fd, rel)
        os.ftruncate(self.fd, self.size)
        if self.allocated == self.size:
            try:
                allocate(self.fd, rel, self.size - rel)
            except OSError:
                self.allocated = rel  # a full disk: the tail stays sparse, as before the cut
        else:
            self.allocated = min(self.allocated, rel)
        self.mm = mmap.mmap(self.fd, self.size)

    def close(self) -> None:
        with self._io:
            if self.fd >= 0:
                self.mm.close()
                os.close(self.fd)
                self.fd = -1

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
