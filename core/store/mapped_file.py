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
"""

from __future__ import annotations

import mmap
import os

NAME_DIGITS = 20


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


class MappedFile:
    __slots__ = ("path", "start", "size", "fd", "mm")

    def __init__(self, path: str, start: int, size: int):
        self.path = path
        self.start = start
        self.size = size
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(self.fd).st_size != size:
                os.ftruncate(self.fd, size)
            self.mm = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise

    @classmethod
    def create(cls, directory: str, start: int, size: int) -> "MappedFile":
        return cls(os.path.join(directory, offset_to_name(start)), start, size)

    @property
    def end(self) -> int:
        return self.start + self.size

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def read(self, rel: int, n: int) -> bytes:
        return self.mm[rel : rel + n]

    def zero_from(self, rel: int) -> None:
        """Make bytes ``rel..size`` zeros (durably once synced)."""
        self.mm.close()
        os.ftruncate(self.fd, rel)
        os.ftruncate(self.fd, self.size)
        self.mm = mmap.mmap(self.fd, self.size)

    def close(self) -> None:
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
