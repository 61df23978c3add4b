"""Fuzzing the store's record decoders: whatever the bytes, a decoder either
returns a message or raises `MessageFormatError` (a ValueError with the
offset), never another exception: a corrupt segment, a garbled pull
response or a hostile batch body must be reported, not crash the reader.

Inputs: valid entries (IPv4 and IPv6 hosts, properties, empty bodies) cut,
flipped, spliced and overwritten, plus plain random bytes.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.store.batch import decode_batch, encode_batch
from core.store.encoder import encode_message
from core.store.message import (
    BORNHOST_V6_FLAG, STOREHOST_V6_FLAG, Message, MessageFormatError, decode_message, decode_messages, decode_segment,
    message_from_entry, pack_host,
)

_TEXT = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), max_size=12)


@st.composite
def entries(draw) -> bytes:
    v6 = draw(st.booleans())
    host = pack_host("::1", 10911) if v6 else pack_host("127.0.0.1", 10911)
    props = draw(st.dictionaries(_TEXT.filter(bool), _TEXT, max_size=4))
    msg = Message(topic=draw(_TEXT.filter(bool)), body=draw(st.binary(max_size=40)), properties=props,
                  queue_id=draw(st.integers(0, 7)), born_host=host, store_host=host,
                  sysflag=(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG) if v6 else 0)
    return encode_message(msg, draw(st.integers(0, 100)), draw(st.integers(0, 10_000)), 1_700_000_000_000)


@st.composite
def damaged(draw) -> bytes:
    data = bytearray(b"".join(draw(st.lists(entries(), min_size=1, max_size=3))))
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["cut", "flip", "set", "splice", "grow"]))
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if how == "cut":
            del data[i:]
        elif how == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif how == "set" and data:
            data[i] = draw(st.sampled_from([0, 0x7F, 0x80, 0xFF]))
        elif how == "splice":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif how == "grow":
            data += draw(st.binary(max_size=30))
    return bytes(data)


def _only_format_errors(fn, data) -> None:
    try:
        fn(data)
    except MessageFormatError:
        pass


_SETTINGS = settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(st.one_of(damaged(), st.binary(max_size=200)))
def test_entry_decoders_raise_only_format_errors(data):
    _only_format_errors(decode_message, data)
    _only_format_errors(decode_messages, data)
    _only_format_errors(decode_segment, data)
    _only_format_errors(message_from_entry, data)


@_SETTINGS
@given(st.lists(st.tuples(st.binary(max_size=20), st.integers(0, 9), st.dictionaries(_TEXT.filter(bool), _TEXT,
                                                                                       max_size=3)),
                min_size=1, max_size=3),
       st.lists(st.tuples(st.sampled_from(["cut", "flip", "grow"]), st.integers(0, 400), st.integers(0, 7)),
                max_size=3))
def test_batch_decoder_raises_only_format_errors(items, damage):
    data = bytearray(encode_batch(items))
    for how, i, bit in damage:
        if how == "cut":
            del data[i:]
        elif how == "flip" and data:
            data[i % len(data)] ^= 1 << bit
        else:
            data += bytes([i % 256]) * bit
    _only_format_errors(decode_batch, bytes(data))


@given(entries())
def test_undamaged_entries_decode_back(raw):
    m = decode_message(raw)
    assert m.size == len(raw)
    again, _ts = message_from_entry(raw)
    assert (again.topic, again.body, again.properties) == (m.topic, m.body, m.properties)
