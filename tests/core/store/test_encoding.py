"""`EncodedMessage` writes the bytes it wrote before it was compiled as a
typed kernel (issue 13), on fixtures that take each way through it.

Compiled, the usual entry is written by `_encode_common` and everything
else (IPv6 hosts, a bool flag, None or non-str property values, an
overflowing multi-dispatch list, the timer topic, every error) by
`_encode`; pure Python, `_encode` writes them all. Each fixture's stamped
bytes (with any dispatch reference records) are checked against a digest
taken from the encoder before the change, its fields against the values
it had, and a refused message against the same error. `make test-pure`
runs this file in the pure build too.
"""

import hashlib

import pytest

from core.store.encoder import EncodedMessage
from core.store.message import Message, pack_host

V4 = pack_host("10.0.0.7", 40001)
V6 = pack_host("::1", 10911)
MQTT = {"mqttTopic": "bench/fan-in/1", "mqttQos": "0", "mqttRetain": "false", "mqttClient": "pub-1",
        "mqttTime": "1700000000000", "CLUSTER": "DefaultCluster", "UNIQ_KEY": "7F0000010B2C18B4AAC2123400000001"}
LONG_DISPATCH = ",".join(f"%LMQ%session-{i:05d}" for i in range(1200))

# name: (message, what the encoder before issue 13's kernel gave: digest of the
# stamped bytes, size, tags code, keys, uniq key, multi-dispatch queues,
# reference records; or the error's type and the start of its text)
FIXTURES = {
    "mqtt fan-in": (Message("bench", bytes(range(64)), 3, 0, dict(MQTT), 0, 1_700_000_000_123, V4, V4),
                    ("7a4318f5e63a7a91a57645934be92ae0", 316, 0, [], "7F0000010B2C18B4AAC2123400000001", 0, 0)),
    "no properties": (Message("T", b"", 0), ("0b1a9376985cb21ae73dcaee88835c9e", 92, 0, [], None, 0, 0)),
    "tags keys uniq": (Message("TopicTest", b"Hello", 1, 7, {"TAGS": "TagA", "KEYS": "k1  k2", "UNIQ_KEY": "U1"},
                               2, 5, V4, V4, 3, 9),
                       ("bf5623b62054a2075f7a89d4baa6b564", 138, 2598919, ["k1", "k2"], "U1", 0, 0)),
    "non-ascii": (Message("töpic", "ü€😀".encode(), 2, -1, {"ключ": "значение", "e": ""}, 0, -5, V4, V4),
                  ("8002617e9b42bb86c20a871ff9479264", 134, 0, [], None, 0, 0)),
    "multi-dispatch": (Message("a", b"x", 0, properties={"INNER_MULTI_DISPATCH": "%LMQ%s1,%LMQ%s2,,%LMQ%s1"}),
                       ("dbb3dba1212e0b7fcb4a1bbe74b13993", 138, 0, [], None, 2, 0)),
    "long multi-dispatch": (Message("a", b"x", 0, properties={"INNER_MULTI_DISPATCH": LONG_DISPATCH}),
                            ("aa1354a245f5a105aaacf5f012291e86", 16491, 0, [], None, 1200, 1)),
    "timer topic": (Message("rmq_sys_wheel_timer", b"t", 0, properties={"TIMER_OUT_MS": "1700000009000", "TAGS": "x"}),
                    ("4ec5fe3f61fa04bf121dc9e10696cdcf", 144, 1700000009000, [], None, 0, 0)),
    "ipv6 store host": (Message("T", b"v6", 1, properties={"K": "v"}, store_host=V6),
                        ("bb7fa9c0dacfdc1d2b230f12218368c0", 109, 0, [], None, 0, 0)),
    "ipv6 born host": (Message("T", b"v6", 1, born_host=V6), ("181d91f62a5c70b33ef6d13807e7a5ca", 106, 0, [], None, 0, 0)),
    "bool flag": (Message("T", b"b", 0, True), ("d0baaf8575147d2a45264ed365de3c0a", 93, 0, [], None, 0, 0)),
    "none value skipped": (Message("T", b"n", 0, properties={"A": "1", "B": None, "C": "3"}),
                           ("cf54e84bc1baa29561c64b1ef4d936c7", 100, 0, [], None, 0, 0)),
    "int value": (Message("T", b"i", 0, properties={"A": 5}), ("e6266ced78d25e000d21c79e854c8095", 96, 0, [], None, 0, 0)),
    "sysflag v6 bits cleared": (Message("T", b"s", 0, sysflag=0x33),
                                ("221b0a3925e9b62dcac714c3ca72fb99", 93, 0, [], None, 0, 0)),
    "negative sysflag": (Message("T", b"s", 0, sysflag=-1), ("86e4efc71fa39359c51891ed302ededb", 93, 0, [], None, 0, 0)),
    "extremes": (Message("T", b"e", 0x7FFFFFFF, -0x80000000, {}, 0x7FFFFFFF, 2**63 - 1, V4, V4, -0x80000000, -2**63),
                 ("faef5ed3ea06b551bdc241ec41b19798", 93, 0, [], None, 0, 0)),
    "bytearray body": (Message("T", bytearray(b"ba"), 0), ("04f5b3e61e4720450445ab7b89149a47", 94, 0, [], None, 0, 0)),
    "max topic": (Message("t" * 127, b"m", 0), ("56aeaa86041acdf53e2bcd69f7ff1745", 219, 0, [], None, 0, 0)),
    # round 7: the compiled path keeps at most 64 properties' text at hand and finds TAGS, KEYS,
    # UNIQ_KEY and INNER_MULTI_DISPATCH by their bytes (digests from the encoder before it)
    "64 properties": (Message("T", b"p", 0, properties={f"p{i}": f"v{i}" for i in range(63)} | {"UNIQ_KEY": "U"}),
                      ("a835329a3c6e82e5b62ae56a879f1a4f", 587, 0, [], "U", 0, 0)),
    "65 properties": (Message("T", b"p", 0, properties={f"p{i}": f"v{i}" for i in range(64)} | {"TAGS": "t"}),
                      ("0f0263e0f8cb887332552f88eeeb2159", 591, 116, [], None, 0, 0)),
    "near names": (Message("T", b"n", 0, properties={"TAG": "a", "TAGSS": "b", "UNIQ_KEYS": "c", "KEYS ": "d",
                                                     "tags": "e", "INNER_MULTI_DISPATCHX": "f", "KEYS": "k"}),
                   ("7fcef6480708493849d73bf89e3f7547", 164, 0, ["k"], None, 0, 0)),
    "dispatch ref topic": (Message("%MQGATE%DISPATCH", b"r", 0, properties={"K": "v"}),
                           ("15935b329f271b517d09c9ef1860dec1", 111, 0, [], None, 0, 0)),
    "empty topic": (Message("", b"x", 0), ("ValueError", "topic must be 1..127 bytes")),
    "long topic": (Message("t" * 128, b"x", 0), ("ValueError", "topic must be 1..127 bytes")),
    "queue id below": (Message("T", b"x", -1), ("ValueError", "queue id -1 is not 0..2**31-1")),
    "queue id above": (Message("T", b"x", 2**31), ("ValueError", "queue id 2147483648 is not 0..2**31-1")),
    "flag out of range": (Message("T", b"x", 0, 2**31), ("ValueError", "message field out of range")),
    "born timestamp out of range": (Message("T", b"x", 0, born_timestamp=2**63), ("ValueError", "message field out of range")),
    "huge reconsume times": (Message("T", b"x", 0, reconsume_times=2**80), ("ValueError", "message field out of range")),
    "properties too long": (Message("T", b"x", 0, properties={"K": "v" * 32766}),
                            ("ValueError", "properties are 32768 bytes, more than 32767")),
    "surrogate in a value": (Message("T", b"x", 0, properties={"K": "\udc80"}),
                             ("UnicodeEncodeError", "'utf-8' codec can't encode character '\\udc80' in position 2")),
    "surrogate in the topic": (Message("\udc80", b"x", 0),
                               ("UnicodeEncodeError", "'utf-8' codec can't encode character '\\udc80' in position 0")),
    "short host": (Message("T", b"x", 0, born_host=b"\x01\x02"), ("ValueError", "host addresses must be 8 or 20 bytes")),
    "body not bytes": (Message("T", "text", 0), ("ValueError", "message field out of range or of the wrong type")),
}


