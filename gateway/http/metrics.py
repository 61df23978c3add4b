"""``/metrics``: Prometheus text exposition, collected at scrape time.

Rules kept here:
- Nothing here runs on the MQTT or broker hot paths: a scrape reads the
  plain integer counters the gateway (``GatewayStats``, ``ListenerStats``)
  and the broker already keep, and walks the session table once. The hot
  paths only ever do ``+= 1``.
- Cardinality is bounded by the configuration, never by traffic from
  devices: labels are listener names, MQTT protocol versions, QoS levels,
  drop reasons, broker topics, consumer groups and slave addresses. No
  series is per MQTT topic or per client.
- One registry per HTTP server (not prometheus-client's global one), so two
  gateways in one process (tests) do not collide.
- Every name starts with ``mqgate_`` except prometheus-client's own
  ``process_*`` series (CPU seconds, resident memory, open files).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

if TYPE_CHECKING:
    from gateway.app import MQTTGateway

PROTOCOLS = {3: "3.1", 4: "3.1.1", 5: "5.0"}


class GatewayCollector:
    """The MQTT edge's series, read from ``gw`` at each scrape."""

    def __init__(self, gw: MQTTGateway) -> None:
        self.gw = gw

    def describe(self):
        return []  # collected on demand; no describe-time scrape

    def collect(self):
        gw = self.gw
        s = gw.stats
        conns = GaugeMetricFamily("mqgate_mqtt_connections", "MQTT connections now, by listener and protocol",
                                  labels=["listener", "protocol"])
        by: dict[tuple[str, str], int] = {}
        online = offline = persistent = subscriptions = 0
        for sess in list(gw.router.sessions.values()):
            conn = sess.conn
            if conn is not None:
                online += 1
                key = (conn.info.listener, PROTOCOLS.get(conn.version, str(conn.version)))
                by[key] = by.get(key, 0) + 1
            else:
                offline += 1
            persistent += sess.persistent
            subscriptions += len(sess.subs)
        for (listener, proto), n in sorted(by.items()):
            conns.add_metric([listener, proto], n)
        yield conns
        sessions = GaugeMetricFamily("mqgate_mqtt_sessions", "MQTT sessions, by state", labels=["state"])
        sessions.add_metric(["online"], online)
        sessions.add_metric(["offline"], offline)
        yield sessions
        yield GaugeMetricFamily("mqgate_mqtt_persistent_sessions",
                                "sessions that outlive their connection (expiry > 0)", value=persistent)
        yield GaugeMetricFamily("mqgate_mqtt_subscriptions", "subscriptions of all sessions", value=subscriptions)
        yield GaugeMetricFamily("mqgate_mqtt_retained_messages", "retained messages (stored)",
                                value=len(gw.retained.stored))
        received = CounterMetricFamily("mqgate_mqtt_messages_received", "PUBLISH packets received, by QoS",
                                       labels=["qos"])
        sent = CounterMetricFamily("mqgate_mqtt_messages_sent", "PUBLISH packets sent, by QoS", labels=["qos"])
        for qos in range(3):
            received.add_metric([str(qos)], s.received_qos[qos])
            sent.add_metric([str(qos)], s.sent_qos[qos])
        yield received
        yield sent
        dropped = CounterMetricFamily("mqgate_mqtt_messages_dropped", "messages dropped, by reason",
                                      labels=["reason"])
        dropped.add_metric(["queue_full"], s.dropped)
        dropped.add_metric(["expired"], s.expired)
        dropped.add_metric(["no_permission"], s.denied)
        yield dropped
        yield CounterMetricFamily("mqgate_mqtt_received_bytes", "bytes read from MQTT clients", value=s.bytes_in)
        yield CounterMetricFamily("mqgate_mqtt_sent_bytes", "bytes written to MQTT clients", value=s.bytes_out)
        yield CounterMetricFamily("mqgate_mqtt_auth_failures", "CONNECTs refused for bad credentials",
                                  value=s.auth_failures)
        yield CounterMetricFamily("mqgate_mqtt_connects", "CONNECTs accepted", value=s.connects)
        yield CounterMetricFamily("mqgate_mqtt_connects_refused", "CONNECTs refused, any reason", value=s.refused)
        yield CounterMetricFamily("mqgate_mqtt_protocol_errors", "connections closed for a protocol error",
                                  value=s.protocol_errors)
        ls = gw.listener_stats
        yield CounterMetricFamily("mqgate_mqtt_sockets_refused", "sockets closed at once: maxConnections reached",
                                  value=ls.refused)
        yield CounterMetricFamily("mqgate_mqtt_handshake_failures", "TLS or WebSocket handshakes that failed",
                                  value=ls.handshake_failures)


def make_registry(gw: MQTTGateway) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatewayCollector(gw))
    ProcessCollector(registry=registry)
    return registry
