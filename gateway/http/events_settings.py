"""The ``[events]`` table: the event API's port and the event rules' tunables.

Rules kept here:
- ``port = 0`` (the default) leaves the event API off; event rules stored
  in the broker run on a master under ``mqgate serve`` all the same (they
  need the broker's remoting port: their deliveries are consumer groups).
- The API binds ``host`` (127.0.0.1 by default, whatever the MQTT ``host``
  is) and uses the ``[http]`` users file and certificate: the same users,
  roles and tokens as the admin API.
- A key the table does not know, or a value of the wrong type or range,
  is a ``ConfigError`` naming it, before any port is bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from gateway.config import ConfigError

EVENTS_KEYS = frozenset({"port", "host", "busQueues", "countsInterval", "orderlyRetryMs"})


@dataclass(frozen=True)
class EventsSettings:
    port: int = 0
    host: str = "127.0.0.1"
    bus_queues: int = 4
    counts_interval: float = 5.0
    orderly_retry_ms: int = 1000

    @classmethod
    def from_dict(cls, table: Mapping[str, Any], *, port: int = 0) -> EventsSettings:
        """From the ``[events]`` table (``port`` taken out by ``gateway.config``, given here)."""
        unknown = set(table) - EVENTS_KEYS
        if unknown:
            raise ConfigError(f"[events] unknown key {sorted(unknown)[0]!r}; known: {sorted(EVENTS_KEYS)}")

        def number(key: str, default, low, high, kind=(int,)):
            value = table.get(key, default)
            if isinstance(value, bool) or not isinstance(value, kind) or not low <= value <= high:
                raise ConfigError(f"[events] {key} must be a number in {low}..{high}, not {value!r}")
            return value
        host = table.get("host", "127.0.0.1")
        if not isinstance(host, str) or not host:
            raise ConfigError(f"[events] host must be an address, not {host!r}")
        return cls(port=port, host=host, bus_queues=number("busQueues", 4, 1, 64),
                   counts_interval=float(number("countsInterval", 5, 0.1, 3600, (int, float))),
                   orderly_retry_ms=number("orderlyRetryMs", 1000, 10, 600_000))