def _outcome(encode, msg: Message) -> tuple:
    try:
        enc = encode(msg)
    except ValueError as e:  # UnicodeEncodeError included
        return type(e).__name__, str(e)
    raw = bytes(enc.stamp(11, 2222, 1_700_000_000_999)) + b"".join(bytes(r.buf) for r in enc.dispatch_refs)
    return (hashlib.sha256(raw).hexdigest()[:32], enc.size, enc.tags_code, enc.keys, enc.uniq_key,
            len(enc.multi_dispatch), len(enc.dispatch_refs))


def _field_by_field(msg: Message) -> EncodedMessage:
    enc = EncodedMessage.__new__(EncodedMessage)
    enc._encode(msg)
    return enc


@pytest.mark.parametrize("name", FIXTURES)
def test_the_same_bytes_fields_and_errors_as_before(name):
    msg, expected = FIXTURES[name]
    for encode in (EncodedMessage, _field_by_field):  # whichever way the build takes, and `_encode` itself
        got = _outcome(encode, msg)
        if len(expected) == 2:
            assert got[0] == expected[0] and got[1].startswith(expected[1]), got
        else:
            assert got == expected


def test_the_message_is_not_changed_and_the_entry_decodes():
    from core.store.message import decode_message

    msg = FIXTURES["mqtt fan-in"][0]
    before = (msg.topic, msg.body, dict(msg.properties), msg.queue_id, msg.born_host)
    enc = EncodedMessage(msg)
    assert (msg.topic, msg.body, dict(msg.properties), msg.queue_id, msg.born_host) == before
    got = decode_message(bytes(enc.stamp(4, 500, 1_700_000_001_000)), check_crc=True)
    assert (got.topic, got.body, got.properties, got.queue_offset, got.physical_offset) == (
        "bench", bytes(range(64)), MQTT, 4, 500)
    assert enc.store_host == V4 and enc.store_ts_pos == 56


