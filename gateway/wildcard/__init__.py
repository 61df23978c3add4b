"""gateway/wildcard: MQTT topic names, topic filters and the subscription trie.

Imports nothing of ours. Everything another room may use is re-exported here.

Validation (raise :class:`TopicError`, a ``ValueError`` whose message says
what is wrong; MQTT 3.1.1 section 4.7 and 5.0 section 4.7 / 4.8.2)::

    validate_topic_name(name: str) -> None        # PUBLISH / will topics
    validate_topic_filter(text: str) -> None      # SUBSCRIBE / UNSUBSCRIBE
    parse_filter(text: str) -> TopicFilter        # validated, split in levels
    TopicFilter(text, filter, levels, group)      # group is None unless $share
    topic_matches(filter: str | TopicFilter, topic: str) -> bool

``$share/<group>/<filter>`` is always read as a shared subscription (for
MQTT 3.1.1 clients too, like Mosquitto and EMQX do).

Matching many subscriptions at once::

    trie = SubscriptionTrie(cache_size=10_000)
    trie.subscribe(client_id, "a/+/c", options) -> bool   # True = new,
                                                           # False = replaced
    trie.unsubscribe(client_id, "a/+/c") -> bool          # True = existed
    trie.unsubscribe_all(client_id) -> int                # number removed
    trie.subscriptions_of(client_id) -> {filter text: options}
    result = trie.match("a/b/c")                          # MatchResult
    result.subscriptions  # tuple[Subscription(client_id, filter, options)]
    result.shared         # tuple[SharedMatch(group, filter, members)],
                          # members = ((client_id, options), ...) in
                          # subscription order; pick one member per group
    len(trie), client_id in trie, trie.generation, trie.cache_info()

``options`` is opaque to the trie (typically the MQTT 5 subscription options
and identifier). A client whose filters overlap appears once per matching
filter; the caller applies the MQTT 5 rules (highest QoS, every subscription
identifier, no-local). ``match`` results are immutable, cached per topic name
(LRU of ``cache_size`` entries) and invalidated by any subscription change.
``match`` raises :class:`TopicError` for an invalid topic name. The trie is
not thread-safe; the gateway uses it from one trio thread.
"""

from ._cache import CacheInfo
from ._topic import (
    MAX_TOPIC_BYTES,
    SHARE_PREFIX,
    TopicError,
    TopicFilter,
    parse_filter,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)
from ._trie import MatchResult, SharedMatch, Subscription, SubscriptionTrie

__all__ = [
    "MAX_TOPIC_BYTES",
    "SHARE_PREFIX",
    "CacheInfo",
    "MatchResult",
    "SharedMatch",
    "Subscription",
    "SubscriptionTrie",
    "TopicError",
    "TopicFilter",
    "parse_filter",
    "topic_matches",
    "validate_topic_filter",
    "validate_topic_name",
]
