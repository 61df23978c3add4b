"""The ``[mqtt]`` table of the configuration file, read once at start.

Keys are camelCase; a key nobody knows is a ``ConfigError`` naming it
(``Limits.from_dict`` does the check over every owner's keys). Owners:

* listeners (``gateway.listeners.LISTENER_KEYS``): port, wsPort, tlsPort,
  wssPort, wsPath, certFile, keyFile, caFile, requireCertificate,
  handshakeTimeout;
* security (``gateway.auth.SECURITY_KEYS``): allowAnonymous (true on
  loopback listeners, false on others),
  passwordFile (""), aclFile (""), useIdentityAsUsername (false);
* limits (``gateway.limits``): maxConnections (100000), maxPacketSize
  (1048576), maxInflightMessages (32), maxQueuedMessages (1000),
  queueOverflow ("dropOldest"), maxTopicAlias (10), minKeepalive (0),
  maxKeepalive (65535), maxSessionExpiryInterval (604800),
  connectTimeout (10.0);
* message trace (``gateway.tracing.TRACE_KEYS``): traceMqttTopics ([]),
  traceTopicName ("RMQ_SYS_TRACE_TOPIC");
* the session core (this module):

=======================  =========  ==========================================
key                      default    meaning
=======================  =========  ==========================================
sysInterval              10         seconds between ``$SYS/broker/...``
                                    updates (0 = no ``$SYS`` topics)
retainAvailable          true       keep retained messages (false: a retained
                                    PUBLISH is refused, 5.0 0x9A)
writeTimeout             30.0       seconds a write to a client may block
                                    before the connection is dropped
maxOutboundBytes         8388608    bytes waiting to be written to one client;
                                    above it QoS 0 messages to that client are
                                    dropped (counted in $SYS)
serverReference          (none)     host:port told to MQTT 5 clients when a
                                    gateway node drains (DISCONNECT 0x9C)
metaCompactionMinRecords 10000      the gateway's meta records are compacted
                                    (``gateway.meta_log``) only when a restart
                                    would read more records than this ...
metaCompactionRatio      2.0        ... and more than this many times the
                                    live ones
metaCompactionBatch      1000       records per write of a compaction
=======================  =========  ==========================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.acl import Acl, acl_from_dict
from gateway.auth import SECURITY_KEYS, Authenticator
from gateway.config import ConfigError
from gateway.limits import Limits
from gateway.listeners import LISTENER_KEYS
from gateway.meta_log import CompactionSettings
from gateway.tracing import TRACE_KEYS, TraceSettings

SESSION_KEYS = frozenset({"sysInterval", "retainAvailable", "writeTimeout", "maxOutboundBytes", "serverReference",
                          "metaCompactionMinRecords", "metaCompactionRatio", "metaCompactionBatch",
                          "ownerLeaseTtl", "releaseWait"})


@dataclass(frozen=True, kw_only=True)
class SessionSettings:
    sys_interval: float = 10.0
    retain_available: bool = True
    write_timeout: float = 30.0
    max_outbound_bytes: int = 8 * 1024 * 1024
    server_reference: str | None = None  # told to MQTT 5 clients when a gateway node drains
    compaction: CompactionSettings = CompactionSettings()
    owner_lease_ttl: int = 5  # gateway nodes with etcd: seconds an owner lease lives (gateway.owners)
    release_wait: float = 2.0  # gateway nodes without etcd: seconds a CONNECT waits for a release (gateway.cluster)


def _number(table: Mapping[str, Any], key: str, default, low, high):
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ConfigError(f"[mqtt] {key} must be a number in {low}..{high}, not {value!r}")
    return value


@dataclass(frozen=True)
class GatewaySettings:
    limits: Limits
    session: SessionSettings
    authenticator: Authenticator
    acl: Acl
    trace: TraceSettings = TraceSettings()

    @classmethod
    def from_dict(cls, table: Mapping[str, Any], *, hosts: Iterable[str] = ("127.0.0.1",)) -> GatewaySettings:
        """``hosts``: the listeners' addresses (anonymous access is off by default
        unless all are loopback ones, see ``gateway.auth``)."""
        limits = Limits.from_dict(table, other_keys=LISTENER_KEYS | SECURITY_KEYS | SESSION_KEYS | TRACE_KEYS)
        retain = table.get("retainAvailable", True)
        if not isinstance(retain, bool):
            raise ConfigError(f"[mqtt] retainAvailable must be true or false, not {retain!r}")
        ref = table.get("serverReference")
        if ref is not None and (not isinstance(ref, str) or not ref):
            raise ConfigError(f"[mqtt] serverReference must be a non-empty string (host:port), not {ref!r}")
        session = SessionSettings(
            server_reference=ref,
            sys_interval=float(_number(table, "sysInterval", 10, 0, 86400)),
            retain_available=retain,
            write_timeout=float(_number(table, "writeTimeout", 30.0, 0.1, 3600)),
            max_outbound_bytes=int(_number(table, "maxOutboundBytes", 8 * 1024 * 1024, 1024, 1 << 34)),
            compaction=CompactionSettings(
                min_records=int(_number(table, "metaCompactionMinRecords", 10_000, 0, 1 << 40)),
                ratio=float(_number(table, "metaCompactionRatio", 2.0, 1.0, 1000)),
                batch=int(_number(table, "metaCompactionBatch", 1000, 1, 100_000))),
            owner_lease_ttl=int(_number(table, "ownerLeaseTtl", 5, 2, 60)),
            release_wait=float(_number(table, "releaseWait", 2.0, 0, 60)),
        )
        return cls(limits, session, Authenticator.from_dict(table, hosts=hosts), acl_from_dict(table),
                   TraceSettings.from_dict(table))
