"""Stored bytes against the reference layout (sections 4.1, 4.3, 5.2, 5.4),
written out field by field here, independently of core.store.message."""

import os
import struct

from core.store import Message, pack_host

from .conftest import small_config
from core.store import MessageStore

BORN = ("192.168.0.10", 54321)
STORE = ("127.0.0.1", 10911)


def expected_entry(*, queue_offset, physical_offset, store_ts, sysflag=0):
    body = b"Hello"
    topic = b"TopicTest"
    props = b"TAGS\x01TagA\x02KEYS\x01k1"  # no trailing \x02
    total = 91 + len(body) + len(topic) + len(props)
    assert total == 122
    return b"".join([
        struct.pack(">i", 122),                      # TOTALSIZE
        bytes.fromhex("DAA320A7"),                   # MAGICCODE V1
        struct.pack(">i", 0xF7D18982 & 0x7FFFFFFF),  # BODYCRC: crc32(b"Hello") masked
        struct.pack(">i", 3),                        # QUEUEID
        struct.pack(">i", 7),                        # FLAG
        struct.pack(">q", queue_offset),             # QUEUEOFFSET
        struct.pack(">q", physical_offset),          # PHYSICALOFFSET
        struct.pack(">i", sysflag),                  # SYSFLAG
        struct.pack(">q", 1_700_000_000_000),        # BORNTIMESTAMP
        bytes([192, 168, 0, 10]) + struct.pack(">i", 54321),  # BORNHOST
        struct.pack(">q", store_ts),                 # STORETIMESTAMP
        bytes([127, 0, 0, 1]) + struct.pack(">i", 10911),     # STOREHOSTADDRESS
        struct.pack(">i", 0),                        # RECONSUMETIMES
        struct.pack(">q", 0),                        # PREPAREDTRANSACTIONOFFSET
        struct.pack(">i", 5) + body,                 # BODY
        bytes([9]) + topic,                          # TOPIC (1-byte length, V1)
        struct.pack(">h", len(props)) + props,       # PROPERTIES
    ])


def sample():
    return Message(
        topic="TopicTest", body=b"Hello", queue_id=3, flag=7,
        properties={"TAGS": "TagA", "KEYS": "k1"}, born_timestamp=1_700_000_000_000,
        born_host=pack_host(*BORN), store_host=pack_host(*STORE),
    )


