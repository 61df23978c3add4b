"""Logging from the ``[log]`` table: levels per logger, plain or JSON lines, a file with rotation.

    [log]
    level = "INFO"              # every logger that [log.levels] does not name
    format = "plain"            # or "json": one JSON object a line
    file = ""                   # "" = stderr; else this file, rotated at maxBytes
    maxBytes = 10485760
    backupCount = 5

    [log.levels]                # any logger under mqgate., e.g.
    "mqgate.http" = "DEBUG"
    "mqgate.gateway" = "WARNING"

Rules kept here:
- Every key is checked before anything starts (``LogSettings.from_dict``):
  an unknown key, a level that is not one of DEBUG INFO WARNING ERROR
  CRITICAL, or a logger outside ``mqgate.`` (and ``core.``, the store's and
  broker's module loggers) is a ``ConfigError`` naming it.
- ``--log-level`` overrides ``level``.
- Levels are the only thing SIGHUP changes (``apply_levels``): a logger
  named before and no longer named goes back to inheriting. The format and
  the file are set once at start.
- ``level`` is the root logger's: libraries' records (Hypercorn...) are
  formatted and filtered like ours.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from gateway.config import ConfigError

LOG_KEYS = frozenset({"level", "levels", "format", "file", "maxBytes", "backupCount"})
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _level(value: Any, what: str) -> str:
    if not isinstance(value, str) or value.upper() not in LEVELS:
        raise ConfigError(f"{what} must be one of {', '.join(LEVELS)}, not {value!r}")
    return value.upper()


@dataclass(frozen=True)
class LogSettings:
    level: str = "INFO"
    levels: dict[str, str] = field(default_factory=dict)  # logger name -> level
    format: str = "plain"
    file: str = ""
    max_bytes: int = 10 * 1024 * 1024
    backup_count: int = 5

    @classmethod
    def from_dict(cls, table: Mapping[str, Any], *, level_flag: str | None = None) -> LogSettings:
        unknown = set(table) - LOG_KEYS
        if unknown:
            raise ConfigError(f"[log] unknown key {sorted(unknown)[0]!r}; known: {sorted(LOG_KEYS)}")
        level = _level(level_flag, "--log-level") if level_flag else _level(table.get("level", "INFO"),
                                                                             "[log] level")
        levels_table = table.get("levels", {})
        if not isinstance(levels_table, dict):
            raise ConfigError("[log] levels must be a table of logger = level, e.g. \"mqgate.http\" = \"DEBUG\"")
        levels = {}
        for name, value in levels_table.items():
            if name != "mqgate" and not name.startswith(("mqgate.", "core.")):
                raise ConfigError(f"[log.levels] {name!r}: only loggers under mqgate. (and core.) can be set")
            levels[name] = _level(value, f"[log.levels] {name!r}")
        fmt = table.get("format", "plain")
        if fmt not in ("plain", "json"):
            raise ConfigError(f"[log] format must be \"plain\" or \"json\", not {fmt!r}")
        path = table.get("file", "")
        if not isinstance(path, str):
            raise ConfigError(f"[log] file must be a path, not {path!r}")
        numbers = {}
        for key, default in (("maxBytes", 10 * 1024 * 1024), ("backupCount", 5)):
            value = table.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"[log] {key} must be an integer >= 0, not {value!r}")
            numbers[key] = value
        return cls(level=level, levels=levels, format=fmt, file=path, max_bytes=numbers["maxBytes"],
                   backup_count=numbers["backupCount"])


class JsonLines(logging.Formatter):
    """One JSON object a line: time (ISO 8601, UTC), level, logger, message, and
    the traceback as one string when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


_applied: set[str] = set()  # loggers whose level apply_levels set (to undo on the next call)


def setup_logging(settings: LogSettings) -> None:
    """The handler (stderr or a rotating file), its format, and the levels."""
    if settings.file:
        handler: logging.Handler = logging.handlers.RotatingFileHandler(
            settings.file, maxBytes=settings.max_bytes, backupCount=settings.backup_count, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if settings.format == "json" else logging.Formatter(PLAIN_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    apply_levels(settings)


def apply_levels(settings: LogSettings) -> None:
    """Set the root's and the named loggers' levels; loggers no longer named inherit again."""
    logging.getLogger().setLevel(settings.level)
    for name in _applied - set(settings.levels):
        logging.getLogger(name).setLevel(logging.NOTSET)
    for name, level in settings.levels.items():
        logging.getLogger(name).setLevel(level)
    _applied.clear()
    _applied.update(settings.levels)