def test_a_message_missing_a_field_fails_as_getattr_does():
    """Compiled, a `Message`'s fields are read where its slots sit (message.pxd), not through getattr."""
    for name in ("topic", "body", "properties", "prepared_transaction_offset"):
        msg = Message("T", b"abc", properties={"K": "v"})
        delattr(msg, name)
        with pytest.raises(AttributeError, match=f"'Message' object has no attribute '{name}'"):
            EncodedMessage(msg)


def test_without_cython_installed_the_source_runs_as_it_is():
    """A pure-Python install has no ``cython`` module: encoder.py, message.py and index.py
    import `core.store._cython_shadow` instead and encode the same bytes."""
    import os
    import subprocess
    import sys

    code = ("import sys; sys.modules['cython'] = None\n"
            "from core.store.encoder import EncodedMessage\n"
            "from core.store.message import Message\n"
            "import core.store.index as index, core.store.message as m, core.store.append_many as am\n"
            "import core.store.encoder as e\n"
            "assert all(x.__file__.endswith('.py') for x in (m, e, index, am))\n"
            "assert m.cython.__name__ == e.cython.__name__ == am.cython.__name__ == 'core.store._cython_shadow'\n"
            "print(bytes(EncodedMessage(Message('T', b'x', 1, properties={'K': 'v'})).stamp(1, 2, 3)).hex())")
    env = dict(os.environ, MQGATE_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    here = EncodedMessage(Message("T", b"x", 1, properties={"K": "v"})).stamp(1, 2, 3)
    assert out.stdout.strip() == bytes(here).hex()


@pytest.mark.parametrize("tags", ["TagA", "t0", "caf\u00e9", "\u00ff" * 40, "\u4e2d\u6587", "\ud7ff\uffff" * 9, "x\U0001f600y",
                                  "\U0001f600", "A" * 300])
def test_the_tags_code_is_javas_string_hash(tags):
    """Compiled, the tags code of a 1- or 2-byte str is hashed in C (`_java_hash_ucs2`); text past
    the BMP (surrogate pairs in Java) by `java_string_hash`. Both ways give Java's value."""
    from core.store.java_hash import java_string_hash

    msg = Message("T", b"abc", properties={"TAGS": tags})
    assert EncodedMessage(msg).tags_code == _field_by_field(msg).tags_code == java_string_hash(tags)
