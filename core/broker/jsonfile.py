"""The broker's JSON config files under ``<root>/config/`` (blocking; call from a worker thread).

A file is replaced atomically: write ``<name>.tmp``, fsync it, rename it
over ``<name>``, fsync the directory; a crash leaves the old or the new
file, never a torn one. Like RocketMQ, the previous version is kept as
``<name>.bak`` and read when the main file is missing or unreadable.
Reading accepts fastjson's unquoted numeric map keys (``{0:12}``) so a
``consumerOffset.json`` written by a Java broker loads too.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

_BARE_NUMERIC_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')


def write_json_atomic(path: Path, obj: Any) -> None:
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, sort_keys=False)
    write_text_atomic(path, text)


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    if path.exists():
        bak = path.with_name(path.name + ".bak")
        os.replace(path, bak)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: Path) -> Any | None:
    """The file's object, its ``.bak`` if the file is missing or bad, or None."""
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            text = candidate.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        if not text.strip():
            continue
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            try:
                return json.loads(_BARE_NUMERIC_KEY.sub(r'\1"\2"\3', text))
            except json.JSONDecodeError:
                continue
    return None