def test_commitlog_and_consume_queue_bytes(tmp_path):
    cfg = small_config(tmp_path)
    s = MessageStore(cfg)
    s.start()
    r1 = s.append(sample())
    r2 = s.append(sample())
    assert (r1.physical_offset, r1.queue_offset, r1.wrote_bytes) == (0, 0, 122)
    assert (r2.physical_offset, r2.queue_offset) == (122, 1)
    assert r1.msg_id == "7F00000100002A9F0000000000000000"
    assert r2.msg_id == "7F00000100002A9F000000000000007A"
    s.shutdown()

    with open(tmp_path / "commitlog" / "00000000000000000000", "rb") as f:
        data = f.read()
    assert len(data) == 64 * 1024
    assert data[:122] == expected_entry(queue_offset=0, physical_offset=0, store_ts=r1.store_timestamp)
    assert data[122:244] == expected_entry(queue_offset=1, physical_offset=122, store_ts=r2.store_timestamp)
    assert data[244:] == bytes(len(data) - 244)

    with open(tmp_path / "consumequeue" / "TopicTest" / "3" / "00000000000000000000", "rb") as f:
        cq = f.read()
    tag_hash = ((84 * 31 + 97) * 31 + 103) * 31 + 65  # "TagA".hashCode()
    assert tag_hash == 2598919
    assert cq[:40] == struct.pack(">qiq", 0, 122, tag_hash) + struct.pack(">qiq", 122, 122, tag_hash)
    assert cq[40:60] == bytes(20)

    with open(tmp_path / "checkpoint", "rb") as f:
        cp = f.read()
    assert len(cp) == 4096
    physic, logics, index = struct.unpack(">qqq", cp[:24])
    assert physic == logics == index == r2.store_timestamp
    assert cp[24:40] == bytes(16)  # RocketMQ 5's masterFlushedOffset, confirmPhyOffset: unused
    assert struct.unpack(">qq", cp[40:56]) == (244, 0x4D51_4754_464C_5348)  # ours: the flushed log offset, magic
    assert cp[56:] == bytes(4096 - 56)
    assert not os.path.exists(tmp_path / "abort")

    (name,) = os.listdir(tmp_path / "index")
    assert len(name) == 17 and name.isdigit()
    with open(tmp_path / "index" / name, "rb") as f:
        idx = f.read()
    assert len(idx) == 40 + 64 * 4 + 512 * 20
    begin_ts, end_ts, begin_phys, end_phys, _slots_used, count = struct.unpack(">qqqqii", idx[:40])
    assert (begin_phys, end_phys, count) == (0, 244, 3)  # two keys; indexCount starts at 1
    assert begin_ts == r1.store_timestamp and end_ts == r2.store_timestamp
    # entry 1: hash of "TopicTest#k1", physical offset 0, prevIndex 0
    key = "TopicTest#k1"
    h = 0
    for ch in key:
        h = (h * 31 + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h & 0x80000000 else h
    h = abs(h)
    slot = h % 64
    assert struct.unpack(">i", idx[40 + slot * 4 : 44 + slot * 4])[0] == 2  # latest entry in the slot
    e1 = idx[40 + 64 * 4 + 20 : 40 + 64 * 4 + 40]
    e2 = idx[40 + 64 * 4 + 40 : 40 + 64 * 4 + 60]
    assert struct.unpack(">iqii", e1) == (h, 0, 0, 0)
    hash2, phys2, _diff, prev2 = struct.unpack(">iqii", e2)
    assert (hash2, phys2, prev2) == (h, 122, 1)


def test_ipv6_store_host_moves_fields(tmp_path):
    s = MessageStore(small_config(tmp_path))
    s.start()
    m = sample()
    m.store_host = pack_host("::1", 10911)
    r = s.append(m)
    data = s.read_at(r.physical_offset)
    assert len(data) == 122 + 12
    assert struct.unpack(">i", data[36:40])[0] == 0x20  # STOREHOSTADDRESS_V6_FLAG
    assert data[64:84] == bytes(15) + b"\x01" + struct.pack(">i", 10911)
    assert r.msg_id == (bytes(15) + b"\x01" + struct.pack(">iq", 10911, 0)).hex().upper()
    s.shutdown()


def test_message_from_entry_gives_back_what_was_stored():
    """The re-send decoder (fired timers) agrees with the full decoder, field
    for field, on IPv4 and IPv6 entries, and refuses what is not an entry."""
    import pytest

    from core.store.encoder import encode_message
    from core.store.message import MessageFormatError, decode_message, message_from_entry

    v4 = Message("TopicX", b"hello" * 20, 3, 7, {"A": "1", "UNIQ_KEY": "x", "EMPTY": ""}, 4, 12345,
                 pack_host("10.1.2.3", 99), pack_host("10.9.9.9", 10911), 2, 77)
    v6 = Message("T", b"", born_host=pack_host("::1", 5), properties={"K": "v"})
    for msg, ts in ((v4, 999), (v6, 1234)):
        raw = encode_message(msg, 5, 1000, ts)
        got, store_ts = message_from_entry(raw)
        assert store_ts == ts
        assert got == decode_message(raw).to_message()
        assert (got.topic, got.body, got.queue_id, got.flag) == (msg.topic, msg.body, msg.queue_id, msg.flag)
    assert message_from_entry(encode_message(v4))[0].properties == {"A": "1", "UNIQ_KEY": "x"}  # empty values are not kept
    raw = bytearray(encode_message(v4, 5, 1000, 999))
    struct.pack_into(">i", raw, 0, len(raw) + 4)  # TOTALSIZE past the data
    with pytest.raises(MessageFormatError):
        message_from_entry(bytes(raw))
