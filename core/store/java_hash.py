"""Java's ``String.hashCode()`` in Python, bit for bit: the consume queue's
tags code (`core.store.message.tags_code`) and tag filters compare these.
Nothing here does I/O."""

from __future__ import annotations

import operator
import os


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode()``: 32-bit signed, over UTF-16 code units.

    The sum ``s[i] * 31**(n-1-i)`` is taken with ``map`` over the powers
    for that length (a C-level loop), then reduced mod 2**32.  Many keys at
    once: `java_string_hashes`.
    """
    if text.isascii():
        units = text.encode("ascii")
    else:
        raw = text.encode("utf-16-be", "surrogatepass")  # Java hashes lone surrogates too
        units = [(raw[i] << 8) | raw[i + 1] for i in range(0, len(raw), 2)]
    n = len(units)
    powers = _POW31_BY_LEN.get(n) or _powers(n)
    h = sum(map(operator.mul, units, powers)) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


_POW31_BY_LEN: dict[int, list[int]] = {}


def _powers(n: int) -> list[int]:
    """31**(n-1) .. 31**0 mod 2**32 (cached per length; lengths of keys are few)."""
    powers = [pow(31, e, 1 << 32) for e in range(n - 1, -1, -1)]
    if len(_POW31_BY_LEN) < 4096:
        _POW31_BY_LEN[n] = powers
    return powers


def java_string_hashes(texts: list[str]) -> list[int]:
    """`java_string_hash` of each text, bit for bit.  With numpy installed (the
    spark extra) a long list is hashed in a few vector operations: every
    text's code units in one array, each multiplied by 31 to the power of its
    distance from its text's end (mod 2**32, exact in uint64), summed per
    text with ``add.reduceat``; about ten times faster than one call per key."""
    if len(texts) < 64 or not _numpy_ready():
        return list(map(java_string_hash, texts))
    np = _np
    joined = "".join(texts)
    if joined.isascii():
        codes = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        lens = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    else:
        codes = np.frombuffer(joined.encode("utf-16-be", "surrogatepass"), dtype=">u2")
        lens = np.fromiter((len(t.encode("utf-16-be", "surrogatepass")) >> 1 for t in texts), dtype=np.int64, count=len(texts))
    if not lens.all():  # an empty text: reduceat cannot express an empty slice
        return list(map(java_string_hash, texts))
    ends = np.cumsum(lens)
    longest = int(lens.max())
    global _NP_POW31
    if _NP_POW31 is None or len(_NP_POW31) < longest:
        _NP_POW31 = np.array([pow(31, e, 1 << 32) for e in range(max(longest, 512))], dtype=np.uint64)
    exponents = np.repeat(ends - 1, lens) - np.arange(len(codes))
    terms = codes.astype(np.uint64) * _NP_POW31[exponents]
    sums = np.add.reduceat(terms, ends - lens) & 0xFFFFFFFF
    return sums.astype(np.uint32).view(np.int32).tolist()


_np = None
_NP_POW31 = None
_NUMPY_TRIED = False


def load_numpy() -> bool:
    """Import numpy if it is installed (optional: not a runtime dependency of the
    store); whether it is. Called at the store's start, so that no message waits
    for the import."""
    return _numpy_ready()


def _numpy_ready() -> bool:
    """Import numpy on first use (optional: not a runtime dependency of the store)."""
    global _np, _NUMPY_TRIED
    if not _NUMPY_TRIED:
        _NUMPY_TRIED = True
        # the store uses no BLAS: no pool of OpenBLAS threads (one per core,
        # which spin now and then and skew callgrind's per-message counts)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        try:
            import numpy
        except ImportError:
            numpy = None
        _np = numpy
    return _np is not None
