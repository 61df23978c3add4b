"""MQTT topics whose first level cannot be a broker topic name as is still work.

A first level longer than RocketMQ's 127 characters once escaped, or one that
spells a broker-internal topic (TBW102, rmq_sys_...), is stored in a hashed
broker topic; subscribers see the message on its MQTT topic, QoS 1 included.
"""

import threading
import time

import paho.mqtt.client as mqtt

from serve_process import ServeProcess, free_port

TOPICS = ["x" * 300 + "/a", "TBW102/x", "rmq_sys_wheel_timer/y", "é" * 70 + "/z"]


def test_long_and_reserved_first_levels_round_trip(tmp_path):
    port = free_port()
    with ServeProcess(tmp_path / "d", "--mqtt-port", str(port), "--ws-port", "0", "--namesrv-port", "0",
                      "--broker-port", "0"):
        got = []
        acked = []
        all_acked = threading.Event()
        sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="long-sub")
        sub.on_message = lambda c, u, m: got.append((m.topic, m.payload))

        def on_subscribe(client, userdata, mid, reason_codes, properties):
            acked.append(mid)
            if len(acked) == len(TOPICS):
                all_acked.set()

        sub.on_subscribe = on_subscribe
        sub.connect("127.0.0.1", port)
        sub.loop_start()
        try:
            for t in TOPICS:
                sub.subscribe(t, qos=1)
            assert all_acked.wait(10)
            pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="long-pub")
            pub.connect("127.0.0.1", port)
            pub.loop_start()
            for i, t in enumerate(TOPICS):
                assert pub.publish(t, b"%d" % i, qos=1).wait_for_publish(10) is None
            deadline = time.monotonic() + 10
            while len(got) < len(TOPICS) and time.monotonic() < deadline:
                time.sleep(0.05)
            pub.loop_stop()
            pub.disconnect()
        finally:
            sub.loop_stop()
            sub.disconnect()
    assert sorted(got) == sorted((t, b"%d" % i) for i, t in enumerate(TOPICS))
