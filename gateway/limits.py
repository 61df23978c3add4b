"""Limits of the MQTT edge: one frozen value, every field with its default.

Rules kept here:
- Every limit has a documented default (the table below) and a valid range;
  a ``Limits`` that exists is valid (checked on construction).
- ``Limits.from_dict`` reads the ``[mqtt]`` table of the configuration file.
  Keys are camelCase. A key nobody knows is a ``ConfigError`` naming it (and
  the nearest known key), never ignored. The ``[mqtt]`` table also holds the
  listener and security keys, so callers pass those key sets as
  ``other_keys`` (``LISTENER_KEYS`` from ``gateway.listeners``,
  ``SECURITY_KEYS`` from ``gateway.auth``); they are skipped, not rejected.
- This module only describes limits. Enforcing them (and counting every drop
  in ``$SYS``) is the job of the listeners (connections) and of the session
  core (everything else).

=========================  ==================  ================================
key ([mqtt] table)         default             meaning
=========================  ==================  ================================
maxConnections             100000              open MQTT connections over all
                                               listeners; one more is accepted
                                               then closed at once, logged and
                                               counted (``refused``)
maxConnectionRate          0                   connections accepted per second
                                               over all listeners, in bursts
                                               of one second's worth (0 = no
                                               limit; EMQX's max_conn_rate).
                                               Over it, new connections wait
                                               in the kernel's listen backlog
                                               (nothing is accepted, read or
                                               allocated for them), so a
                                               connection flood cannot take
                                               the CPU from connected clients
maxPacketSize              1048576 (1 MiB)     largest MQTT packet accepted (and
                                               announced in CONNACK, 5.0); like
                                               EMQX. Protocol maximum is
                                               268435460
maxInflightMessages        32                  QoS 1/2 messages sent to a client
                                               and not yet acknowledged; also
                                               the Receive Maximum we announce
maxQueuedMessages          1000                messages waiting in a session
                                               beyond the in-flight window,
                                               and QoS 0 messages waiting
                                               behind a write the client's
                                               socket has no room for
                                               (0 = no limit)
queueOverflow              "dropOldest"        when the queue is full: drop the
                                               oldest queued message
                                               ("dropOldest", EMQX) or the new
                                               one ("dropNew", Mosquitto).
                                               Every drop is counted in $SYS
maxTopicAlias              10                  Topic Alias Maximum we accept
                                               from a 5.0 client (0 = none);
                                               Mosquitto's default
minKeepalive               0                   smallest non-zero keepalive a
                                               client may ask for (seconds)
maxKeepalive               65535               largest keepalive (seconds); a
                                               5.0 client asking for more (or
                                               for 0 = none) is told
                                               maxKeepalive as Server Keep
                                               Alive when it is below 65535
maxSessionExpiryInterval   604800 (7 days)     cap on a session's expiry
                                               interval (seconds), also for
                                               3.1.1 persistent sessions;
                                               4294967295 = never expire
connectTimeout             10.0                seconds between accepting a
                                               connection and its CONNECT
maxPublishRate             0                   PUBLISH packets per second one
                                               connection may send (0 = no
                                               limit; bursts of one second's
                                               worth). Over it, a 5.0 client
                                               gets 0x97 Quota exceeded and
                                               the message is not stored; a
                                               3.1.1 client is read slower
=========================  ==================  ================================
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from gateway.config import ConfigError

MQTT_MAX_PACKET_SIZE = 268_435_455 + 5  # remaining length limit + fixed header
SESSION_NEVER_EXPIRES = 0xFFFF_FFFF


class QueueOverflow(enum.Enum):
    """What a full session queue does with one more message."""

    DROP_OLDEST = "dropOldest"
    DROP_NEW = "dropNew"


@dataclass(frozen=True, kw_only=True)
class Limits:
    max_connections: int = 100_000
    max_connection_rate: int = 0
    max_packet_size: int = 1_048_576
    max_inflight_messages: int = 32
    max_queued_messages: int = 1000
    queue_overflow: QueueOverflow = QueueOverflow.DROP_OLDEST
    max_topic_alias: int = 10
    min_keepalive: int = 0
    max_keepalive: int = 65535
    max_session_expiry_interval: int = 604_800
    connect_timeout: float = 10.0
    max_publish_rate: int = 0

    def __post_init__(self) -> None:
        _int_in(self.max_connections, 1, 10**9, "maxConnections")
        _int_in(self.max_connection_rate, 0, 10**9, "maxConnectionRate")
        # 2 is the smallest packet there is (PINGREQ).
        _int_in(self.max_packet_size, 2, MQTT_MAX_PACKET_SIZE, "maxPacketSize")
        _int_in(self.max_inflight_messages, 1, 65535, "maxInflightMessages")
        _int_in(self.max_queued_messages, 0, 10**9, "maxQueuedMessages")
        if not isinstance(self.queue_overflow, QueueOverflow):
            raise ConfigError(f"queueOverflow must be a QueueOverflow, not {self.queue_overflow!r}")
        _int_in(self.max_topic_alias, 0, 65535, "maxTopicAlias")
        _int_in(self.min_keepalive, 0, 65535, "minKeepalive")
        _int_in(self.max_keepalive, 1, 65535, "maxKeepalive")
        if self.min_keepalive > self.max_keepalive:
            raise ConfigError(f"minKeepalive ({self.min_keepalive}) is above maxKeepalive "
                              f"({self.max_keepalive})")
        _int_in(self.max_session_expiry_interval, 0, SESSION_NEVER_EXPIRES,
                "maxSessionExpiryInterval")
        if (isinstance(self.connect_timeout, bool) or not isinstance(self.connect_timeout, int | float)
                or not 0 < self.connect_timeout <= 3600):
            raise ConfigError(f"connectTimeout must be a number of seconds in (0, 3600], "
                              f"not {self.connect_timeout!r}")
        _int_in(self.max_publish_rate, 0, 10**9, "maxPublishRate")

    @classmethod
    def from_dict(cls, table: Mapping[str, Any], *, other_keys: Iterable[str] = ()) -> Limits:
        """Limits from the ``[mqtt]`` table; keys in ``other_keys`` belong to
        someone else and are skipped; any other unknown key is an error."""
        known = dict(_KEY_TO_FIELD)
        skip = frozenset(other_keys)
        unknown = [k for k in table if k not in known and k not in skip]
        if unknown:
            key = sorted(unknown)[0]
            near = difflib.get_close_matches(key, [*known, *skip], n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"[mqtt] unknown key {key!r}{hint}; every key is listed in docs/CONFIG.md")
        kwargs: dict[str, Any] = {}
        for key, name in known.items():
            if key not in table:
                continue
            value = table[key]
            if name == "queue_overflow":
                try:
                    value = QueueOverflow(value)
                except ValueError:
                    choices = ", ".join(repr(p.value) for p in QueueOverflow)
                    raise ConfigError(f"[mqtt] queueOverflow must be one of {choices}, "
                                      f"not {value!r}") from None
            kwargs[name] = value
        try:
            return cls(**kwargs)
        except ConfigError as e:
            raise ConfigError(f"[mqtt] {e}") from None

    def effective_keepalive(self, requested: int) -> int:
        """The keepalive (seconds) the server enforces for a client asking for
        ``requested`` (0 = no keepalive). A result different from
        ``requested`` is sent to a 5.0 client as Server Keep Alive; a 3.1.1
        client cannot be told, so the server may refuse it instead."""
        if requested == 0:
            return 0 if self.max_keepalive == 65535 else self.max_keepalive
        return min(max(requested, self.min_keepalive), self.max_keepalive)

    def effective_session_expiry(self, requested: int) -> int:
        """The session expiry interval (seconds) granted for ``requested``."""
        return min(requested, self.max_session_expiry_interval)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


_KEY_TO_FIELD: dict[str, str] = {_camel(f.name): f.name for f in fields(Limits)}
LIMIT_KEYS: frozenset[str] = frozenset(_KEY_TO_FIELD)


def _int_in(value: Any, low: int, high: int, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{key} must be an integer in {low}..{high}, not {value!r}")
