"""A bounded LRU map from topic name to match result, stamped with a generation.

Rules kept here:

- The cache never holds more than ``maxsize`` entries; inserting into a full
  cache evicts the least recently used entry. ``maxsize == 0`` disables it.
- Every entry carries the generation it was computed at. :meth:`get` returns
  an entry only if its generation equals the one asked for, so bumping the
  owner's generation invalidates every entry at once in O(1); stale entries
  are overwritten or evicted later, never returned.
- Hit and miss counters only ever grow; :meth:`clear` resets the entries, not
  the counters.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, NamedTuple, TypeVar

__all__ = ["CacheInfo", "GenerationLRU"]

V = TypeVar("V")


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    size: int
    maxsize: int


class GenerationLRU(Generic[V]):
    __slots__ = ("_data", "_maxsize", "hits", "misses")

    def __init__(self, maxsize: int) -> None:
        if maxsize < 0:
            raise ValueError(f"cache size must be >= 0, not {maxsize}")
        self._data: OrderedDict[str, tuple[int, V]] = OrderedDict()
        self._maxsize = maxsize
        self.hits = 0
        self.misses = 0

    def get(self, key: str, generation: int) -> V | None:
        entry = self._data.get(key)
        if entry is not None and entry[0] == generation:
            self._data.move_to_end(key)
            self.hits += 1
            return entry[1]
        self.misses += 1
        return None

    def put(self, key: str, generation: int, value: V) -> None:
        if not self._maxsize:
            return
        data = self._data
        data[key] = (generation, value)
        data.move_to_end(key)
        if len(data) > self._maxsize:
            data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()

    def info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, len(self._data), self._maxsize)

    def __len__(self) -> int:
        return len(self._data)
