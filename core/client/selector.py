"""Queue selectors for ordered sends (Java ``MessageQueueSelector``).

A selector is ``selector(queues, message, arg) -> MessageQueue``; ``queues``
are the topic's writable queues in route order. Messages that must stay in
order (the steps of one order) are sent with the same ``arg`` and so land
in the same queue, where a consumer reads them in order.

- `select_by_hash`: Java ``SelectMessageQueueByHash``: ``arg.hashCode() %
  n`` with Java's sign rules, so an int or str argument picks the same
  queue as a Java producer would (``String.hashCode`` for str).
- `select_random`: Java ``SelectMessageQueueByRandom``.
- `select_by_sharding_key`: hash of the message's sharding key property.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from core.client.model import Message, MessageQueue
from core.store.java_hash import java_string_hash

__all__ = [
    "SHARDING_KEY",
    "MessageQueueSelector",
    "java_hash",
    "select_by_hash",
    "select_by_sharding_key",
    "select_random",
]

SHARDING_KEY = "__SHARDINGKEY"  # Java 5.x / C++ master spelling (reference 4.9)

MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


def java_hash(value: Any) -> int:
    """Java ``hashCode()`` of an Integer, Long, Boolean or String argument."""
    if isinstance(value, bool):
        return 1231 if value else 1237
    if isinstance(value, int):
        if -2**31 <= value < 2**31:
            return value
        v = value & 0xFFFFFFFFFFFFFFFF
        h = (v ^ (v >> 32)) & 0xFFFFFFFF  # Long.hashCode
        return h - 2**32 if h >= 2**31 else h
    return java_string_hash(str(value))


def _java_index(h: int, n: int) -> int:
    r = abs(h) % n  # Java: (h % n) keeps the sign of h, then Math.abs
    return r


def select_by_hash(queues: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    return queues[_java_index(java_hash(arg), len(queues))]


def select_random(queues: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    return random.choice(queues)


def select_by_sharding_key(queues: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    key = msg.properties.get(SHARDING_KEY) if arg is None else arg
    return select_by_hash(queues, msg, key or "")
