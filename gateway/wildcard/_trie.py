"""The subscription trie: which subscriptions match a topic name.

Rules kept here:

- Subscriptions live in one ``pygtrie.Trie`` keyed by the tuple of filter
  levels (the inner filter for ``$share/<group>/<filter>``). The value at a
  key holds the plain subscriptions ``{client_id: options}`` and the shared
  ones ``{group: {client_id: options}}`` of that filter. A key with no
  subscription left is deleted, so the trie never keeps empty values.
- A client has at most one subscription per exact filter text: subscribing
  again replaces the options (``subscribe`` returns False), as MQTT requires.
  ``a/+`` and ``$share/g/a/+`` are different subscriptions.
- ``options`` are opaque: stored, returned, never inspected or copied.
- :meth:`SubscriptionTrie.match` returns every matching subscription, several
  per client when its filters overlap; choosing (max QoS, subscription
  identifiers, one member of a share group) is the caller's job.
- Results are immutable and cached per topic name in a bounded LRU. Every
  change to the subscriptions bumps a generation counter, which invalidates
  all cached results at once; a cached result is never older than the last
  change.
- Matching follows ``_topic``: ``+`` is one level (empty ones too), ``#`` is
  the parent level and everything below, and a topic starting with ``$`` is
  not matched by a first level of ``+`` or ``#``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

import pygtrie

from ._cache import CacheInfo, GenerationLRU
from ._topic import validate_topic_name, parse_filter

__all__ = ["MatchResult", "SharedMatch", "Subscription", "SubscriptionTrie"]

_HAS_VALUE = pygtrie.Trie.HAS_VALUE
_HAS_SUBTRIE = pygtrie.Trie.HAS_SUBTRIE


class Subscription(NamedTuple):
    """One plain subscription that matched: ``filter`` is the client's text."""

    client_id: str
    filter: str
    options: Any


class SharedMatch(NamedTuple):
    """A share group whose filter matched; the caller picks one member.

    ``filter`` is the filter after ``$share/<group>/``; ``members`` is a tuple
    of ``(client_id, options)`` pairs in subscription order.
    """

    group: str
    filter: str
    members: tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class MatchResult:
    subscriptions: tuple[Subscription, ...] = ()
    shared: tuple[SharedMatch, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.subscriptions or self.shared)

    def client_ids(self) -> set[str]:
        """Every client id in the result (shared members included)."""
        ids = {s.client_id for s in self.subscriptions}
        for group in self.shared:
            ids.update(cid for cid, _ in group.members)
        return ids


_EMPTY = MatchResult()


class _Entry:
    """The subscriptions of one filter (one trie key)."""

    __slots__ = ("filter", "plain", "shared")

    def __init__(self, filter_text: str) -> None:
        self.filter = filter_text
        self.plain: dict[str, Any] = {}
        self.shared: dict[str, dict[str, Any]] = {}

    def __bool__(self) -> bool:
        return bool(self.plain or self.shared)


