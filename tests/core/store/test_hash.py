"""Java String.hashCode, one at a time and in bulk (the index's vectorised path), bit for bit."""

import random

from core.store import java_string_hash
from core.store.index import key_hash, key_hashes
from core.store.java_hash import java_string_hashes

# values printed by Java 17 String.hashCode() (jshell)
KNOWN = {"": 0, "hello": 99162322, "Aa": 2112, "BB": 2112, "TagA": 2598919, "polygenelubricants": -2147483648,
         "héllo": 103094734, "日本": 835047, "\U0001F600": 1772899, "\ud800": 55296}


def test_known_java_values():
    for text, h in KNOWN.items():
        assert java_string_hash(text) == h, text
    assert key_hash("polygenelubricants") == 0  # Math.abs(Integer.MIN_VALUE) is negative: 0


def reference(text: str) -> int:
    raw = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def test_bulk_equals_one_at_a_time():
    rnd = random.Random(7)
    alphabets = ["0123456789ABCDEF#", "abcxyz\u00e9\u65e5\u672c\ud83d\ude00\ud800\udfff"]
    for alphabet in alphabets:
        texts = ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 300))) for _ in range(500)]
        texts += list(KNOWN)[1:] + ["T#" + "7F0000010000%020X" % i for i in range(100)]
        rnd.shuffle(texts)
        expected = [reference(t) for t in texts]
        assert [java_string_hash(t) for t in texts] == expected
        assert java_string_hashes(texts) == expected
        assert key_hashes(texts) == [key_hash(t) for t in texts]
    assert java_string_hashes(["", "a"] * 40) == [0, 97] * 40
