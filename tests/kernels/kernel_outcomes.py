"""Run the compiled kernels' inputs and print what comes out, as JSON lines.

Not a test module: tests/kernels/test_twins.py runs it twice, once with the
compiled modules and once with MQGATE_PURE_PYTHON=1, and compares the output
line by line. Inputs: the byte fixtures of tests/gateway/mqtt (every packet
type, 3.1 to 5.0), a seeded corpus of fuzzed packets (random bytes behind
valid first bytes, and every fixture cut and with a flipped byte), stored
messages encoded, decoded and cut, topic matching, and the send path's
stamps (new messages, UNIQ_KEYs, `_stamp_many`).
"""

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "gateway" / "mqtt"))
sys.path.insert(0, str(HERE.parent.parent))  # this tree's kernels, not an installed copy's (a worktree)

import core._kernels  # noqa: E402
from core.broker.config import BrokerConfig  # noqa: E402
from core.broker.send_checks import SendChecks  # noqa: E402
from core.broker.topics import TopicConfig, TopicFilterType  # noqa: E402
from core.broker.uniq_key import UniqKeyGenerator  # noqa: E402
from core.store.encoder import EncodedMessage  # noqa: E402
from core.store.message import Message, decode_message, decode_segment, new_message  # noqa: E402
from gateway.mqtt import (NEED_DATA, PUBACK_WORD, PUBCOMP_WORD, PUBREC_WORD, ClientAcks, MQTTConnection,  # noqa: E402
                          OutboundFlows, ProtocolError, PubAck, PubComp, PubRec, decode_all, encode, plain_acks,
                          publish_v4_head)
from gateway.publish_output import with_packet_id  # noqa: E402
from gateway.wildcard import SubscriptionTrie, topic_matches  # noqa: E402
from test_mqtt_fixtures import CASES  # noqa: E402

from mqtt_helpers import connect_bytes, h  # noqa: E402

FIRST_BYTES = [0x10, 0x20, 0x30, 0x32, 0x34, 0x3B, 0x40, 0x50, 0x62, 0x70, 0x82, 0x90,
               0xA2, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0]


def out(kind: str, case, result) -> None:
    print(json.dumps([kind, repr(case), result], default=repr))


def outcome(fn):
    try:
        return ["ok", repr(fn())]
    except (ProtocolError, ValueError, KeyError, IndexError) as e:
        return ["error", type(e).__name__, str(e)]


def server_events(version: int, data: bytes):
    def run():
        conn = MQTTConnection()
        conn.receive_data(connect_bytes(version))
        conn.events()
        from gateway.mqtt import ConnAck
        conn.send(ConnAck())
        conn.receive_data(data)
        evs = []
        while (ev := conn.next_event()) is not NEED_DATA:
            evs.append(ev)
        return evs
    return outcome(run)


def client_acks(version: int, data: bytes):
    """``events()`` of a connection that decodes runs of plain acks as ack words."""
    def run():
        conn = MQTTConnection(ack_words=True)
        conn.receive_data(connect_bytes(version))
        conn.events()
        from gateway.mqtt import ConnAck
        conn.send(ConnAck())
        conn.receive_data(data)
        return conn.events()
    return outcome(run)


