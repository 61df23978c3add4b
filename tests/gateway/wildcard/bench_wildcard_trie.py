"""Micro-benchmark of SubscriptionTrie.match (not collected by pytest).

Run: .venv/bin/python tests/gateway/wildcard/bench_wildcard_trie.py [n_subs]

Builds ``n_subs`` subscriptions of mixed shapes (exact device topics, one-level
and multi-level wildcards, leading ``+``, shared groups), then matches a fixed
list of 2000 topics: once with the cache off (every call is a miss: trie walk,
result building, topic validation) and once with a warm cache (every call is
a hit). Prints one JSON line.
"""

import json
import random
import sys
import time

from gateway.wildcard import SubscriptionTrie


def build(n: int, cache_size: int) -> SubscriptionTrie:
    rnd = random.Random(1)
    trie = SubscriptionTrie(cache_size=cache_size)
    for i in range(n):
        dev = rnd.randrange(n)
        site = rnd.randrange(100)
        shape = i % 10
        if shape < 4:
            flt = f"site/{site}/dev/{dev}/telemetry"
        elif shape < 6:
            flt = f"site/{site}/dev/{dev}/+"
        elif shape == 6:
            flt = f"site/{site}/#"
        elif shape == 7:
            flt = f"+/{site}/dev/+/alerts"
        elif shape == 8:
            flt = f"$share/g{site % 10}/site/{site}/dev/+/telemetry"
        else:
            flt = f"site/+/dev/{dev}/#"
        trie.subscribe(f"client-{i}", flt, i % 3)
    return trie


def topics(n: int) -> list[str]:
    rnd = random.Random(2)
    kinds = ("telemetry", "alerts", "status")
    return [
        f"site/{rnd.randrange(100)}/dev/{rnd.randrange(n)}/{rnd.choice(kinds)}"
        for _ in range(2000)
    ]


def rate(trie: SubscriptionTrie, names: list[str], rounds: int) -> float:
    match = trie.match
    start = time.perf_counter()
    for _ in range(rounds):
        for t in names:
            match(t)
    return rounds * len(names) / (time.perf_counter() - start)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    names = topics(n)
    cold = build(n, cache_size=0)
    miss = rate(cold, names, 3)
    warm = build(n, cache_size=len(names))
    rate(warm, names, 1)  # fill the cache
    hit = rate(warm, names, 20)
    info = warm.cache_info()
    avg = sum(len(cold.match(t).subscriptions) + len(cold.match(t).shared)
              for t in names) / len(names)
    print(json.dumps({
        "subscriptions": len(cold),
        "topics": len(names),
        "avg_matches_per_topic": round(avg, 2),
        "miss_matches_per_s": round(miss),
        "hit_matches_per_s": round(hit),
        "cache_hits": info.hits,
        "cache_misses": info.misses,
    }))


if __name__ == "__main__":
    main()
