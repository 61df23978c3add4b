"""Time per message of each step of the MQTT publish path that runs in a
compiled kernel, measured in-process (no sockets, no trio):

    python -m loadtest.bench_kernels [--count 20000] [--repeat 5]

Steps, in the order a fanned-in QoS 0 PUBLISH meets them: ``decode`` (the
codec turns a read of PUBLISH packets into events), ``to_message``
(``publish_to_message``), ``uniq_key`` (the broker's message id),
``encode`` (``EncodedMessage``: the bytes of the commit-log entry),
``outbound`` (``outbound_from_message``: the deliverable view) and
``template`` (the PUBLISH bytes for a 3.1.1 subscriber). Prints one JSON
object: per step, the best of ``--repeat`` runs in nanoseconds per message,
and whether the compiled kernels ran (``MQGATE_PURE_PYTHON=1`` forces the
source). Use it to see which step a change moved; use
``bench_instructions`` for the whole broker's cost per message.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import core  # noqa: F401  (installs the kernel finder before the kernels are imported)
from core._kernels import status
from core.broker.uniq_key import UniqKeyGenerator
from core.store.encoder import EncodedMessage
from core.store.message import PROPERTY_CLUSTER, PROPERTY_UNIQ_KEY, pack_host
from gateway.mapping import outbound_from_message, publish_to_message
from gateway.mqtt import ConnAck, Connect, MQTTConnection, Publish, encode
from gateway.mqtt.fanout import PublishTemplate


def _packets(count: int) -> bytes:
    """``count`` QoS 0 PUBLISH packets as a 3.1.1 client sends them (the load tool's shape)."""
    out = bytearray()
    for i in range(count):
        topic = f"bench/fan-in/{i % 4}".encode()
        payload = i.to_bytes(8, "big") * 8
        body = len(topic).to_bytes(2, "big") + topic + payload
        out += bytes((0x30, len(body))) + body
    return bytes(out)


def _connected() -> MQTTConnection:
    mq = MQTTConnection()
    mq.receive_data(encode(Connect(client_id="bench", protocol_version=4), 4))
    mq.events()
    mq.send(ConnAck())
    return mq


def _best(fn, repeat: int, count: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        best = min(best, time.perf_counter_ns() - t0)
    return round(best / count, 1)


def measure(count: int, repeat: int) -> dict:
    data = _packets(count)
    pubs: list[Publish] = []

    def decode():
        mq = _connected()
        mq.receive_data(data)
        pubs[:] = mq.events()

    decode()
    assert len(pubs) == count
    msgs = []

    def to_message():
        msgs[:] = [publish_to_message(p, "bench", "bench-client", 1_700_000_000_000) for p in pubs]

    to_message()
    gen = UniqKeyGenerator()
    keys = []

    def uniq_key():
        keys[:] = [gen.next() for _ in range(count)]

    uniq_key()
    host = pack_host("127.0.0.1", 10911)
    for m, k in zip(msgs, keys):
        m.properties[PROPERTY_CLUSTER] = "DefaultCluster"
        m.properties[PROPERTY_UNIQ_KEY] = k
        m.store_host = host

    def encode():
        for m in msgs:
            EncodedMessage(m)

    outs = []

    def outbound():
        outs[:] = [outbound_from_message(m, m.properties["mqttTopic"]) for m in msgs]

    outbound()

    def template():
        for o in outs:
            PublishTemplate(o, 4, qos=0, retain=False)

    steps = {"decode": decode, "to_message": to_message, "uniq_key": uniq_key, "encode": encode,
             "outbound": outbound, "template": template}
    ns = {name: _best(fn, repeat, count) for name, fn in steps.items()}
    ns["total"] = round(sum(ns.values()), 1)
    return {"kernels": status(), "count": count, "ns_per_message": ns}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_kernels", description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.count, args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
