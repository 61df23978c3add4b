"""Is memory after a topic flood bounded? Passes of subscribe-then-unsubscribe, in one process.

    python tests/faults/topic_memory.py [--topics 100000] [--passes 4] [--tracemalloc]

A broker and gateway in this process (as ``mqgate serve``), one 3.1.1 client
over TCP that subscribes ``--topics`` distinct topics (500 per SUBSCRIBE),
then unsubscribes them, ``--passes`` times with new names each pass. Prints
one JSON object: RSS at the start and after each pass (MiB). Growth per pass
is a leak; a first pass that raises RSS and later passes that do not is the
allocator keeping its high-water mark. ``--tracemalloc`` adds the Python heap
difference between the last two passes, with the five largest growths.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import tracemalloc

import trio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from gateway.mqtt import Subscribe, Subscription, SubAck, Unsubscribe, UnsubAck  # noqa: E402
from tests.gateway.conftest import Client, running_gateway  # noqa: E402

BATCH = 500


def rss_mib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return -1


async def main(topics: int, passes: int, trace: bool) -> dict:
    out: dict = {"topics": topics, "passes": passes}
    with tempfile.TemporaryDirectory() as tmp:
        async with running_gateway(tmp) as (_broker, _gw, port):
            c, _ = await Client.connect(port, "topic-flood", version=4)

            async def one_pass(p: int) -> None:
                for op in ("sub", "unsub"):
                    for start in range(0, topics, BATCH):
                        names = [f"flood/{p}/{i}/x" for i in range(start, min(topics, start + BATCH))]
                        if op == "sub":
                            await c.send(Subscribe(packet_id=c.next_pid(),
                                                   subscriptions=[Subscription(topic_filter=t, qos=0) for t in names]))
                            await c.expect(SubAck)
                        else:
                            await c.send(Unsubscribe(packet_id=c.next_pid(), topic_filters=names))
                            await c.expect(UnsubAck)

            out["rss_start_mib"] = rss_mib()
            out["rss_after_pass_mib"] = []
            before = None
            for p in range(passes):
                if trace and p == passes - 1:
                    tracemalloc.start(8)
                    before = tracemalloc.take_snapshot()
                await one_pass(p)
                gc.collect()
                out["rss_after_pass_mib"].append(rss_mib())
            if before is not None:
                stats = tracemalloc.take_snapshot().compare_to(before, "traceback")
                out["heap_growth_last_pass_kib"] = sum(s.size_diff for s in stats) // 1024
                out["largest_growths"] = [{"kib": s.size_diff // 1024, "where": s.traceback.format()[-2:]}
                                          for s in stats[:5]]
            await c.disconnect()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=100_000)
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--tracemalloc", action="store_true")
    a = ap.parse_args()
    print(json.dumps(trio.run(main, a.topics, a.passes, a.tracemalloc)))