def acks() -> None:
    """Ack words: decoded runs, the outbound flows stepped by them, their bytes;
    3.1.1 PUBLISH heads."""
    rnd = random.Random(1313)
    kinds = [(0x40, PubAck, PUBACK_WORD), (0x50, PubRec, PUBREC_WORD), (0x70, PubComp, PUBCOMP_WORD)]
    for _ in range(300):
        data = b"".join(bytes((rnd.choice((0x40, 0x50, 0x62, 0x70, 0x30, 0x41)), rnd.choice((2, 2, 2, 3)),
                               rnd.randrange(3), rnd.randrange(256))) for _ in range(rnd.randrange(1, 9)))
        out("client_acks", data.hex(), client_acks(rnd.choice((4, 5)), data))
        flows = OutboundFlows(64)
        for _ in range(rnd.randrange(12)):
            flows.start(rnd.choice((1, 2)), rnd.choice((None, 5, ["r", 1, 2])))
        run = [ClientAcks([word | rnd.randrange(1, 14) for _ in range(rnd.randrange(1, 5))]) if rnd.random() < 0.6
               else cls(packet_id=rnd.randrange(1, 14), reason_code=rnd.choice((0, 0x92 if cls is PubComp else 0x80)))
               for _, cls, word in (rnd.choice(kinds) for _ in range(4))]
        lists = ([], [], [])
        out("on_acks", repr(run), [outcome(lambda: flows.on_acks(run, *lists)), lists, flows.to_state()])
        words = [rnd.choice((0, 1, 2, 3)) << 16 | rnd.randrange(1, 65536) for _ in range(rnd.randrange(1, 6))]
        out("plain_acks", words, plain_acks(words).hex())
    for rm, nxt, busy in ((3, 65535, (65535, 1)), (2, 7, ()), (65535, 1, (1, 2, 3))):  # packet ids: wrap, window
        flows = OutboundFlows.from_state({"receive_maximum": rm, "next": nxt,
                                          "flows": [[pid, 1, 1, None] for pid in busy]})
        starts = ((1, None), (2, 7), (0, None), (1, ["r", 1, 2]), (3, None))
        out("start", (rm, nxt, busy), [[outcome(lambda: flows.start(q, r)) for q, r in starts], flows.to_state()])
    for pid in (1, 127, 128, 255, 256, 0x7FFF, 0x8000, 0x80FF, 0xFF7F, 0xFFFF):  # the fast path's PUBLISH bytes
        out("with_packet_id", pid, [with_packet_id(publish_v4_head("t/é", n, 1, False), pid, b"\xff" * n).hex()
                                    for n in (0, 1, 300)])
    for pid in (0, -1, 0x10000, 0x1FFFF):  # outside 1..65535: refused, not truncated to 16 bits
        out("with_packet_id", pid, outcome(lambda: with_packet_id(b"\x32\x03\x00\x01t", pid, b"")))
    for topic in ("a", "t/é", "x" * 300):
        for size in (0, 1, 122, 125, 16380, 2_100_000):
            for qos in (0, 1, 2, 3):
                out("head", (topic, size, qos), outcome(lambda: publish_v4_head(topic, size, qos, size % 2 == 1)))


def packets() -> None:
    rnd = random.Random(1883)
    corpus = []
    for version, name, hexed, event in CASES:
        data = h(hexed)
        out("encode", name, outcome(lambda: encode(event, version).hex()))
        corpus.append((version, data))
        for cut in range(1, len(data)):
            corpus.append((version, data[:cut]))
        for _ in range(8):
            flipped = bytearray(data)
            flipped[rnd.randrange(len(data))] = rnd.randrange(256)
            corpus.append((version, bytes(flipped)))
    for _ in range(3000):
        body = rnd.randbytes(rnd.randrange(41))
        corpus.append((rnd.choice((3, 4, 5)), bytes((rnd.choice(FIRST_BYTES), len(body))) + body))
    for version, data in corpus:
        out("decode_all", (version, data.hex()), outcome(lambda: decode_all(data, version)))
        out("server", (version, data.hex()), server_events(version, data))


def messages() -> None:
    rnd = random.Random(10911)
    entries = []
    for i in range(300):
        props = {f"k{j}": rnd.choice(["", "v", "x" * rnd.randrange(300), "ü"]) for j in range(rnd.randrange(5))}
        msg = Message(topic=rnd.choice(["T", "a%b", "t" * 127]), body=rnd.randbytes(rnd.randrange(600)),
                      queue_id=rnd.randrange(8), flag=rnd.randrange(-5, 5), properties=props,
                      born_timestamp=rnd.randrange(2**40), reconsume_times=rnd.randrange(3))
        enc = EncodedMessage(msg)
        buf = bytes(enc.stamp(rnd.randrange(2**31), rnd.randrange(2**40), rnd.randrange(2**41)))
        entries.append(buf)
        out("message", i, [buf.hex(), enc.tags_code, enc.keys, enc.uniq_key, list(enc.multi_dispatch)])
        out("decoded", i, outcome(lambda: decode_message(buf, check_crc=True)))
        out("cut", i, outcome(lambda: decode_message(buf[: rnd.randrange(len(buf))], check_crc=True)))
    segment = b"".join(entries) + bytes(64)
    out("segment", len(segment), outcome(lambda: [m.queue_offset for m in decode_segment(segment)]))


