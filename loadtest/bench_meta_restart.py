"""Gateway restart time against session history (issue 17):
``python -m loadtest.bench_meta_restart [--cycles 10000 100000 1000000] [--clients 1000] [--dir DIR]``.

For each number of session connect/disconnect cycles, two stores get the
same history: ``history`` with compaction off (what a restart read before
issue 17: every record ever written) and ``compacted`` with the defaults
(``metaCompactionMinRecords`` 10000, ``metaCompactionRatio`` 2). A cycle is
what a persistent MQTT session's connect and disconnect write: two ``"sess"``
records of the shape ``Session.to_record`` gives (one subscription), written
with the gateway's own ``record`` through ``broker.send_many`` (ASYNC_FLUSH)
while the gateway's ``MetaLog`` watches and compacts, as in a running
gateway; the cycles go round ``--clients`` client ids, so live state stays
the same while history grows. Writing through real MQTT connections would
take hours for 1,000,000 cycles on this machine; the records are the same.

Then each store is closed cleanly and the gateway restarted over it: the
time from opening the broker to the gateway having restored its sessions
(``MQTTGateway.run`` started, no listener), split into the store's opening
and the gateway's restore, with the records the replay read.

Prints one JSON object: ``{"runs": [{"cycles", "mode", "records_written",
"records_read", "sessions", "open_s", "restore_s", "restart_s",
"compactions"}, ...]}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import trio

from core.broker import BrokerConfig, open_broker
from core.store import StoreConfig
from gateway.app import MQTTGateway
from gateway.meta import record
from gateway.meta_log import CompactionSettings, MetaLog

BATCH = 1000
OFF = CompactionSettings(min_records=1 << 62)


def _session(cid: str, gone: int | None) -> dict:
    return {"v": 5, "exp": 86400, "next": 0, "off": 0, "subs": {f"dev/{cid}/cmd": [1, False, False, 0, None]},
            "flows": {"receive_maximum": 32, "next": 1, "flows": []}, "gone": gone}


def _configs(root: Path) -> tuple[BrokerConfig, StoreConfig]:
    return (BrokerConfig(listen_port=0),
            StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=256 << 20))


async def _write(root: Path, cycles: int, clients: int, settings: CompactionSettings) -> tuple[int, int]:
    """(records written, compactions) for ``cycles`` connect/disconnect cycles."""
    async with open_broker(*_configs(root)) as broker:
        meta = MetaLog(broker, settings)
        await meta.replay()
        broker.add_stored_hook(meta.stored_hook)
        written = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(meta.run)
            now = int(time.time() * 1000)
            for start in range(0, cycles, BATCH // 2):
                items = []
                for c in range(start, min(cycles, start + BATCH // 2)):
                    cid = f"dev{c % clients}"
                    items.append(record("sess", cid, _session(cid, None)))
                    items.append(record("sess", cid, _session(cid, now)))
                await broker.send_many(items)
                written += len(items)
            with trio.fail_after(600):
                while meta.due():
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        return written, meta.compactions


async def _restart(root: Path) -> dict:
    t0 = time.perf_counter()
    async with open_broker(*_configs(root)) as broker:
        t1 = time.perf_counter()
        gw = MQTTGateway(broker, {"sysInterval": 0})
        async with trio.open_nursery() as nursery:
            await nursery.start(gw.run, [])
            t2 = time.perf_counter()
            nursery.cancel_scope.cancel()
        return {"records_read": gw.meta.last_replay.read, "sessions": len(gw.router.sessions),
                "open_s": round(t1 - t0, 4), "restore_s": round(t2 - t1, 4), "restart_s": round(t2 - t0, 4)}


async def bench(cycles: list[int], clients: int, base: Path) -> dict:
    runs = []
    for n in cycles:
        for mode, settings in (("history", OFF), ("compacted", CompactionSettings())):
            root = base / f"{n}-{mode}"
            shutil.rmtree(root, ignore_errors=True)
            written, compactions = await _write(root, n, clients, settings)
            runs.append({"cycles": n, "mode": mode, "records_written": written, "compactions": compactions,
                         **await _restart(root)})
            shutil.rmtree(root, ignore_errors=True)
    return {"clients": clients, "runs": runs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--dir", help="where the stores go (default: a temp dir, removed after)")
    args = p.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        print(json.dumps(trio.run(bench, args.cycles, args.clients, Path(tmp))))


if __name__ == "__main__":
    main()
