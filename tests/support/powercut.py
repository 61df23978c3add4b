"""Power-cut images of a live store, for recovery tests (issue 17).

``SyncRecorder`` wraps the process's real ``os.fsync`` / ``os.fdatasync``:
each call still happens, and just before it the layer copies the file it is
about to make durable (path from ``/proc/self/fd``). Everything written to
that file before the call is in the copy (the store writes through a shared
map or ``pwrite``, so a read sees it), so after the call returns the copy is
a lower bound of what the disk holds: the *durable* content. Nothing of the
store is replaced; it runs on real files.

``SyncRecorder.cut(dest, rng)`` is the power cut: for each file under the
store, the image starts from its durable content (zeros, or no file at all,
for a file never synced) and takes each 4 KiB page that differs from the
page cache's current content either as durable (the write-back never
happened), as current (it did), or torn: a prefix of its 512-byte sectors
current, the rest durable. That is "everything up to the last fsync of each
file plus an arbitrary subset of later writes", at the granularity the
kernel writes back. A file never synced may be missing altogether, unless
a directory fsync made its entry durable (the ``abort`` marker). Files
deleted since their last sync stay deleted (an unlink that is not reverted;
the store never deletes data it still needs).

``campaign(rounds, seed)`` runs rounds of: a store under random puts (SYNC_FLUSH
and ASYNC_FLUSH), flushes and in-flight appends, a cut at a random moment,
recovery of the real store from the image, and the checks: it starts
(a power cut is not corruption), every entry it serves is one that was
written, byte for byte, at that queue offset; every acknowledged entry (a
SYNC_FLUSH put that returned PUT_OK, or anything below the offset a
``flush()`` returned) is there; a cut tail is reported with its file and
offset. ``python tests/support/powercut.py --rounds 500 --seed 1`` prints
the figures as JSON (the long variant for ``make faults``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

PAGE = 4096
SECTOR = 512


class SyncRecorder:
    """Records the durable content of every file under ``root`` at each fsync."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = os.path.realpath(root)
        self.durable: dict[str, bytes] = {}  # path relative to root -> content at its last sync
        self.entries: set[str] = set()  # paths whose directory entry a directory fsync made durable
        self.syncs = 0
        self._lock = threading.Lock()
        self._real: dict[str, object] = {}

    def _wrap(self, name: str):
        real = getattr(os, name)
        self._real[name] = real

        def synced(fd: int) -> None:
            rel = self._relpath(fd)
            names = None
            if rel is not None and os.path.isdir(f"/proc/self/fd/{fd}"):
                names = [os.path.normpath(os.path.join(rel, n)) for n in os.listdir(f"/proc/self/fd/{fd}")]
            content = self._read(fd) if rel is not None and names is None else None
            real(fd)
            with self._lock:
                if content is not None:
                    self.durable[rel] = content
                    self.syncs += 1
                if names is not None:
                    self.entries.update(names)

        return synced

    def _relpath(self, fd: int) -> str | None:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        if not (path == self.root or path.startswith(self.root + os.sep)) or path.endswith(" (deleted)"):
            return None
        return os.path.relpath(path, self.root)

    @staticmethod
    def _read(fd: int) -> bytes | None:
        try:
            size = os.fstat(fd).st_size
            if not os.path.isfile(f"/proc/self/fd/{fd}"):
                return None
            return os.pread(fd, size, 0)
        except OSError:
            return None

    @contextmanager
    def recording(self):
        os.fsync = self._wrap("fsync")
        os.fdatasync = self._wrap("fdatasync")
        try:
            yield self
        finally:
            os.fsync = self._real["fsync"]
            os.fdatasync = self._real["fdatasync"]

    def cut(self, dest: str | os.PathLike, rng: random.Random) -> dict:
        """Write the power-cut image of ``root`` to ``dest``; return what it did
        (pages kept durable, written, torn; files never synced, dropped)."""
        with self._lock:
            durable = dict(self.durable)
            entries = set(self.entries)
        stats = {"pages_lost": 0, "pages_written": 0, "pages_torn": 0, "files_unsynced": 0, "files_dropped": 0}
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, self.root)
                try:
                    with open(path, "rb") as f:
                        current = f.read()
                except FileNotFoundError:
                    continue
                base = durable.get(rel)
                out = os.path.join(dest, rel)
                os.makedirs(os.path.dirname(out), exist_ok=True)
                if base is None:
                    stats["files_unsynced"] += 1
                    if rel not in entries and rng.random() < 0.2:  # its directory entry never reached the disk
                        stats["files_dropped"] += 1
                        continue
                    base = bytes(len(current))
                with open(out, "wb") as f:
                    f.write(_mix(base, current, rng, stats))
        return stats


