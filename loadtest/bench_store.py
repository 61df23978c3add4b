"""Store benchmark: ``python -m loadtest.bench_store [--quick] [--dir DIR] [--only SECTION ...]``.

Prints one JSON object (messages per second):

- ``async``: ASYNC_FLUSH appends, one thread, for 100 B and 1 KiB bodies:
  ``append_encoded`` (the store's own work: the message was encoded by the
  caller, as the broker does outside the store), ``append`` (encode included),
  ``append_batch32`` (pre-encoded, 32 per call), ``append_uniq_key`` (encode
  included, every message carries a UNIQ_KEY, so the index work at flush is
  counted too).  Every figure includes a final ``flush()`` in its time.
- ``sync``: SYNC_FLUSH ``put`` (encode + append + group commit) from 1, 16
  and 64 producer threads, 100 B bodies, with fsyncs/s and messages per fsync.
- ``sync_event_loop_model``: the same SYNC_FLUSH work as the broker does it:
  one thread appends for 16 / 64 in-flight producers and acknowledges what
  the group commit covered, one worker thread loops on ``wait_flushed``.
- ``reads``: ``get_messages`` of 32 at a time over what was written
  (messages/s), and ``read_at`` lookups/s.
- ``broker``: what users hit: ``core.broker`` (trio) with N concurrent
  sender tasks, each awaiting ``broker.send`` of a new 100 B `Message` in a
  loop (checks, stamping, UNIQ_KEY, encode, append, and in SYNC_FLUSH the
  trio-level group commit), for ASYNC_FLUSH and SYNC_FLUSH; plus
  ``send_many`` of 32 from one task (the gateway's batched path).
  Sends/s, and for SYNC_FLUSH flushes/s and messages per flush.
- ``sql92``: the cost per message of a broker-side SQL92 filter, in ns, for
  a simple (``temp > 30``) and a compound expression: ``evaluate_ns`` (the
  compiled expression on a properties dict), ``entry_ns`` (what a pull
  pays per scanned entry: properties read from the raw entry, then the
  expression), and ``get_messages`` of 32 over the whole queue with the
  filter against without (scanned entries per second, and their ratio).

- ``roll``: the appends that roll to a new commit-log segment (1 KiB
  bodies, 32 MiB segments, 4 rolls), with ``warmMapedFileEnable`` off, on,
  and on without the thread that makes the next segment ahead
  (``warm_no_ahead``: each roll writes and syncs its segment itself):
  ``roll_ms`` per rolling append, ``other_max_ms`` (the slowest other
  append), ``appends_per_s``, and ``restart_ms`` (a clean restart of that
  store: with the key, the rest of the current segment is zeroed and synced).

``--only`` runs some sections (``async``, ``sync``, ``sync_event_loop_model``,
``reads``, ``broker``, ``sql92``, ``roll``); ``--repeat N`` runs each N times and reports every run.
``--warm`` sets ``warmMapedFileEnable`` for every store the other sections make.

This is the one file of ``loadtest`` that imports project code (the issue
asks for the store benchmark here).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time

import trio

from core.broker import BrokerConfig, SendStatus, TopicConfig, open_broker, parse_subscription
from core.store import EncodedMessage, FlushDiskType, Message, MessageStore, StoreConfig, entry_properties


_options = {"warm": False}  # --warm


def _store(root: str, flush: FlushDiskType) -> MessageStore:
    shutil.rmtree(root, ignore_errors=True)
    s = MessageStore(StoreConfig(store_path_root_dir=root, flush_disk_type=flush, warm_maped_file_enable=_options["warm"]))
    s.start()
    return s


def _msgs(n: int, size: int, uniq: bool = False) -> list[Message]:
    body = b"x" * size
    out = []
    for i in range(n):
        props = {"TAGS": "t%d" % (i % 4)}
        if uniq:
            props["UNIQ_KEY"] = "7F0000010000%020X" % i
        out.append(Message(topic="Bench", body=body, queue_id=i % 8, properties=props))
    return out


def bench_async(root: str, n: int, size: int) -> dict:
    out = {}
    msgs = _msgs(n, size)
    encs = [EncodedMessage(m) for m in msgs]

    s = _store(root, FlushDiskType.ASYNC_FLUSH)
    t = time.perf_counter()
    for e in encs:
        s.append(e)
    s.flush()
    out["append_encoded"] = round(n / (time.perf_counter() - t))
    s.shutdown()

    s = _store(root, FlushDiskType.ASYNC_FLUSH)
    t = time.perf_counter()
    for m in msgs:
        s.append(m)
    s.flush()
    out["append"] = round(n / (time.perf_counter() - t))
    s.shutdown()

    encs = [EncodedMessage(m) for m in msgs]
    s = _store(root, FlushDiskType.ASYNC_FLUSH)
    t = time.perf_counter()
    for i in range(0, n, 32):
        s.append_batch(encs[i : i + 32])
    s.flush()
    out["append_batch32"] = round(n / (time.perf_counter() - t))
    s.shutdown()

    msgs = _msgs(n, size, uniq=True)
    s = _store(root, FlushDiskType.ASYNC_FLUSH)
    t = time.perf_counter()
    for m in msgs:
        s.append(m)
    s.flush()
    out["append_uniq_key"] = round(n / (time.perf_counter() - t))
    s.shutdown()
    return out


def bench_sync(root: str, threads: int, seconds: float, size: int = 100) -> dict:
    s = _store(root, FlushDiskType.SYNC_FLUSH)
    body = b"x" * size
    stop = time.perf_counter() + seconds
    counts = [0] * threads
    barrier = threading.Barrier(threads + 1)

    def producer(k: int) -> None:
        m = Message(topic="Bench", body=body, queue_id=k % 8, properties={"TAGS": "t"})
        barrier.wait()
        c = 0
        while time.perf_counter() < stop:
            r = s.put(m)
            if r.status.name != "PUT_OK":
                raise RuntimeError(r.status)
            c += 1
        counts[k] = c

    ts = [threading.Thread(target=producer, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    syncs0 = s.commitlog.sync_count
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    syncs = s.commitlog.sync_count - syncs0
    s.shutdown()
    total = sum(counts)
    return {"puts_per_s": round(total / elapsed), "fsyncs_per_s": round(syncs / elapsed), "msgs_per_fsync": round(total / max(syncs, 1), 1)}


def bench_sync_event_loop(root: str, in_flight: int, seconds: float, size: int = 100) -> dict:
    """The broker's model: one thread (the trio loop) appends for ``in_flight``
    concurrent producers and acknowledges those the group commit covered; one
    worker thread (``trio.to_thread``) loops on ``wait_flushed``."""
    s = _store(root, FlushDiskType.SYNC_FLUSH)
    enc_body = b"x" * size
    cl = s.commitlog
    done = threading.Event()
    progress = threading.Condition()

    def flusher() -> None:
        while not done.is_set():
            target = cl.write_pos
            if target > cl.flushed:
                s.wait_flushed(target, 5.0)
                with progress:
                    progress.notify()
            else:
                time.sleep(0.0001)

    ft = threading.Thread(target=flusher)
    ft.start()
    pending: list[int] = []  # end offsets of unacknowledged puts, in order
    acked = 0
    t0 = time.perf_counter()
    stop = t0 + seconds
    syncs0 = cl.sync_count
    while time.perf_counter() < stop:
        while len(pending) < in_flight:
            r = s.append(Message(topic="Bench", body=enc_body, queue_id=len(pending) % 8, properties={"TAGS": "t"}))
            pending.append(r.end_offset)
        flushed = cl.flushed
        i = 0
        while i < len(pending) and pending[i] <= flushed:
            i += 1
        if i:
            acked += i
            del pending[:i]
        else:
            with progress:
                progress.wait(0.01)
    elapsed = time.perf_counter() - t0
    done.set()
    ft.join()
    syncs = cl.sync_count - syncs0
    s.shutdown()
    return {"acked_per_s": round(acked / elapsed), "fsyncs_per_s": round(syncs / elapsed), "msgs_per_fsync": round(acked / max(syncs, 1), 1)}


def bench_reads(root: str, n: int) -> dict:
    s = _store(root, FlushDiskType.ASYNC_FLUSH)
    rs = [s.append(m) for m in _msgs(n, 100)]
    t = time.perf_counter()
    got = 0
    for q in range(8):
        off = 0
        while True:
            r = s.get_messages("Bench", q, off, 32)
            if not r.messages:
                break
            got += len(r.messages)
            off = r.next_begin_offset
    get_rate = got / (time.perf_counter() - t)
    sample = [r.physical_offset for r in rs[:: max(1, n // 50000)]]
    t = time.perf_counter()
    for p in sample:
        s.read_at(p)
    read_at_rate = len(sample) / (time.perf_counter() - t)
    s.shutdown()
    assert got == n
    return {"get_messages_msgs_per_s": round(get_rate), "read_at_per_s": round(read_at_rate)}


async def _broker_run(root: str, flush: FlushDiskType, senders: int, seconds: float, batch: int = 0, size: int = 100) -> dict:
    shutil.rmtree(root, ignore_errors=True)
    cfg = BrokerConfig(flush_disk_type=flush, default_topic_queue_nums=8)
    body = b"x" * size
    counts = [0] * senders
    async with open_broker(cfg, StoreConfig(store_path_root_dir=root, warm_maped_file_enable=_options["warm"])) as broker:
        await broker.update_topic(TopicConfig("Bench", 8, 8))
        stop = trio.current_time() + seconds

        async def sender(k: int) -> None:
            c = 0
            qid = k % 8
            while trio.current_time() < stop:
                if batch:
                    rs = await broker.send_many([(Message(topic="Bench", body=body, properties={"TAGS": "t"}), qid)
                                                 for _ in range(batch)])
                    if rs[-1].status is not SendStatus.SEND_OK:
                        raise RuntimeError(rs[-1])
                    c += batch
                else:
                    r = await broker.send(Message(topic="Bench", body=body, properties={"TAGS": "t"}), queue_id=qid)
                    if r.status is not SendStatus.SEND_OK:
                        raise RuntimeError(r)
                    c += 1
            counts[k] = c

        flushes0 = broker.flush_count
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(senders):
                nursery.start_soon(sender, k)
        elapsed = time.perf_counter() - t0
        flushes = broker.flush_count - flushes0
    total = sum(counts)
    out = {"sends_per_s": round(total / elapsed)}
    if flush is FlushDiskType.SYNC_FLUSH:
        out["flushes_per_s"] = round(flushes / elapsed)
        out["msgs_per_flush"] = round(total / max(flushes, 1), 1)
    return out


def bench_broker(root: str, seconds: float) -> dict:
    def run(flush, senders, batch=0):
        return trio.run(_broker_run, root, flush, senders, seconds, batch)

    A, S = FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH
    return {
        "ASYNC_FLUSH": {"1_senders": run(A, 1), "64_senders": run(A, 64), "send_many32_1_sender": run(A, 1, 32)},
        "SYNC_FLUSH": {f"{k}_senders": run(S, k) for k in (1, 16, 64)},
    }


def bench_roll(root: str, segment_size: int = 32 << 20, rolls: int = 4) -> dict:
    out = {}
    encs = [EncodedMessage(m) for m in _msgs(1000, 1024)]
    n = rolls * segment_size // encs[0].size + 1
    for name, warm, ahead in (("off", False, True), ("warm", True, True), ("warm_no_ahead", True, False)):
        shutil.rmtree(root, ignore_errors=True)
        s = MessageStore(StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=segment_size,
                                     warm_maped_file_enable=warm))
        s.start()
        cl = s.commitlog
        if not ahead:
            cl.ahead.close()
            cl.ahead = None  # every roll makes (writes and syncs) its segment itself
        roll_s, other_max = [], 0.0
        seg = cl.current
        t0 = time.perf_counter()
        for i in range(n):
            t = time.perf_counter()
            s.append(encs[i % 1000])  # stamped in place each time: reusing the encoding is fine
            dt = time.perf_counter() - t
            if cl.current is not seg:
                seg = cl.current
                roll_s.append(dt)
            elif dt > other_max:
                other_max = dt
        elapsed = time.perf_counter() - t0
        s.shutdown()
        s = MessageStore(StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=segment_size,
                                     warm_maped_file_enable=warm))
        t = time.perf_counter()
        s.start()  # with the key: the rest of the current segment is zeroed and synced
        start_s = time.perf_counter() - t
        s.shutdown()
        out[name] = {"roll_ms": [round(x * 1000, 2) for x in roll_s], "other_max_ms": round(other_max * 1000, 2),
                     "appends_per_s": round(n / elapsed), "restart_ms": round(start_s * 1000, 1)}
    return out


SECTIONS = ("async", "sync", "sync_event_loop_model", "reads", "broker", "sql92", "roll")


SQL92_EXPRESSIONS = {
    "simple": "temp > 30",
    "compound": "temp > 30 AND site IN ('lab', 'farm') AND (TAGS IS NOT NULL OR alarm = 'on')",
}


def bench_sql92(root: str, n: int) -> dict:
    s = _store(root, FlushDiskType.ASYNC_FLUSH)
    for i in range(n):
        props = {"TAGS": "t%d" % (i % 4), "temp": str(i % 60), "site": ("lab", "farm", "sea")[i % 3]}
        s.append(Message(topic="Sql", body=b"x" * 100, queue_id=0, properties=props))
    s.flush()
    raws = s.get_messages("Sql", 0, 0, 1000).messages
    props = [entry_properties(r) for r in raws]
    out: dict = {}

    def scan(entry_filter) -> tuple[int, float]:
        t, off, scanned, kept = time.perf_counter(), 0, 0, 0
        while off < n:
            r = s.get_messages("Sql", 0, off, 32, entry_filter=entry_filter)
            scanned += r.next_begin_offset - off
            kept += len(r.messages)
            off = r.next_begin_offset
        return kept, scanned / (time.perf_counter() - t)

    _, plain_rate = scan(None)
    for name, text in SQL92_EXPRESSIONS.items():
        sub = parse_subscription("Sql", text, "SQL92")
        sql, entry_filter = sub.sql, sub.entry_filter()
        rounds = max(1, 200_000 // len(props))
        t = time.perf_counter()
        for _ in range(rounds):
            for p in props:
                sql.matches(p)
        evaluate_ns = (time.perf_counter() - t) / (rounds * len(props)) * 1e9
        t = time.perf_counter()
        for _ in range(rounds):
            for raw in raws:
                entry_filter(raw)
        entry_ns = (time.perf_counter() - t) / (rounds * len(raws)) * 1e9
        kept, rate = scan(entry_filter)
        out[name] = {"expression": text, "evaluate_ns": round(evaluate_ns), "entry_ns": round(entry_ns),
                     "matched": kept, "get_messages_scanned_per_s": round(rate),
                     "vs_no_filter": round(rate / plain_rate, 3)}
    out["no_filter_get_messages_scanned_per_s"] = round(plain_rate)
    s.shutdown()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller counts and shorter runs")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir on the current disk)")
    ap.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS, help="sections to run (default: all)")
    ap.add_argument("--repeat", type=int, default=1, help="run each section this many times (a list of results)")
    ap.add_argument("--warm", action="store_true", help="warmMapedFileEnable on in every section's store")
    args = ap.parse_args(argv)
    _options["warm"] = args.warm
    n = 50_000 if args.quick else 300_000
    seconds = 1.0 if args.quick else 3.0
    base = tempfile.mkdtemp(prefix="bench_store_", dir=args.dir or os.getcwd())
    runs = {
        "async": lambda: {"100B": bench_async(root, n, 100), "1KiB": bench_async(root, n // 4 if args.quick else n, 1024)},
        "sync": lambda: {f"{k}_threads": bench_sync(root, k, seconds) for k in (1, 16, 64)},
        "sync_event_loop_model": lambda: {f"{k}_in_flight": bench_sync_event_loop(root, k, seconds) for k in (16, 64)},
        "reads": lambda: bench_reads(root, n),
        "broker": lambda: bench_broker(root, seconds),
        "sql92": lambda: bench_sql92(root, n // 5),
        "roll": lambda: bench_roll(root, (8 << 20) if args.quick else (32 << 20)),
    }
    try:
        root = os.path.join(base, "store")
        result: dict = {"messages": n, "warmMapedFileEnable": args.warm}
        for name in SECTIONS:
            if name in args.only:
                got = [runs[name]() for _ in range(args.repeat)]
                result[name] = got[0] if args.repeat == 1 else got
        with open("/proc/loadavg") as f:
            result["loadavg"] = f.read().split()[:3]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
