"""SubscriptionTrie: matching, shared groups, changes, cache, property test."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.wildcard import _trie as _trie_module
from gateway.wildcard import (
    MatchResult,
    SharedMatch,
    Subscription,
    SubscriptionTrie,
    TopicError,
)


def brute_match(flt: str, topic: str) -> bool:
    """Independent oracle: recursive level-by-level matcher."""
    if flt.startswith("$share/"):
        flt = flt.split("/", 2)[2]
    f, t = flt.split("/"), topic.split("/")
    if t[0][:1] == "$" and f[0] in ("+", "#"):
        return False

    def rec(i: int, j: int) -> bool:
        if i == len(f):
            return j == len(t)
        if f[i] == "#":
            return True
        if j == len(t):
            return False
        return (f[i] == "+" or f[i] == t[j]) and rec(i + 1, j + 1)

    return rec(0, 0)


def plain_set(result: MatchResult) -> set:
    return {(s.client_id, s.filter, s.options) for s in result.subscriptions}


# (filter, topic, matches): the specification's examples and edge cases.
SPEC = [
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),
    ("#", "sport/tennis", True),
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("a/+/c", "a//c", True),
    ("+/+/+", "//", True),
    ("+", "$SYS", False),
    ("#", "$SYS/monitor/Clients", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/#", "$SYS/monitor/Clients", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ("$SYS/#", "$SYS", True),
    ("a/$x/#", "a/$x", True),
    ("+/$x", "a/$x", True),
]


@pytest.mark.parametrize("flt,topic,expected", SPEC)
def test_spec_examples(flt, topic, expected):
    trie = SubscriptionTrie()
    trie.subscribe("c", flt, 1)
    trie.subscribe("other", "zzz/never", 0)
    got = plain_set(trie.match(topic))
    assert got == ({("c", flt, 1)} if expected else set())
    assert brute_match(flt, topic) is expected


def test_all_spec_filters_in_one_trie():
    trie = SubscriptionTrie()
    filters = sorted({f for f, _, _ in SPEC})
    for i, f in enumerate(filters):
        trie.subscribe(f"c{i}", f, i)
    for topic in {t for _, t, _ in SPEC}:
        want = {(f"c{i}", f, i) for i, f in enumerate(filters) if brute_match(f, topic)}
        assert plain_set(trie.match(topic)) == want


def test_overlapping_subscriptions_of_one_client_all_returned():
    trie = SubscriptionTrie()
    trie.subscribe("c", "a/#", {"qos": 0})
    trie.subscribe("c", "a/+", {"qos": 1})
    trie.subscribe("c", "a/b", {"qos": 2})
    trie.subscribe("c", "$share/g/a/b", {"qos": 1})
    result = trie.match("a/b")
    assert sorted(result.subscriptions) == sorted(
        [
            Subscription("c", "a/#", {"qos": 0}),
            Subscription("c", "a/+", {"qos": 1}),
            Subscription("c", "a/b", {"qos": 2}),
        ]
    )
    assert result.shared == (SharedMatch("g", "a/b", (("c", {"qos": 1}),)),)
    assert result.client_ids() == {"c"}


def test_shared_groups_and_members():
    trie = SubscriptionTrie()
    assert trie.subscribe("m1", "$share/g1/s/+", "o1")
    assert trie.subscribe("m2", "$share/g1/s/+", "o2")
    assert trie.subscribe("m3", "$share/g2/s/+", "o3")
    assert trie.subscribe("m4", "$share/g1/s/#", "o4")
    assert trie.subscribe("p", "s/+", "op")
    result = trie.match("s/x")
    assert result.subscriptions == (Subscription("p", "s/+", "op"),)
    assert sorted(result.shared) == sorted(
        [
            SharedMatch("g1", "s/+", (("m1", "o1"), ("m2", "o2"))),
            SharedMatch("g2", "s/+", (("m3", "o3"),)),
            SharedMatch("g1", "s/#", (("m4", "o4"),)),
        ]
    )
    assert trie.unsubscribe("m1", "$share/g1/s/+")
    assert not trie.unsubscribe("m1", "$share/g1/s/+")
    assert not trie.unsubscribe("m3", "$share/g1/s/+")  # other group
    assert trie.unsubscribe("m3", "$share/g2/s/+")
    result = trie.match("s/x")
    assert sorted(result.shared) == sorted(
        [
            SharedMatch("g1", "s/+", (("m2", "o2"),)),
            SharedMatch("g1", "s/#", (("m4", "o4"),)),
        ]
    )


def test_subscribe_replace_unsubscribe_and_counts():
    trie = SubscriptionTrie()
    assert trie.subscribe("c", "a/+", 1) is True
    assert trie.subscribe("c", "a/+", 2) is False  # replaced
    assert trie.subscribe("d", "a/+", 3) is True
    assert len(trie) == 2 and "c" in trie
    assert plain_set(trie.match("a/b")) == {("c", "a/+", 2), ("d", "a/+", 3)}
    assert trie.unsubscribe("c", "a/+") is True
    assert trie.unsubscribe("c", "a/+") is False
    assert trie.unsubscribe("c", "never/subscribed") is False
    assert "c" not in trie and len(trie) == 1
    assert plain_set(trie.match("a/b")) == {("d", "a/+", 3)}


def test_unsubscribe_all_and_subscriptions_of():
    trie = SubscriptionTrie()
    trie.subscribe("c", "a/#", 1)
    trie.subscribe("c", "$share/g/a/#", 2)
    trie.subscribe("c", "b", 3)
    trie.subscribe("d", "a/#", 4)
    assert trie.subscriptions_of("c") == {"a/#": 1, "$share/g/a/#": 2, "b": 3}
    assert trie.subscriptions_of("nobody") == {}
    assert trie.unsubscribe_all("c") == 3
    assert trie.unsubscribe_all("c") == 0
    assert len(trie) == 1
    assert trie.match("b") == MatchResult()
    assert not trie.match("b")
    result = trie.match("a/x")
    assert plain_set(result) == {("d", "a/#", 4)} and result.shared == ()
    trie.unsubscribe_all("d")
    assert len(trie) == 0 and not trie.match("a/x")


def test_invalid_inputs_raise_topic_error():
    trie = SubscriptionTrie()
    with pytest.raises(TopicError):
        trie.subscribe("c", "a/#/b", None)
    with pytest.raises(TopicError):
        trie.unsubscribe("c", "$share//a")
    with pytest.raises(TopicError):
        trie.match("a/+")
    with pytest.raises(TopicError):
        trie.match("")
    assert len(trie) == 0


def test_cache_hits_and_invalidation_on_every_change():
    trie = SubscriptionTrie(cache_size=100)
    trie.subscribe("c", "a/+", 1)
    first = trie.match("a/b")
    assert trie.match("a/b") is first  # served from the cache
    assert trie.cache_info().hits == 1
    trie.subscribe("d", "a/#", 2)  # new subscription
    assert plain_set(trie.match("a/b")) == {("c", "a/+", 1), ("d", "a/#", 2)}
    trie.subscribe("c", "a/+", 5)  # replaced options
    assert ("c", "a/+", 5) in plain_set(trie.match("a/b"))
    trie.subscribe("e", "$share/g/a/b", 0)  # shared
    assert trie.match("a/b").shared == (SharedMatch("g", "a/b", (("e", 0),)),)
    trie.unsubscribe("d", "a/#")
    assert plain_set(trie.match("a/b")) == {("c", "a/+", 5)}
    trie.unsubscribe_all("e")
    assert trie.match("a/b").shared == ()
    gen = trie.generation
    assert not trie.unsubscribe("zz", "a/+")  # no change, no invalidation
    assert trie.generation == gen


def test_cache_is_bounded_lru():
    trie = SubscriptionTrie(cache_size=2)
    trie.subscribe("c", "#", None)
    for t in ("a", "b", "a", "c"):  # 'a' is used again, so 'b' is evicted
        trie.match(t)
    info = trie.cache_info()
    assert (info.size, info.maxsize, info.hits, info.misses) == (2, 2, 1, 3)
    trie.match("a")
    assert trie.cache_info().hits == 2
    trie.match("b")
    assert trie.cache_info().misses == 4


def test_cache_disabled():
    trie = SubscriptionTrie(cache_size=0)
    trie.subscribe("c", "a", 1)
    assert plain_set(trie.match("a")) == {("c", "a", 1)}
    assert plain_set(trie.match("a")) == {("c", "a", 1)}
    assert trie.cache_info().size == 0
    with pytest.raises(ValueError):
        SubscriptionTrie(cache_size=-1)


# -- property test: trie == brute force ------------------------------------

_LEVELS = ["a", "b", "", "$x", "$SYS", "+"]
level = st.sampled_from(_LEVELS)
topic_level = st.sampled_from(["a", "b", "", "$x", "$SYS", "c"])


@st.composite
def filters(draw):
    levels = draw(st.lists(level, max_size=4))
    if not levels or draw(st.booleans()):
        levels.append("#")
    flt = "/".join(levels) or "+"  # a lone empty level is no filter
    if draw(st.integers(0, 4)) == 0:
        flt = f"$share/{draw(st.sampled_from(['g', 'h']))}/{flt}"
    return flt


topics = st.lists(topic_level, min_size=1, max_size=5).map("/".join).filter(bool)


@pytest.mark.parametrize("node_walker", [True, False], ids=["nodes", "public"])
@settings(max_examples=300, deadline=None)
@given(
    subs=st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), filters()), max_size=25),
    removals=st.lists(st.integers(0, 30), max_size=5),
    probe=st.lists(topics, min_size=1, max_size=8),
)
def test_trie_matches_brute_force(node_walker, subs, removals, probe):
    # Both walkers (pygtrie nodes, pygtrie public API) must agree with the oracle.
    saved = _trie_module._NODES_READABLE
    _trie_module._NODES_READABLE = node_walker
    try:
        _check_against_brute_force(subs, removals, probe)
    finally:
        _trie_module._NODES_READABLE = saved


def test_node_walker_is_in_use():
    assert _trie_module._NODES_READABLE


def _check_against_brute_force(subs, removals, probe):
    trie = SubscriptionTrie(cache_size=4)
    model: dict[tuple[str, str], int] = {}
    for n, (cid, flt) in enumerate(subs):
        assert trie.subscribe(cid, flt, n) == ((cid, flt) not in model)
        model[(cid, flt)] = n
        if n in removals:  # interleave removals with matches (cache churn)
            trie.match(probe[0])
            victim = next(iter(model))
            assert trie.unsubscribe(*victim)
            del model[victim]
    assert len(trie) == len(model)
    for topic in probe + probe:  # the second pass hits the cache
        result = trie.match(topic)
        want_plain = {
            (cid, flt, n)
            for (cid, flt), n in model.items()
            if not flt.startswith("$share/") and brute_match(flt, topic)
        }
        assert plain_set(result) == want_plain
        want_shared = {}
        for (cid, flt), n in model.items():
            if flt.startswith("$share/") and brute_match(flt, topic):
                _, group, inner = flt.split("/", 2)
                want_shared.setdefault((group, inner), set()).add((cid, n))
        got_shared = {(s.group, s.filter): set(s.members) for s in result.shared}
        assert got_shared == want_shared
        assert len(result.shared) == len(got_shared)
