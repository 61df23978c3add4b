"""Queue allocation among the consumers of a group (Java ``AllocateMessageQueueAveragely``).

Pure: every member computes the same answer from the same sorted inputs,
so no coordination is needed beyond agreeing on the member list.

With ``q`` queues and ``c`` consumers, member ``i`` (its index in the sorted
id list) gets a contiguous run of ``q // c`` queues, one more for the
first ``q % c`` members; with more consumers than queues, the first ``q``
members get one each and the rest get none.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

__all__ = ["allocate_average"]

T = TypeVar("T")


def allocate_average(me: str, queues: Sequence[T], members: Sequence[str]) -> list[T]:
    """The slice of sorted ``queues`` that member ``me`` of sorted ``members`` owns."""
    if me not in members or not queues:
        return []
    q, c, i = len(queues), len(members), list(members).index(me)
    if i >= q:
        return []
    base, extra = divmod(q, c) if q > c else (1, 0)
    size = base + (1 if i < extra else 0)
    start = i * base + min(i, extra)
    return list(queues[start:start + size])
