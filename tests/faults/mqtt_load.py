"""The MQTT side of the kill rounds: paho-mqtt publishers and a persistent subscriber.

Rules it keeps:

- Every client has a persistent session (clean session off) and lives for the
  whole campaign: paho reconnects by itself after each kill and resends what
  was not acknowledged, so its in-memory QoS 2 state is the client's real one.
- A message is *acknowledged* when paho's ``on_publish`` fires (PUBACK for
  QoS 1, PUBCOMP for QoS 2).  Payloads are ``<seq>``, one sequence per topic.
- A publisher keeps at most `window` messages unacknowledged, so the load
  follows the server's pace instead of piling up in paho's queue.
- `verdict` judges deliveries against acknowledgements: lost = acknowledged
  and never delivered (must be 0); a QoS 2 duplicate is a second delivery of
  the same payload (must be 0); QoS 1 duplicates are allowed and counted; an
  order violation is a pair a < b where a was acknowledged before b was first
  published but b was delivered first.
"""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as mqtt

TOPICS = {1: "kq/one", 2: "kq/two"}


class _PahoClient(mqtt.Client):
    """paho-mqtt 2.2.0 with one client bug corrected.

    Each reconnect attempt runs ``_messages_reconnect_reset_out``, which moves a
    QoS 2 message waiting for PUBCOMP to "resend PUBREL" -- and, on the next
    attempt (the server still down), from "resend PUBREL" back to "publish":
    the client then sends the PUBLISH again after its PUBREL, which MQTT forbids
    (3.1.1 4.3.3, "MUST NOT re-send the PUBLISH once it has sent the
    corresponding PUBREL"), and the server, which released that packet id,
    rightly stores a new message.  The first campaign runs counted these as
    QoS 2 duplicates (the log held the PUBREL'd copy, then the resent one).
    """

    def _messages_reconnect_reset_out(self) -> None:
        with self._out_message_mutex:
            owed = [m for m in self._out_messages.values() if m.state == mqtt.mqtt_ms_resend_pubrel]
        super()._messages_reconnect_reset_out()
        with self._out_message_mutex:
            for m in owed:
                m.state = mqtt.mqtt_ms_resend_pubrel


def _client(client_id: str, port: int) -> mqtt.Client:
    c = _PahoClient(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False,
                    protocol=mqtt.MQTTv311)
    c.reconnect_delay_set(min_delay=0.1, max_delay=0.5)  # floats are fine: paho sleeps min(delay, max)
    c.max_inflight_messages_set(20)
    c.max_queued_messages_set(0)
    return c


class Publisher:
    def __init__(self, qos: int, port: int, window: int = 40):
        self.qos, self.topic, self.window = qos, TOPICS[qos], window
        self.published: dict[int, float] = {}
        self.acked: dict[int, float] = {}
        self._mid_seq: dict[int, int] = {}
        self._early: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.client = _client(f"fault-pub{qos}", port)
        self.client.on_publish = self._on_publish
        self.client.connect("127.0.0.1", port, keepalive=10)
        self.client.loop_start()
        self._thread = threading.Thread(target=self._run, name=f"pub{qos}", daemon=True)
        self._thread.start()

    def _on_publish(self, client, userdata, mid, reason_code, properties):
        with self._lock:
            seq = self._mid_seq.pop(mid, None)
            if seq is None:
                self._early.add(mid)  # acknowledged before `_run` recorded its mid
            else:
                self.acked[seq] = time.monotonic()

    def _run(self) -> None:
        # paho's lock is held while it calls on_publish, which takes ours: never
        # call into paho while holding ours (lock order), hence `_early`.
        seq = 0
        while not self._stop.is_set():
            with self._lock:
                room = len(self.published) - len(self.acked) < self.window
            if room:
                seq += 1
                with self._lock:
                    self.published[seq] = time.monotonic()
                info = self.client.publish(self.topic, str(seq).encode(), qos=self.qos)
                with self._lock:
                    if info.mid in self._early:
                        self._early.discard(info.mid)
                        self.acked[seq] = time.monotonic()
                    else:
                        self._mid_seq[info.mid] = seq
            # wait for room (an ack) without spinning: the window is the pace
            self._stop.wait(0.002 if room else 0.01)

    def unacked(self) -> int:
        with self._lock:
            return len(self.published) - len(self.acked)

    def stop_publishing(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class Subscriber:
    def __init__(self, port: int):
        self.deliveries: list[tuple[int, int, float]] = []  # (qos of the topic, seq, time)
        self.connected = threading.Event()
        self._lock = threading.Lock()
        self.client = _client("fault-sub", port)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = lambda *a: self.connected.clear()
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *a: self.connected.set()
        self.client.connect("127.0.0.1", port, keepalive=10)
        self.client.loop_start()

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        if flags.session_present:
            self.connected.set()
        else:
            client.subscribe("kq/#", qos=2)  # connected once the SUBACK is in (on_subscribe)

    def _on_message(self, client, userdata, msg):
        qos = 1 if msg.topic == TOPICS[1] else 2
        with self._lock:
            self.deliveries.append((qos, int(msg.payload), time.monotonic()))

    def delivered(self, qos: int) -> set[int]:
        with self._lock:
            return {s for q, s, _ in self.deliveries if q == qos}

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def missing(pubs: dict[int, Publisher], sub: Subscriber, acked_before: float) -> int:
    """Messages acknowledged before ``acked_before`` not delivered yet."""
    n = 0
    for qos, p in pubs.items():
        with p._lock:
            acked = {s for s, t in p.acked.items() if t <= acked_before}
        n += len(acked - sub.delivered(qos))
    return n


def verdict(pubs: dict[int, Publisher], sub: Subscriber) -> dict:
    out = {}
    for qos, p in pubs.items():
        seqs = [s for q, s, _ in sub.deliveries if q == qos]
        first: dict[int, int] = {}
        for i, s in enumerate(seqs):
            first.setdefault(s, i)
        acked = p.acked
        lost = sorted(set(acked) - set(first))
        # order: a acked before b was published (so a < b) => a delivered first.
        # Walk b in publish order with the latest first-delivery among those acked before it.
        order_bad, latest, i = 0, -1, 0
        by_ack = sorted((t, s) for s, t in acked.items() if s in first)
        for b in sorted(s for s in acked if s in first):
            while i < len(by_ack) and by_ack[i][0] < p.published[b]:
                latest = max(latest, first[by_ack[i][1]])
                i += 1
            order_bad += latest > first[b]
        out[f"qos{qos}"] = {"published": len(p.published), "acked": len(acked), "lost": len(lost),
                            "lost_sample": lost[:10], "delivered": len(first),
                            "duplicates": len(seqs) - len(first), "order_violations": order_bad}
    return out
