"""Fuzz: decode_register_body raises only RegisterBodyError, whatever the bytes."""

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from core.namesrv import RegisterBodyError, decode_register_body


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.booleans())
def test_any_bytes(data, compressed):
    try:
        decode_register_body(data, compressed=compressed)
    except RegisterBodyError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_inflated_bytes(data):
    try:
        decode_register_body(zlib.compress(data), compressed=True)
    except RegisterBodyError:
        pass
