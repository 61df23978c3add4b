"""paho-mqtt clients: the realistic mode, what an application would run.

Rules it keeps:

- Same driving interface as ``rawclient`` (``fill``, ``next_due``, ``done``,
  ``close``) so the worker loop does not care which mode it runs; paho's own
  network thread (``loop_start``) does the I/O.
- A publisher keeps at most ``inflight`` messages that paho has not yet
  reported published (QoS 0: written; QoS 1/2: acknowledged), so paho's
  internal queue stays bounded.
- Callbacks only append to this client's own log and buckets; the worker reads
  them after ``close``, when paho's thread has stopped.
"""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from .accounting import stamp, SubscriberLog


class PahoError(Exception):
    pass


def _client(spec, version: int, inflight: int) -> mqtt.Client:
    protocol = mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311
    kw = {} if version == 5 else {"clean_session": spec.clean}
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=spec.client_id,
                         protocol=protocol, reconnect_on_failure=False, **kw)
    client.max_inflight_messages_set(max(1, inflight))
    client.max_queued_messages_set(0)
    return client


def _connect(client, host, port, spec, version: int, timeout: float) -> None:
    ready = threading.Event()
    failure: list = []

    def on_connect(_c, _u, _flags, reason, _props):
        if reason.is_failure:
            failure.append(str(reason))
        ready.set()

    client.on_connect = on_connect
    kw = {}
    if version == 5:
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 0 if spec.clean else 3600
        kw = {"clean_start": spec.clean, "properties": props}
    client.connect(host, port, keepalive=600, **kw)
    client.loop_start()
    if not ready.wait(timeout) or failure:
        client.loop_stop()
        raise PahoError(f"{spec.client_id}: connect failed: {failure or 'timeout'}")


class PahoPublisher:
    def __init__(self, host, port, spec, *, qos, payload, inflight, version,
                 timeout, buckets):
        self.spec, self.qos, self.size = spec, qos, payload
        self.inflight, self.buckets = inflight, buckets
        self.count = spec.count
        self.sent = 0
        self.published = 0
        self.start_ns = 0
        self.last_ns = 0
        self.client = _client(spec, version, inflight)
        self.client.on_publish = self._on_publish
        _connect(self.client, host, port, spec, version, timeout)

    def _on_publish(self, _c, _u, _mid, _reason, _props):
        self.published += 1

    @property
    def done(self) -> bool:
        return self.sent >= self.count and self.published >= self.sent

    def next_due(self, now_ns: int) -> float | None:
        if not self.spec.rate or self.sent >= self.count:
            return None
        due = self.start_ns + int(self.sent * 1e9 / self.spec.rate)
        return max(0.0, (due - now_ns) / 1e9)

    def fill(self, now_ns: int) -> None:
        allowed = min(self.count - self.sent, self.inflight - (self.sent - self.published))
        if self.spec.rate:
            allowed = min(allowed, int((now_ns - self.start_ns) * self.spec.rate / 1e9)
                          + 1 - self.sent)
        for _ in range(max(0, min(allowed, 64))):
            now = time.monotonic_ns()
            self.client.publish(self.spec.topic,
                                stamp(self.spec.publisher, self.sent, now, self.size),
                                qos=self.qos)
            self.sent += 1
            self.buckets.add(now)
            self.last_ns = now

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class PahoSubscriber:
    def __init__(self, host, port, spec, *, qos, version, timeout, buckets,
                 log: SubscriberLog):
        self.host, self.port, self.spec = host, port, spec
        self.qos, self.version, self.timeout = qos, version, timeout
        self.buckets, self.log = buckets, log
        self.arrivals = 0
        self.last_ns = 0
        self.client = _client(spec, version, 65535)
        self.client.on_message = self._on_message
        _connect(self.client, host, port, spec, version, timeout)
        subscribed = threading.Event()
        granted: list = []

        def on_subscribe(_c, _u, _mid, reasons, _props):
            granted.extend(reasons)
            subscribed.set()

        self.client.on_subscribe = on_subscribe
        self.client.subscribe([(f, qos) for f in spec.filters])
        if not subscribed.wait(timeout) or any(r.is_failure for r in granted):
            self.close()
            raise PahoError(f"{spec.client_id}: SUBACK refused or missing: {granted}")
        if spec.offline_while_publishing:
            self.close()

    def reconnect(self) -> None:
        self.client = _client(self.spec, self.version, 65535)
        self.client.on_message = self._on_message
        _connect(self.client, self.host, self.port, self.spec, self.version, self.timeout)

    def _on_message(self, _c, _u, message) -> None:
        now = time.monotonic_ns()
        self.log.record(message.payload, now)
        self.arrivals += 1
        self.last_ns = now
        self.buckets.add(now)

    @property
    def done(self) -> bool:
        return self.spec.expected is not None and self.arrivals >= self.spec.expected

    def next_due(self, now_ns: int) -> None:
        return None

    def fill(self, now_ns: int) -> None:
        pass

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
