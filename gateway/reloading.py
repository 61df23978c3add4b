"""SIGHUP: what a running ``mqgate`` reads again without dropping a connection.

Parts register a callable under a name while they run (the MQTT password
file and ACL of the gateway, the HTTP users file, the ``[log]`` levels);
``reload()`` calls each. Rules kept here:
- One part failing (a file that no longer parses) is logged in one line
  and leaves that part's previous state in force; the others still reload.
- A registration under a name already taken replaces it (a part restarted
  after a role change registers again).
- Nothing here closes a connection or a listener: clients stay connected;
  new rules apply to their next check (the ACL) or next login.
"""

from __future__ import annotations

import logging
from typing import Callable

log = logging.getLogger("mqgate")


class Reloader:
    def __init__(self) -> None:
        self._parts: dict[str, Callable[[], object]] = {}

    def add(self, name: str, reload: Callable[[], object]) -> None:
        self._parts[name] = reload

    def names(self) -> list[str]:
        return list(self._parts)

    def reload(self) -> list[str]:
        """Reload every part; the names of those that failed."""
        failed = []
        for name, fn in list(self._parts.items()):
            try:
                ok = fn()
            except Exception as e:  # noqa: BLE001 - one line per part; the others go on
                log.error("SIGHUP: %s not reloaded, the previous one stays: %s", name, e)
                failed.append(name)
                continue
            if ok is False:  # the part logged why
                failed.append(name)
        log.info("SIGHUP: reloaded %s%s", ", ".join(n for n in self._parts if n not in failed) or "nothing",
                 f"; failed: {', '.join(failed)}" if failed else "")
        return failed
