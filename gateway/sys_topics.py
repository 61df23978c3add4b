"""``$SYS/broker/...``: the gateway's statistics as MQTT topics.

Rules kept here:

* Every ``sysInterval`` seconds each topic below is published at QoS 0,
  retained in memory (a new subscriber gets the latest values at once) and
  never stored in the commit log. Values are decimal text, like Mosquitto.
* ``$SYS`` topics are matched only by filters that start with ``$SYS``
  (a leading ``+`` or ``#`` never matches a ``$`` topic; the trie does it).

==========================================  ===================================
topic                                       value
==========================================  ===================================
$SYS/broker/version                         "mqgate <version>"
$SYS/broker/uptime                          seconds since the gateway started
$SYS/broker/clients/connected               connected clients now
$SYS/broker/clients/total                   sessions (connected or not)
$SYS/broker/clients/connects                accepted CONNECTs since start
$SYS/broker/messages/received               PUBLISH packets received
$SYS/broker/messages/sent                   PUBLISH packets sent
$SYS/broker/messages/dropped                messages dropped: queue overflow,
                                            slow client (QoS 0), too large,
                                            refused by the store when the
                                            publisher cannot be told (QoS 0;
                                            3.1.1 permanent refusals)
$SYS/broker/messages/expired                messages dropped as expired, each
                                            once however many sessions drop
                                            it (a $delayed one that expired
                                            while parked too)
$SYS/broker/messages/retained/count         retained messages
$SYS/broker/subscriptions/count             subscriptions
$SYS/broker/errors/protocol                 connections closed for a protocol
                                            error
$SYS/broker/errors/store                    PUBLISHes the store did not take
$SYS/broker/clients/disconnected            sessions kept with no connection
$SYS/broker/clients/refused                 CONNECTs refused, any reason
$SYS/broker/clients/auth-failures           CONNECTs refused for bad credentials
$SYS/broker/messages/denied                 PUBLISHes the ACL refused
$SYS/broker/messages/quota-exceeded         PUBLISHes over maxPublishRate (5.0)
$SYS/broker/bytes/received                  bytes read from clients
$SYS/broker/bytes/sent                      bytes written to clients
$SYS/broker/listeners/<name>/connected      connected clients per listener
                                            (every configured listener, 0 too)
$SYS/broker/listeners/sockets-refused       sockets closed at once
                                            (maxConnections reached)
$SYS/broker/listeners/handshake-failures    TLS / WebSocket handshakes failed
==========================================  ===================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

def package_version() -> str:
    """The installed distribution's version (pyproject.toml's, through the package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mqgate")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


VERSION = f"mqgate {package_version()}"


@dataclass
class GatewayStats:
    connected: int = 0
    connects: int = 0
    refused: int = 0
    received: int = 0
    sent: int = 0
    dropped: int = 0
    expired: int = 0
    protocol_errors: int = 0
    store_errors: int = 0
    # read by /metrics (gateway.http.metrics) at scrape time, never published in $SYS
    received_qos: list[int] = field(default_factory=lambda: [0, 0, 0])  # PUBLISH received, by QoS
    sent_qos: list[int] = field(default_factory=lambda: [0, 0, 0])  # PUBLISH sent, by QoS
    bytes_in: int = 0  # bytes read from clients
    bytes_out: int = 0  # bytes written to clients
    auth_failures: int = 0  # CONNECTs refused for bad credentials
    denied: int = 0  # PUBLISHes refused by the ACL
    quota_exceeded: int = 0  # PUBLISHes refused over maxPublishRate (MQTT 5)


def sys_values(gw, uptime_s: float) -> dict[str, str]:
    s = gw.stats
    return {
        "$SYS/broker/version": VERSION,
        "$SYS/broker/uptime": str(int(uptime_s)),
        "$SYS/broker/clients/connected": str(s.connected),
        "$SYS/broker/clients/total": str(sum(1 for s in gw.router.sessions.values() if s.node is None)),
        "$SYS/broker/clients/connects": str(s.connects),
        "$SYS/broker/messages/received": str(s.received),
        "$SYS/broker/messages/sent": str(s.sent),
        "$SYS/broker/messages/dropped": str(s.dropped),
        "$SYS/broker/messages/expired": str(s.expired),
        "$SYS/broker/messages/retained/count": str(len(gw.retained.stored)),
        "$SYS/broker/subscriptions/count": str(len(gw.router.trie)),
        "$SYS/broker/errors/protocol": str(s.protocol_errors),
        "$SYS/broker/errors/store": str(s.store_errors),
        "$SYS/broker/clients/disconnected": str(len(gw.router.sessions) - s.connected),
        "$SYS/broker/clients/refused": str(s.refused),
        "$SYS/broker/clients/auth-failures": str(s.auth_failures),
        "$SYS/broker/messages/denied": str(s.denied),
        "$SYS/broker/messages/quota-exceeded": str(s.quota_exceeded),
        "$SYS/broker/bytes/received": str(s.bytes_in),
        "$SYS/broker/bytes/sent": str(s.bytes_out),
        "$SYS/broker/listeners/sockets-refused": str(gw.listener_stats.refused),
        "$SYS/broker/listeners/handshake-failures": str(gw.listener_stats.handshake_failures),
        **{f"$SYS/broker/listeners/{name}/connected": str(n) for name, n in _per_listener(gw).items()},
    }


def _per_listener(gw) -> dict[str, int]:
    """Connected clients by listener name, every listener the gateway serves included."""
    counts = dict.fromkeys(gw.listener_names, 0)
    for sess in list(gw.router.sessions.values()):
        conn = sess.conn
        if conn is not None:
            name = conn.info.listener
            counts[name] = counts.get(name, 0) + 1
    return counts
