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
==========================================  ===================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

VERSION = "mqgate 0.1.0"


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
    }
