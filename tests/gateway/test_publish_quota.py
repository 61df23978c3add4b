"""``[mqtt] maxPublishRate``: MQTT 5 publishers over it are told 0x97 and
nothing of what is refused is stored; MQTT 3.1.1 publishers are slowed down
and lose nothing. Real paho-mqtt clients against a real ``mqgate serve``."""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as mqtt
import pytest
import trio

from gateway.quota import PublishQuota
from serve_process import ServeProcess, free_port

RATE = 10


async def test_the_bucket_starts_full_and_refills_at_the_rate(autojump_clock):
    q = PublishQuota(4)
    assert [q.take() for _ in range(5)] == [True, True, True, True, False]
    await trio.sleep(0.5)
    assert [q.take() for _ in range(3)] == [True, True, False]
    await trio.sleep(10)  # never more than one second's worth
    assert sum(q.take() for _ in range(10)) == 4
    start = trio.current_time()
    await q.wait(4)  # an empty bucket: 4 more cost a second at 4/s
    assert trio.current_time() - start == pytest.approx(1.0)


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    root = tmp_path_factory.mktemp("quota")
    cfg = root / "quota.toml"
    cfg.write_text(f"[mqtt]\nmaxPublishRate = {RATE}\n")
    port = free_port()
    with ServeProcess(root / "d", "--config", str(cfg), "--mqtt-port", str(port), "--ws-port", "0",
                      "--namesrv-port", "0", "--broker-port", "0"):
        yield port


def _client(port: int, cid: str, protocol) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=protocol)
    c.max_inflight_messages_set(100)
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def _subscriber(port: int, topic: str):
    got: set[bytes] = set()
    ready = threading.Event()
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"sub-{topic}", protocol=mqtt.MQTTv5)
    sub.on_message = lambda c, u, m: got.add(m.payload)
    sub.on_subscribe = lambda *a: ready.set()
    sub.connect("127.0.0.1", port)
    sub.loop_start()
    sub.subscribe(topic, qos=1)
    assert ready.wait(10)
    return sub, got


def _wait(cond, timeout=20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_an_mqtt5_publisher_over_the_quota_gets_0x97_and_nothing_refused_is_stored(port):
    sub, got = _subscriber(port, "quota/v5")
    codes: dict[int, int] = {}
    pub = _client(port, "fast-v5", mqtt.MQTTv5)
    pub.on_publish = lambda c, u, mid, rc, props: codes.__setitem__(mid, rc.value)
    mids = {pub.publish("quota/v5", b"%d" % i, qos=1).mid: b"%d" % i for i in range(4 * RATE)}
    try:
        assert _wait(lambda: len(codes) == len(mids)), f"{len(codes)} of {len(mids)} acknowledged"
        taken = {mids[m] for m, rc in codes.items() if rc == 0}
        refused = {mids[m] for m, rc in codes.items() if rc == 0x97}
        assert len(taken) + len(refused) == len(mids), codes
        assert len(taken) >= RATE and refused, (len(taken), len(refused))
        assert _wait(lambda: len(got) >= len(taken)), f"{len(got)} of {len(taken)} delivered"
        assert got == taken
    finally:
        for c in (pub, sub):
            c.loop_stop()
            c.disconnect()


def test_an_mqtt311_publisher_over_the_quota_is_slowed_down_and_loses_nothing(port):
    sub, got = _subscriber(port, "quota/v3")
    acked: set[int] = set()
    pub = _client(port, "fast-v3", mqtt.MQTTv311)
    pub.on_publish = lambda c, u, mid, rc, props: acked.add(mid)
    start = time.monotonic()
    mids = [pub.publish("quota/v3", b"%d" % i, qos=1).mid for i in range(3 * RATE)]
    try:
        assert _wait(lambda: len(acked) == len(mids)), f"{len(acked)} of {len(mids)} acknowledged"
        # 30 messages at 10/s with a burst of 10: at least two seconds of debt
        assert time.monotonic() - start >= 1.5
        assert _wait(lambda: len(got) == len(mids))
        assert got == {b"%d" % i for i in range(3 * RATE)}
    finally:
        for c in (pub, sub):
            c.loop_stop()
            c.disconnect()
