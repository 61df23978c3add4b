"""End to end: devices publish over MQTT to a running `mqgate serve`; the job aggregates.

paho-mqtt (MQTT 5, with and without a content type, JSON and msgpack)
publishes telemetry at QoS 1; the telemetry job then runs against the data
directory of the server *while it is still running*, and every aggregate is
compared with a plain-Python computation. Event time is the born timestamp
the gateway stamped on receipt, so the expected windows read it back from the
commit log files with plain Python (no Spark, no store object).
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from pathlib import Path

import msgpack
import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from core.store.message import BLANK_MAGIC, decode_message
from serve_process import ServeProcess, free_port
from spark import telemetry

DEVICES = ["d0", "d1", "d2"]


def _payload(i: int) -> tuple[bytes, str | None, dict]:
    values = {"seq": i, "temp": 18 + (i * 7) % 11 - 0.25 * (i % 4), "hum": (i * 13) % 40}
    if i % 4 == 0:
        return json.dumps(values).encode(), "application/json", values
    if i % 4 == 1:
        return msgpack.packb(values), "application/msgpack", values
    if i % 4 == 2:
        return json.dumps(values).encode(), None, values  # detected
    return msgpack.packb(values), None, values


def _publish_all(port: int, n: int) -> list[tuple[str, dict]]:
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="telemetry-e2e", protocol=mqtt.MQTTv5)
    client.connect("127.0.0.1", port)
    client.loop_start()
    sent = []
    try:
        for i in range(n):
            device = DEVICES[i % len(DEVICES)]
            body, ctype, values = _payload(i)
            props = Properties(PacketTypes.PUBLISH)
            if ctype:
                props.ContentType = ctype
            client.publish(f"devices/{device}/telemetry", body, qos=1, properties=props).wait_for_publish(10)
            sent.append((device, values))
        # not telemetry: another topic, and a malformed payload on a telemetry topic
        client.publish("devices/d0/status", b'{"online": 1}', qos=1).wait_for_publish(10)
        client.publish("devices/d1/telemetry", b"{broken", qos=1).wait_for_publish(10)
    finally:
        client.loop_stop()
        client.disconnect()
    return sent


def _born_times(data_dir: Path) -> dict[int, int]:
    """seq -> born timestamp, read from the commit-log segment files."""
    out = {}
    for seg in sorted((data_dir / "commitlog").iterdir()):
        data = seg.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            size = int.from_bytes(data[pos:pos + 4], "big", signed=True)
            magic = int.from_bytes(data[pos + 4:pos + 8], "big", signed=True)
            if size <= 0 or magic == BLANK_MAGIC:
                break
            m = decode_message(data, pos)
            if m.properties.get("mqttTopic", "").endswith("/telemetry"):
                try:
                    body = json.loads(m.body) if m.body[:1] == b"{" else msgpack.unpackb(m.body)
                    out[body["seq"]] = m.born_timestamp
                except (ValueError, msgpack.ExtraData, msgpack.FormatError, KeyError, TypeError):
                    pass
            pos += size
    return out


def test_job_on_a_live_server_matches_python(spark, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    port = free_port()
    with ServeProcess(data, "--mqtt-port", str(port), "--ws-port", "0", "--namesrv-port", "0",
                      "--broker-port", "0", "--flush", "sync"):
        sent = _publish_all(port, 90)
        argv = ["--data-dir", str(data), "--out", str(out), "--filter", "devices/+/telemetry",
                "--device-level", "2", "--window", "1 minute"]
        assert telemetry.main(argv, session=spark) == 0
        born = _born_times(data)

    assert len(born) == len(sent)
    groups = defaultdict(list)
    for device, values in sent:
        ts = born[values["seq"]]
        for field in ("temp", "hum"):  # seq is a counter, not a metric (--ignore-fields default)
            groups[(device, ts - ts % 60_000, field)].append((ts, values["seq"], float(values[field])))
    want = {}
    for key, vals in groups.items():
        xs = [v for _, _, v in vals]
        want[key] = (len(xs), min(xs), max(xs), sum(xs) / len(xs), max(vals)[2])

    got = {}
    for r in spark.read.parquet(os.path.join(out, "aggregates")).collect():
        got[(r.device, round(r.window_start.timestamp() * 1000), r.field)] = (r["count"], r["min"], r["max"], r["avg"], r["last"])
    assert got.keys() == want.keys()
    for key, (c, lo, hi, avg, last) in want.items():
        gc, glo, ghi, gavg, glast = got[key]
        assert (gc, glo, ghi, glast) == (c, lo, hi, last), key
        assert math.isclose(gavg, avg, rel_tol=1e-12), key

    rejects = spark.read.parquet(os.path.join(out, "rejects")).collect()
    assert [(r.device, r.mqtt_topic) for r in rejects] == [("d1", "devices/d1/telemetry")]
