"""The native side of the kill rounds: the PyPI ``rocketmq`` C++ client in its own process.

``python native_worker.py send NAMESRV TOPIC TIMER_TOPIC GROUP OUT STOP [RATE]``
    sends SYNC messages to TOPIC (keys ``n<seq>``) and, every fourth one, a
    timer message to TIMER_TOPIC (``TIMER_DELAY_MS`` 300..2000, keys
    ``t<seq>``), one at a time, across broker kills, until the file STOP
    exists; a PushConsumer of GROUP consumes TOPIC meanwhile.  Each
    acknowledged send is one JSON line appended to OUT (``{"kind", "seq",
    "t"}``, flushed before the next send), each consumed message a
    ``consumed`` line.  A failed send is retried as a new message (it was
    never acknowledged, so it may or may not be stored).

``python native_worker.py pull NAMESRV TOPIC GROUP``
    reads every queue of TOPIC from offset 0 with a new group and prints one
    JSON line per message: keys, queue, queue offset, UNIQ_KEY.

A separate process because the C++ client holds its own threads and state
across the broker's deaths; a crash of it must not take the campaign down.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from rocketmq.client import Message, Producer, PullConsumer, PushConsumer, SendStatus


def send(namesrv: str, topic: str, timer_topic: str, group: str, out_path: str, stop_path: str,
         rate: str = "0") -> int:
    out = open(out_path, "a", buffering=1)
    producer = Producer(group + "_P")
    producer.set_namesrv_addr(namesrv)
    producer.set_timeout(3000)
    producer.start()

    def consumed(msg):
        out.write(json.dumps({"kind": "consumed", "key": msg.keys.decode(), "t": time.time()}) + "\n")

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, consumed)
    consumer.start()
    rng = random.Random(os.getpid())
    seq = 0
    pace = 1.0 / float(rate) if float(rate) > 0 else 0.0  # 0: one send after the other, flat out
    t0 = time.monotonic()
    try:
        while not os.path.exists(stop_path):
            seq += 1
            if pace:
                time.sleep(max(0.0, t0 + seq * pace - time.monotonic()))  # the schedule, not a wait for an event
            timer = seq % 4 == 0
            m = Message(timer_topic if timer else topic)
            m.set_keys(("t%d" if timer else "n%d") % seq)
            m.set_body(str(seq))
            if timer:
                m.set_property("TIMER_DELAY_MS", str(rng.randint(300, 2000)))
            try:
                r = producer.send_sync(m)
            except Exception:  # the broker is down or restarting: the C++ client raises
                time.sleep(0.1)
                continue
            if r.status == SendStatus.OK:
                out.write(json.dumps({"kind": "timer" if timer else "native", "seq": seq, "t": time.time(),
                                      "id": r.msg_id}) + "\n")
            else:
                time.sleep(0.05)
    finally:
        consumer.shutdown()
        producer.shutdown()
        out.close()
    return 0


def pull(namesrv: str, topic: str, group: str) -> int:
    consumer = PullConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    try:
        for m in consumer.pull(topic, max_num=32):
            print(json.dumps({"key": m.keys.decode(), "queue": m.queue_id, "offset": m.queue_offset,
                              "uniq": (m.get_property("UNIQ_KEY") or b"").decode(), "t": m.store_timestamp, "born": m.born_timestamp,
                              "body": m.body.decode(errors="replace"), "mqtt_topic": (m.get_property("mqttTopic") or b"").decode()}))
    finally:
        consumer.shutdown()
    return 0


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    sys.exit({"send": send, "pull": pull}[cmd](*rest))