def _frozen_keys(counter: int) -> UniqKeyGenerator:
    """A generator whose ids do not depend on the clock: its last time part
    is far ahead of now, so each id takes the next counter (see `next`)."""
    g = UniqKeyGenerator("10.1.2.3")
    g._prefix = "0A0102030405060708AB"
    g._month_start_ms, g._next_month_ms = 0, 2**62
    g._last_ms, g._counter = 2**50, counter  # ms since the month's start: never reached
    g._stem = f"{g._prefix}{2**50 & 0x7FFFFFFF:08X}"
    return g


class _Stamper(SendChecks):
    """The send path's stamps alone: the state `_stamp_many` reads."""

    def __init__(self, counter: int) -> None:
        self.config = BrokerConfig()
        self.store_host = b"\x0a\x00\x00\x07\x00\x00\x27\x11"
        self._uniq = _frozen_keys(counter)


def sends() -> None:
    rnd = random.Random(1313)
    for start, n in ((0, 5), (0xFFF0, 40), (0xFFFE, 70_000), (7, 0)):
        keys = _frozen_keys(start).next_many(n)
        out("uniq_keys", (start, n), [len(keys), keys[:3], keys[-3:], len(set(keys))])
    for i in range(200):
        base = {f"p{j}": rnd.choice(["", "v", "ü", "x" * rnd.randrange(40)]) for j in range(rnd.randrange(6))}
        if rnd.random() < 0.3:
            base["WAIT"] = rnd.choice(["true", "false", ""])
        if rnd.random() < 0.3:
            base["UNIQ_KEY"] = f"K{i}"
        msgs = [new_message(rnd.choice(["T", "a%b"]), rnd.randbytes(rnd.randrange(50)), base,
                            rnd.choice([0, rnd.randrange(2**40)]), None) for _ in range(rnd.randrange(1, 4))]
        cfg = TopicConfig("T", topic_filter_type=rnd.choice(list(TopicFilterType)))
        waits = _Stamper(rnd.randrange(0x10000))._stamp_many(msgs, [(cfg, rnd.randrange(8))] * len(msgs))
        for m in msgs:
            m.born_timestamp = m.born_timestamp if m.born_timestamp < 2**40 else -1  # a clock read: not compared
        out("stamped", i, [waits, [[m.topic, m.queue_id, list(m.properties.items()), m.store_host.hex(),
                                    m.born_timestamp, m.sysflag] for m in msgs]])
        out("stamped_entry", i, [bytes(EncodedMessage(m).buf).hex() for m in msgs if m.born_timestamp >= 0])


def topics() -> None:
    rnd = random.Random(8883)
    words = ["a", "b", "", "$SYS", "+", "#", "ü"]
    filters = ["/".join(rnd.choice(words) for _ in range(rnd.randrange(1, 5))) for _ in range(300)]
    names = ["/".join(rnd.choice(words[:5]) for _ in range(rnd.randrange(1, 5))) for _ in range(300)]
    trie = SubscriptionTrie()
    for i, f in enumerate(filters):
        out("subscribe", f, outcome(lambda: trie.subscribe(f"c{i % 7}", f, i)))
    for n in names:
        out("trie", n, outcome(lambda: trie.match(n)))
        out("matches", n, [outcome(lambda: topic_matches(f, n)) for f in filters[:40]])


if __name__ == "__main__":
    print(json.dumps(["status", core._kernels.status()]))
    packets()
    acks()
    messages()
    sends()
    topics()
