"""Epochs: which master wrote which stretch of a broker group's commit log.

Each broker keeps ``<store root>/ha/epochs.json``: a list of
``[epoch, start offset]``, increasing in both.  A broker that becomes master
appends ``[new epoch, its log end]``; a slave copies its master's entries
that start within its own log when a link opens.

`consistent_point` is RocketMQ 5's rule for a broker rejoining a group: the
last epoch both tables hold with the same start, ended at the earlier of the
two brokers' ends of that epoch.  Bytes past it on the rejoining broker were
never replicated to the new master (in SYNC mode: never acknowledged), and
are cut (`core.store.truncate_log`) before it follows the new master.

Rules kept: the file is replaced atomically (temp file, fsync, rename); an
unreadable file is an error naming it, never an empty table.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

FILE = Path("ha") / "epochs.json"


class EpochFileError(Exception):
    """The epochs file exists and cannot be read."""


class EpochTable:
    def __init__(self, root: str | Path):
        self.path = Path(root) / FILE
        self.entries: list[tuple[int, int]] = []

    def load(self) -> "EpochTable":
        try:
            raw = json.loads(self.path.read_text())
            self.entries = [(int(e), int(s)) for e, s in raw]
        except FileNotFoundError:
            self.entries = []
        except (ValueError, TypeError) as e:
            raise EpochFileError(f"{self.path}: not an epochs file ({e}); move it away to start this broker as a new replica") from None
        return self

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump([list(e) for e in self.entries], f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    @property
    def epoch(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def begin(self, epoch: int, start: int) -> None:
        """This broker becomes master for ``epoch`` from log offset ``start``."""
        if epoch <= self.epoch:
            raise ValueError(f"epoch {epoch} is not after {self.epoch}")
        self.entries = [(e, s) for e, s in self.entries if s <= start] + [(epoch, start)]
        self.save()

    def follow(self, master_entries: list[tuple[int, int]], log_end: int) -> None:
        """A slave adopts its master's history for the part of the log it holds."""
        entries = [(int(e), int(s)) for e, s in master_entries if int(s) <= log_end]
        if entries != self.entries:
            self.entries = entries
            self.save()


def _epoch_end(entries: list[tuple[int, int]], i: int, log_end: int) -> int:
    return entries[i + 1][1] if i + 1 < len(entries) else log_end


def consistent_point(mine: list[tuple[int, int]], my_end: int, theirs: list[tuple[int, int]], their_end: int) -> int:
    """Where a rejoining log agrees with the new master's: -1 if nowhere
    (no common epoch: the rejoining broker must start empty).  A broker with
    no epochs yet (a plain 4.x pair) agrees up to the shorter log."""
    if not mine or not theirs:
        return min(my_end, their_end)
    starts = {e: (i, s) for i, (e, s) in enumerate(theirs)}
    for i in range(len(mine) - 1, -1, -1):
        epoch, start = mine[i]
        if epoch in starts and starts[epoch][1] == start:
            j = starts[epoch][0]
            return min(_epoch_end(mine, i, my_end), _epoch_end(theirs, j, their_end))
    return -1
