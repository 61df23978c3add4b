"""Safe directory names for topic and queue names chosen by users.

The mapping (reversible, injective, stable across versions):

- A name matching RocketMQ's topic rule ``^[%|a-zA-Z0-9_-]+$`` and at most
  200 characters is its own directory name (so a RocketMQ-named topic sits
  where RocketMQ puts it: ``consumequeue/TopicTest/3``).
- Any other name (MQTT session names, ``a/b``, unicode, ``..``, the empty
  string) becomes ``~`` + lowercase unpadded base32 of its UTF-8 bytes.
  ``~`` is outside the RocketMQ character set, so no plain name collides, and
  base32 lowercase is safe on case-insensitive file systems too.
- If that is longer than 200 characters it becomes ``~~`` + the SHA-256 hex
  of the UTF-8 bytes, and the original name is written to ``.name`` inside
  the directory so listing can give it back.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re

_SAFE = re.compile(r"[%|a-zA-Z0-9_-]+")
_MAX = 200
NAME_FILE = ".name"


def dir_name(name: str) -> str:
    if len(name) <= _MAX and _SAFE.fullmatch(name):
        return name
    raw = name.encode("utf-8", "surrogatepass")
    encoded = "~" + base64.b32encode(raw).decode("ascii").rstrip("=").lower()
    if len(encoded) <= _MAX:
        return encoded
    return "~~" + hashlib.sha256(raw).hexdigest()


def needs_name_file(dirname: str) -> bool:
    return dirname.startswith("~~")


def name_from_dir(dirname: str, path: str) -> str | None:
    """The name stored in directory ``dirname`` (at ``path``); None if not one of ours."""
    if dirname.startswith("~~"):
        try:
            with open(os.path.join(path, NAME_FILE), encoding="utf-8", errors="surrogatepass") as f:
                return f.read()
        except FileNotFoundError:
            return None
    if dirname.startswith("~"):
        text = dirname[1:].upper()
        try:
            return base64.b32decode(text + "=" * (-len(text) % 8)).decode("utf-8", "surrogatepass")
        except ValueError:
            return None
    if _SAFE.fullmatch(dirname):
        return dirname
    return None
