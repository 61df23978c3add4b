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

import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from core.broker import LMQ_TOPIC_PREFIX

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
            if sess.node is not None:
                continue  # another gateway node's session: that node counts it
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
        dropped.add_metric(["quota_exceeded"], s.quota_exceeded)
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


@dataclass
class BrokerView:
    """What the broker series read: the broker, and when they run, the HA node's
    ``status()`` (replication links) and the transaction service's ``stats()``."""

    broker: Any
    ha_status: Callable[[], dict] | None = None
    transactions: Callable[[], dict] | None = None
    replication_latency: Callable[[], Any] | None = None  # the master's LatencyHistogram, or None
    clients: Any = None  # the remoting's ClientTable (consumer groups' members), or None


class BrokerCollector:
    """The broker's series: per broker topic (the topic table, never a session's
    light message queue), per consumer group and topic, per slave."""

    def __init__(self, view: BrokerView) -> None:
        self.view = view

    def describe(self):
        return []

    def collect(self):
        b = self.view.broker
        store = b.store
        puts = CounterMetricFamily("mqgate_broker_topic_puts", "messages stored in a broker topic since it was "
                                   "created (the sum of its queues' offsets)", labels=["topic"])
        for name, cfg in sorted(b.topics.all().items()):
            queues = max(cfg.read_queue_nums, cfg.write_queue_nums)
            puts.add_metric([name], sum(b.max_offset(name, q) for q in range(queues)))
        yield puts
        gets = CounterMetricFamily("mqgate_broker_topic_gets", "messages pulled by consumers since start",
                                   labels=["topic"])
        for name, n in sorted(b.get_counts.items()):
            gets.add_metric([name], n)
        yield gets
        lag = GaugeMetricFamily("mqgate_broker_consumer_lag", "messages stored but not yet committed by the "
                                "consumer group", labels=["group", "topic"])
        lags: dict[tuple[str, str], int] = {}
        for group, topic, qid, offset in b.offsets.items():
            if topic.startswith(LMQ_TOPIC_PREFIX) or group.startswith(LMQ_TOPIC_PREFIX):
                continue  # an MQTT session's queue: per client, not a series
            key = (group, topic)
            lags[key] = lags.get(key, 0) + max(0, b.max_offset(topic, qid) - offset)
        for (group, topic), n in sorted(lags.items()):
            lag.add_metric([group, topic], n)
        yield lag
        yield GaugeMetricFamily("mqgate_broker_commitlog_bytes", "bytes of commit log held (max - min offset)",
                                value=store.max_phy_offset - store.min_phy_offset)
        yield CounterMetricFamily("mqgate_broker_commitlog_written_bytes", "commit-log end offset (bytes ever written)",
                                  value=store.max_phy_offset)
        try:
            disk = shutil.disk_usage(store.root)
            yield GaugeMetricFamily("mqgate_broker_disk_used_ratio", "used / size of the data directory's disk",
                                    value=disk.used / disk.total if disk.total else 0.0)
        except OSError:
            pass
        hist = b.flush_latency
        if hist is not None:
            yield _histogram("mqgate_broker_flush_seconds", "commit-log fsync time, per flush", hist)
        yield _histogram("mqgate_broker_put_durable_seconds", "SYNC_FLUSH / SYNC_MASTER: time a send (one "
                         "batch) waited to be flushed and replicated", b.durable_latency)
        hist = self.view.replication_latency() if self.view.replication_latency is not None else None
        if hist is not None:
            yield _histogram("mqgate_broker_replication_seconds", "SYNC_MASTER wait for a slave's acknowledgement, "
                             "per confirmed wait", hist)
        timers = getattr(b, "timers", None)
        if timers is not None:
            yield GaugeMetricFamily("mqgate_broker_timers_pending", "timer messages waiting to fire",
                                    value=timers.pending)
        if self.view.transactions is not None:
            stats = self.view.transactions()
            yield GaugeMetricFamily("mqgate_broker_transactions_pending", "half messages not yet committed or "
                                    "rolled back", value=stats["pending"])
        if self.view.ha_status is not None:
            slaves = self.view.ha_status().get("slaves") or []
            repl = GaugeMetricFamily("mqgate_broker_replication_lag_bytes", "commit-log bytes a slave has not "
                                     "acknowledged", labels=["slave"])
            for link in slaves:
                repl.add_metric([str(link["addr"])], link["lagBytes"])
            yield repl


def _histogram(name: str, doc: str, hist) -> HistogramMetricFamily:
    buckets = [(repr(bound), n) for bound, n in zip(hist.BOUNDS, hist.counts)] + [("+Inf", hist.count)]
    family = HistogramMetricFamily(name, doc)
    family.add_metric([], buckets, sum_value=hist.sum)
    return family


def make_registry(gw: MQTTGateway | None, broker: BrokerView | None = None) -> CollectorRegistry:
    """The MQTT series of ``gw`` (None: a broker alone), ``broker``'s, the process's."""
    registry = CollectorRegistry(auto_describe=False)
    if gw is not None:
        registry.register(GatewayCollector(gw))
    if broker is not None:
        registry.register(BrokerCollector(broker))
    ProcessCollector(registry=registry)
    return registry
