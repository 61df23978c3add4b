"""MQTT 5.0 topic aliases, one table per direction per network connection.

Rules kept here (5.0 section 3.3.2.3.4):

* Aliases live for one network connection only; a new connection starts
  with empty tables, whatever the session.
* Inbound (client -> server): an alias is 1..Topic Alias Maximum, the value
  the server sent in CONNACK (0 = none allowed). Anything else is Topic
  Alias Invalid (0x94). A PUBLISH with a topic name and an alias (re)binds
  the alias; one with an empty topic name uses the binding, and an unbound
  alias is a Protocol Error.
* Outbound (server -> client): optional. Aliases are 1..the client's Topic
  Alias Maximum from CONNECT. The first PUBLISH on a topic sends the name
  with a fresh alias; later ones send an empty name with the alias. When
  all aliases are bound the least recently used one is rebound (sent with
  the new name).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from ._reasons import ReasonCode, RemoteProtocolError

_NO_FREE: list[int] = []  # never appended to: only tables with a maximum bind aliases


class InboundTopicAliases:
    """Client-to-server aliases; ``MQTTConnection`` resolves them itself."""

    __slots__ = ("maximum", "_topics")

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self._topics: dict[int, str] | None = None  # made at the first alias bound

    def resolve(self, topic: str, alias: int) -> str:
        """The full topic name of a PUBLISH carrying ``alias``."""
        if not 1 <= alias <= self.maximum:
            raise RemoteProtocolError(
                f"topic alias {alias} outside 1..{self.maximum}", ReasonCode.TOPIC_ALIAS_INVALID
            )
        topics = self._topics
        if topic:
            if topics is None:
                topics = self._topics = {}
            topics[alias] = topic
            return topic
        try:
            return topics[alias]
        except (KeyError, TypeError):
            raise RemoteProtocolError(f"topic alias {alias} is not bound", ReasonCode.PROTOCOL_ERROR) from None


class OutboundTopicAliases:
    """Server-to-client aliases, least recently used rebound first. A table
    with maximum 0 (every 3.1.1 and most 5.0 connections) holds no containers."""

    __slots__ = ("maximum", "_aliases", "_free", "_next")

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self._aliases: OrderedDict[str, int] | dict = OrderedDict() if maximum else {}
        self._free: list[int] = [] if maximum else _NO_FREE
        self._next = 1

    def apply(self, publish):
        """``publish`` rewritten to use an alias (unchanged if none allowed)."""
        if not self.maximum or publish.topic_alias is not None:
            return publish
        topic = publish.topic
        alias = self._aliases.get(topic)
        if alias is not None:
            self._aliases.move_to_end(topic)
            return replace(publish, topic="", topic_alias=alias)
        if self._free:
            alias = self._free.pop()
        elif self._next <= self.maximum:
            alias = self._next
            self._next += 1
        else:
            _, alias = self._aliases.popitem(last=False)
        self._aliases[topic] = alias
        return replace(publish, topic_alias=alias)

    def forget(self, topic: str) -> None:
        """Drop a binding whose PUBLISH was never sent (e.g. too large)."""
        if not self.maximum:
            return
        alias = self._aliases.pop(topic, None)
        if alias is not None:
            self._free.append(alias)


# The table of every connection whose client takes no aliases: with maximum 0
# it holds no state, so one serves them all.
NO_OUTBOUND_ALIASES = OutboundTopicAliases(0)