class SubscriptionTrie:
    """All subscriptions of the gateway, matched against topic names.

    ``cache_size`` bounds the per-topic match cache (0 disables it).
    """

    def __init__(self, *, cache_size: int = 10_000) -> None:
        self._trie: pygtrie.Trie = pygtrie.Trie()
        # client_id -> {filter text: trie key}; the filter text keeps
        # ``$share/<group>/`` so plain and shared subscriptions stay distinct.
        self._by_client: dict[str, dict[str, tuple[str, ...]]] = {}
        self._count = 0
        # bumped by every change; equal values mean equal subscription sets (read
        # for every routed message: a plain attribute, not a property)
        self.generation = 0
        self._cache: GenerationLRU[MatchResult] = GenerationLRU(cache_size)

    # -- changes --------------------------------------------------------

    def subscribe(self, client_id: str, topic_filter: str, options: Any = None) -> bool:
        """Add or replace a subscription; True if it is new, False if replaced.

        Raises :class:`TopicError` for an invalid filter.
        """
        parsed = parse_filter(topic_filter)
        key = parsed.levels
        entry = self._trie.get(key)
        if entry is None:
            entry = self._trie[key] = _Entry(parsed.filter)
        if parsed.group is None:
            members = entry.plain
        else:
            members = entry.shared.setdefault(parsed.group, {})
        is_new = client_id not in members
        members[client_id] = options
        if is_new:
            self._by_client.setdefault(client_id, {})[topic_filter] = key
            self._count += 1
        self.generation += 1
        return is_new

    def unsubscribe(self, client_id: str, topic_filter: str) -> bool:
        """Remove one subscription; True if it existed.

        Raises :class:`TopicError` for an invalid filter.
        """
        parsed = parse_filter(topic_filter)
        return self._remove(client_id, topic_filter, parsed.levels, parsed.group)

    def unsubscribe_all(self, client_id: str) -> int:
        """Remove every subscription of *client_id*; returns how many."""
        filters = self._by_client.get(client_id)
        if not filters:
            return 0
        removed = 0
        for text in list(filters):
            parsed = parse_filter(text)
            removed += self._remove(client_id, text, parsed.levels, parsed.group)
        return removed

    def _remove(
        self, client_id: str, text: str, key: tuple[str, ...], group: str | None
    ) -> bool:
        entry = self._trie.get(key)
        if entry is None:
            return False
        if group is None:
            members = entry.plain
        else:
            members = entry.shared.get(group)
            if members is None:
                return False
        if members.pop(client_id, _MISSING) is _MISSING:
            return False
        if group is not None and not members:
            del entry.shared[group]
        if not entry:
            del self._trie[key]
        filters = self._by_client[client_id]
        del filters[text]
        if not filters:
            del self._by_client[client_id]
        self._count -= 1
        self.generation += 1
        return True

    # -- queries --------------------------------------------------------

    def match(self, topic: str) -> MatchResult:
        """Every subscription matching the topic name *topic*.

        Raises :class:`TopicError` if *topic* is not a valid topic name
        (checked on cache misses only; a cached topic was valid).
        """
        generation = self.generation
        result = self._cache.get(topic, generation)
        if result is None:
            validate_topic_name(topic)
            result = self._build(topic)
            self._cache.put(topic, generation, result)
        return result

    def _build(self, topic: str) -> MatchResult:
        plain: list[Subscription] = []
        shared: list[SharedMatch] = []
        for entry in self._matching_entries(topic.split("/")):
            for cid, opts in entry.plain.items():
                plain.append(Subscription(cid, entry.filter, opts))
            for group, members in entry.shared.items():
                shared.append(SharedMatch(group, entry.filter, tuple(members.items())))
        if not plain and not shared:
            return _EMPTY
        return MatchResult(tuple(plain), tuple(shared))

    def _matching_entries(self, levels: list[str]) -> Iterator[_Entry]:
        if _NODES_READABLE:
            return _walk_nodes(self._trie._root, levels)  # noqa: SLF001
        return _walk_public(self._trie, levels)

    def subscriptions_of(self, client_id: str) -> dict[str, Any]:
        """``{filter text: options}`` of one client (``$share/...`` included)."""
        out = {}
        for text, key in self._by_client.get(client_id, {}).items():
            entry = self._trie[key]
            if text.startswith("$share/"):
                group = text[len("$share/"):].partition("/")[0]
                out[text] = entry.shared[group][client_id]
            else:
                out[text] = entry.plain[client_id]
        return out

    def cache_info(self) -> CacheInfo:
        return self._cache.info()

    def __len__(self) -> int:
        """Number of subscriptions (plain and shared members)."""
        return self._count

    def __contains__(self, client_id: object) -> bool:
        """True if *client_id* has at least one subscription."""
        return client_id in self._by_client


_MISSING = object()


# Two walkers with one contract: yield the _Entry of every filter matching
# ``levels``. The public one re-walks pygtrie from the root for each probe
# (has_node), about 1.5 us a call; the node one reads pygtrie's nodes
# (``_root``, ``node.children.get(step)``, ``node.value``), stable since
# pygtrie 2.0, and is several times faster. The import-time check falls back
# to the public walker if those internals ever change; the property test runs
# both.


def _walk_public(trie: pygtrie.Trie, levels: list[str]) -> Iterator[_Entry]:
    has_node = trie.has_node
    last = len(levels)
    # At level 0 a '$' topic only takes the literal branch.
    dollar = levels[0].startswith("$")
    stack: list[tuple[tuple[str, ...], int]] = [((), 0)]
    while stack:
        prefix, i = stack.pop()
        if i or not dollar:
            key = prefix + ("#",)
            if has_node(key) & _HAS_VALUE:
                yield trie[key]
        if i == last:
            continue
        steps = (levels[i],) if (dollar and not i) else (levels[i], "+")
        for step in steps:
            key = prefix + (step,)
            flags = has_node(key)
            if i + 1 == last and flags & _HAS_VALUE:
                yield trie[key]
            if flags & _HAS_SUBTRIE:
                stack.append((key, i + 1))


def _walk_nodes(root: Any, levels: list[str]) -> Iterator[_Entry]:
    last = len(levels)
    dollar = levels[0].startswith("$")
    stack = [(root, 0)]
    while stack:
        node, i = stack.pop()
        get = node.children.get
        if i or not dollar:
            child = get("#")
            if child is not None and isinstance(child.value, _Entry):
                yield child.value
        if i == last:
            continue
        level = levels[i]
        child = get(level)
        if child is not None:
            if i + 1 == last and isinstance(child.value, _Entry):
                yield child.value
            stack.append((child, i + 1))
        if i or not dollar:
            child = get("+")
            if child is not None:
                if i + 1 == last and isinstance(child.value, _Entry):
                    yield child.value
                stack.append((child, i + 1))


def _nodes_readable() -> bool:
    probe = pygtrie.Trie()
    probe[("a", "b")] = sentinel = _Entry("a/b")
    try:
        node = probe._root.children.get("a").children.get("b")  # noqa: SLF001
        return node.value is sentinel and probe._root.children.get("x") is None
    except AttributeError:
        return False


_NODES_READABLE = _nodes_readable()
