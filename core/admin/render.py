"""Plain-text output of ``mqgate admin``: aligned tables and times a person reads.

Rules kept here: a table is a header row and one row per item, columns
separated by two spaces, no trailing blanks; a missing value is ``-``.
Times are local, ``YYYY-MM-DD HH:MM:SS,mmm`` (mqadmin's form); 0 or a
negative time is ``-``.
"""

from __future__ import annotations

import time
from typing import TextIO

__all__ = ["human_time", "table"]


def table(rows: list[dict], columns: list[str], out: TextIO) -> None:
    cells = [[("-" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(), file=out)
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip(), file=out)


def human_time(ms: int | str | None) -> str:
    try:
        ms = int(ms)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-"
    if ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f",{ms % 1000:03d}"
