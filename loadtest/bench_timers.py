"""Timer-wheel benchmark: schedule N timers, let them fire, report rates and lateness.

    python -m loadtest.bench_timers [--count 1000000] [--min-delay 5] [--max-delay 35]
                                    [--precision-ms 1000] [--batch 256] [--quick] [--no-fire]

Prints one JSON object: schedule rate (timers accepted by the broker per
second, and filed in the wheel per second), RSS before and after, firing
lateness p50/p99/max in ms (store time of the delivered message minus the
requested delivery time; a timer never fires early), and how many fired.

Like `bench_store`, this file drives the broker in-process (it imports
``core``); the MQTT load generator in this folder does not.

The lateness is read back from the commit log after the run, so measuring
costs the timer service nothing while it fires.

Everything runs on one core (the broker's trio thread): with the default
delays (5-35 s) the first timers fire while the rest are still being
scheduled, and firing (a read, a decode and a send per timer) takes its
share of that core. ``--min-delay 60 --max-delay 120`` schedules all of
them before the first fires, which measures scheduling alone. RSS includes
the mapped commit log (every timer is stored twice: parked, then fired).

``--no-fire`` stops once every timer is filed (no firing, no lateness):
the machine-independent figure in the README is the instruction count of
such runs under ``valgrind --tool=callgrind`` (``--count 25600`` minus
``--count 5120``, divided by 20,480, with ``--min-delay 600``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time

import trio

from core.broker import BrokerConfig, TopicConfig, open_broker
from core.store import StoreConfig
from core.store.message import Message, decode_message
from core.timers import TIMER_OUT_MS, TIMER_TOPIC, TimerConfig, TimerMessageService

TOPIC = "TimerBench"
QUEUES = 8


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def percentile(sorted_values: list[int], p: float) -> float | None:
    if not sorted_values:
        return None  # (JSON null: nothing fired)
    k = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return float(sorted_values[k])


async def run(args) -> dict:
    root = tempfile.mkdtemp(prefix="bench_timers_", dir=args.dir)
    try:
        store_cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 << 20,
                                message_index_enable=False)
        timer_cfg = TimerConfig(precision_ms=args.precision_ms)
        rss0 = rss_mib()
        async with open_broker(BrokerConfig(default_topic_queue_nums=QUEUES), store_cfg) as broker:
            await broker.update_topic(TopicConfig(TOPIC, QUEUES, QUEUES))
            service = TimerMessageService(broker, timer_cfg)
            service.install()
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                rnd = random.Random(1)
                body = b"x" * args.body
                lo, span = args.min_delay * 1000, (args.max_delay - args.min_delay) * 1000
                uniform = rnd.random  # delays uniform in [min, max) ms
                t0 = time.perf_counter()
                sent = 0
                while sent < args.count:
                    n = min(args.batch, args.count - sent)
                    batch = [(Message(TOPIC, body, properties={"TIMER_DELAY_MS": str(lo + int(uniform() * span)),
                                                               "UNIQ_KEY": f"T{sent + i}"}), None)
                             for i in range(n)]
                    results = await broker.send_many(batch)
                    bad = [r for r in results if not r.ok]
                    if bad:
                        raise RuntimeError(f"send failed: {bad[0].status.name} {bad[0].remark}")
                    sent += n
                accepted_s = time.perf_counter() - t0
                # filed: the service has read every timer entry into the wheel
                while service._queue_offset < broker.max_offset(TIMER_TOPIC, 0):
                    await trio.sleep(0.01)
                filed_s = time.perf_counter() - t0
                rss_scheduled = rss_mib()
                deadline = time.monotonic() + args.max_delay + accepted_s + 30
                while not args.no_fire and service.fired < args.count and time.monotonic() < deadline:
                    await trio.sleep(0.2)
                fired = service.fired
                nursery.cancel_scope.cancel()
            late = []
            for q in range(0 if args.no_fire else QUEUES):
                offset = 0
                while True:
                    got = await broker.read_queue(TOPIC, q, offset, 1024)
                    if not got.entries:
                        break
                    for raw in got.entries:
                        m = decode_message(raw)
                        late.append(m.store_timestamp - int(m.properties[TIMER_OUT_MS]))
                    offset = got.next_begin_offset
        late.sort()
        return {
            "benchmark": "timers",
            "count": args.count,
            "precision_ms": timer_cfg.precision_ms,
            "delay_s": [args.min_delay, args.max_delay],
            "schedule_rate_accepted_per_s": round(args.count / accepted_s),
            "schedule_rate_filed_per_s": round(args.count / filed_s),
            "rss_mib": {"start": round(rss0, 1), "scheduled": round(rss_scheduled, 1),
                        "peak": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)},
            "fired": fired,
            "delivered_in_log": len(late),
            "lateness_ms": {"min": late[0] if late else None, "p50": percentile(late, 50),
                            "p99": percentile(late, 99), "max": late[-1] if late else None},
            "target": {"schedule_rate_per_s": 100_000, "p99_lateness_ms": timer_cfg.precision_ms + 50},
            "loadavg": open("/proc/loadavg").read().split()[:3],
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_timers", description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=1_000_000)
    p.add_argument("--min-delay", type=int, default=5, help="seconds")
    p.add_argument("--max-delay", type=int, default=35, help="seconds")
    p.add_argument("--precision-ms", type=int, default=1000)
    p.add_argument("--batch", type=int, default=256, help="messages per send_many call")
    p.add_argument("--body", type=int, default=100)
    p.add_argument("--dir", default=None, help="where the temporary store goes (default: system temp)")
    p.add_argument("--quick", action="store_true", help="100,000 timers, delays 2-12 s")
    p.add_argument("--no-fire", action="store_true", help="stop once every timer is filed (scheduling alone)")
    args = p.parse_args(argv)
    if args.quick:
        args.count, args.min_delay, args.max_delay = 100_000, 2, 12
    print(json.dumps(trio.run(run, args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