def _mix(base: bytes, current: bytes, rng: random.Random, stats: dict) -> bytes:
    size = len(current)
    img = bytearray(base[:size].ljust(size, b"\0"))
    for p in range(0, size, PAGE):
        new = current[p:p + PAGE]
        if img[p:p + PAGE] == new:
            continue
        roll = rng.random()
        if roll < 0.4:
            stats["pages_lost"] += 1
        elif roll < 0.8:
            img[p:p + PAGE] = new
            stats["pages_written"] += 1
        else:
            sectors = rng.randrange(1, PAGE // SECTOR)
            img[p:p + sectors * SECTOR] = new[:sectors * SECTOR]
            stats["pages_torn"] += 1
    return bytes(img)


# ---- the campaign ------------------------------------------------------------------------------

TOPICS = ("pa", "pb")


@dataclass
class Figures:
    rounds: int = 0
    puts: int = 0
    acked: int = 0  # entries that had to survive
    recovered: int = 0  # entries served after recovery
    truncated_entries: int = 0  # written, not acknowledged, not recovered
    truncations_reported: int = 0  # recoveries that cut a tail and said where
    pages_lost: int = 0
    pages_torn: int = 0
    violations: list[str] = field(default_factory=list)


def _body(seq: int, rng: random.Random) -> bytes:
    n = rng.choice((10, 200, 1500, 5000))
    return (b"%08d:" % seq) + bytes((seq * 7 + i) & 0xFF for i in range(n))


def one_round(workdir: Path, seed: int, figures: Figures) -> None:
    from core.store import FlushDiskType, GetMessageStatus, Message, MessageStore, PutStatus, StoreConfig, \
        decode_message

    rng = random.Random(seed)
    live, image = workdir / "live", workdir / "image"
    sync = rng.random() < 0.5

    def config(root: Path) -> StoreConfig:
        return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                           mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=64, max_index_num=256,
                           flush_disk_type=FlushDiskType.SYNC_FLUSH if sync else FlushDiskType.ASYNC_FLUSH)

    written: dict[tuple[str, int, int], tuple[int, bytes]] = {}  # (topic, qid, qoff) -> (end offset, body)
    acked_below = 0  # log offset below which everything is acknowledged
    acked_sync: set[tuple[str, int, int]] = set()
    rec = SyncRecorder(live)
    store = MessageStore(config(live))
    with rec.recording():
        store.start()
        try:
            ops = rng.randrange(5, 120)
            inflight_from = ops - rng.randrange(0, 4)  # the last ones are appended, not waited for
            for seq in range(ops):
                topic, qid = rng.choice(TOPICS), rng.randrange(2)
                msg = Message(topic=topic, body=_body(seq, rng), queue_id=qid, properties={"KEYS": f"k{seq}"})
                r = store.put(msg) if sync and seq < inflight_from else store.append(msg)
                figures.puts += 1
                if r.status not in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT):
                    figures.violations.append(f"seed {seed}: put refused: {r.status.name}")
                    continue
                key = (topic, qid, r.queue_offset)
                written[key] = (r.end_offset, msg.body)
                if sync and seq < inflight_from and r.status is PutStatus.PUT_OK:
                    acked_sync.add(key)
                if rng.random() < 0.1:
                    acked_below = max(acked_below, store.flush())
            cut = rec.cut(image, rng)
        finally:
            store.shutdown()
    figures.rounds += 1
    figures.pages_lost += cut["pages_lost"]
    figures.pages_torn += cut["pages_torn"]
    must = {k for k, (end, _) in written.items() if end <= acked_below} | acked_sync
    figures.acked += len(must)

    recovered = MessageStore(config(image))
    try:
        report = recovered.start()
    except Exception as e:  # noqa: BLE001 - a refusal to start is a finding, reported with the seed
        figures.violations.append(f"seed {seed}: recovery refused to start: {type(e).__name__}: {e}")
        return
    try:
        seen = set()
        for topic in TOPICS:
            for qid in range(2):
                off = recovered.min_offset(topic, qid)
                while True:
                    got = recovered.get_messages(topic, qid, off, 32, max_bytes=1 << 20)
                    if got.status is not GetMessageStatus.FOUND:
                        break
                    for raw in got.messages:
                        m = decode_message(raw)
                        key = (topic, qid, m.queue_offset)
                        want = written.get(key)
                        if want is None or want[1] != m.body:
                            figures.violations.append(f"seed {seed}: served an entry never written at {key}")
                        seen.add(key)
                    off = got.next_begin_offset
        figures.recovered += len(seen)
        for key in sorted(must - seen):
            figures.violations.append(f"seed {seed}: acknowledged entry lost: {key} "
                                      f"(sync={sync}, flushed below {acked_below})")
        lost = len(written) - len(seen & written.keys())
        figures.truncated_entries += lost
        if report.truncated_bytes_at is not None:
            figures.truncations_reported += 1
            if not report.truncated_file:
                figures.violations.append(f"seed {seed}: a cut without its file: {report}")
        if lost and report.log_max_offset < max(end for end, _ in written.values()) \
                and report.truncated_bytes_at is None and report.log_max_offset > 0 \
                and _has_bytes_past(image, report.log_max_offset):
            figures.violations.append(f"seed {seed}: log cut at {report.log_max_offset} without a report")
    finally:
        recovered.shutdown()


def _has_bytes_past(image: Path, offset: int) -> bool:
    """Whether the image's commit log held any non-zero byte at or past ``offset``."""
    seg = 64 * 1024
    for f in sorted((image / "commitlog").glob("0" * 5 + "*")):
        start = int(f.name)
        data = f.read_bytes()
        rel = max(0, offset - start)
        if start + seg > offset and any(data[rel:]):
            return True
    return False


def campaign(rounds: int, seed: int = 0, workdir: str | None = None) -> Figures:
    """``rounds`` power cuts with seeds ``seed .. seed + rounds - 1``."""
    figures = Figures()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for i in range(rounds):
            d = Path(tmp) / f"r{i}"
            one_round(d, seed + i, figures)
            shutil.rmtree(d, ignore_errors=True)
    return figures


def main() -> None:
    import argparse
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    p = argparse.ArgumentParser(description="power-cut rounds against the store; JSON figures")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", help="work directory (default: a temp dir)")
    args = p.parse_args()
    figures = campaign(args.rounds, args.seed, args.dir)
    print(json.dumps(asdict(figures)))
    sys.exit(1 if figures.violations else 0)


if __name__ == "__main__":
    main()
