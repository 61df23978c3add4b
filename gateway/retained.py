"""Retained messages: an index from MQTT topic to the stored PUBLISH.

Rules kept here:

* The retained message of a topic is the last PUBLISH with RETAIN set on
  it; its body stays where the publish stored it, in the commit log. The
  index keeps ``[physical offset, size]`` per topic and each change is a
  ``"ret"`` meta record, so the index is rebuilt at start by replay.
* A retained PUBLISH with an empty payload clears the topic (and is
  itself not retained).
* ``$SYS`` topics are retained in memory only (``local``): they are
  recomputed every interval and never stored.
* Finding the retained messages for a new subscription walks the index
  with ``topic_matches`` (so ``$`` topics are not matched by a leading
  wildcard); a message whose entry is gone (retention) is dropped from the
  index when found missing.
"""

from __future__ import annotations

from gateway.mapping import Outbound
from gateway.wildcard import TopicFilter, topic_matches


class RetainedIndex:
    def __init__(self) -> None:
        self.stored: dict[str, list] = {}  # topic -> [phys, size]
        self.local: dict[str, Outbound] = {}  # $SYS topic -> message

    def __len__(self) -> int:
        return len(self.stored) + len(self.local)

    def set(self, topic: str, phys: int, size: int) -> None:
        self.stored[topic] = [phys, size]

    def clear(self, topic: str) -> bool:
        return self.stored.pop(topic, None) is not None

    def matching(self, flt: TopicFilter) -> tuple[list[tuple[str, list]], list[Outbound]]:
        stored = [(t, ref) for t, ref in self.stored.items() if topic_matches(flt, t)]
        local = [o for t, o in self.local.items() if topic_matches(flt, t)]
        return stored, local
