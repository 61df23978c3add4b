# C declarations for encoder.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10). encoder.py itself stays plain Python: it is
# the pure-Python twin, and its `cython.compiled` branches use the names
# cimported here. A Message's slot offsets and the slot reader are message.pxd's:
# the same offsets `new_message` fills.

cimport cython
from libc.string cimport memcmp, memcpy, memset
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_AS_STRING

from core.store._bigendian cimport put_int32, put_int64
from core.store.message cimport (
    _AT_TOPIC, _AT_BODY, _AT_QUEUE_ID, _AT_FLAG, _AT_PROPERTIES, _AT_SYSFLAG, _AT_BORN_TS, _AT_BORN_HOST,
    _AT_STORE_HOST, _AT_RECONSUME, _AT_PREPARED, _slot,
)

cdef extern from "Python.h":
    # a str's storage: 1, 2 or 4 bytes per character (PEP 393)
    int PyUnicode_KIND(object text)
    void* PyUnicode_DATA(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)

    # the str's UTF-8 bytes, kept by the str (no copy for ASCII text)
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL


cdef inline bint _same(const char* text, const char* literal, Py_ssize_t n) noexcept:
    """The ``n`` bytes at ``text`` are those of ``literal``."""
    return memcmp(text, literal, n) == 0


cdef inline bint _java_hash_ucs2(object text, long long* out) noexcept:
    """Java's ``String.hashCode()`` of a str (`java_string_hash`), when each
    of its characters is one UTF-16 unit (1- or 2-byte storage: the BMP);
    False, nothing written, for 4-byte storage."""
    cdef int kind = PyUnicode_KIND(text)
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(text)
    cdef unsigned int h = 0
    cdef const unsigned char* p1
    cdef const unsigned short* p2
    if kind == 1:
        p1 = <const unsigned char*>PyUnicode_DATA(text)
        for i in range(n):
            h = h * 31 + p1[i]
    elif kind == 2:
        p2 = <const unsigned short*>PyUnicode_DATA(text)
        for i in range(n):
            h = h * 31 + p2[i]
    else:
        return False
    out[0] = <int>h
    return True


# `_encode_common`: at most this many properties (its `texts` and `lens` hold two entries each),
# and whether the names it compares as C literals are still the module's constants
cdef Py_ssize_t _MAX_INLINE_PROPERTIES
cdef bint _LITERALS_HOLD


cdef class EncodedMessage:
    # read by the store, the broker and tests as Python objects: kept as such
    cdef public object buf, size, topic, queue_id, tags_code, keys, uniq_key, sysflag, multi_dispatch
    cdef public object store_ts_pos, dispatch_refs

    @cython.locals(props=dict, qid=cython.longlong, flag=cython.longlong, sysflag=cython.longlong,
                   born_ts=cython.longlong, reconsume=cython.longlong, prepared=cython.longlong,
                   topic_p="const char*", text_p="const char*", topic_len=Py_ssize_t, n=Py_ssize_t,
                   props_len=Py_ssize_t, body_len=Py_ssize_t, size=Py_ssize_t, crc=cython.ulong,
                   p=cython.p_uchar, tags_hash=cython.longlong, k=Py_ssize_t, i=Py_ssize_t,
                   texts="const char*[128]", lens="Py_ssize_t[128]")
    cdef bint _encode_common(self, object msg) except -1

    cpdef _encode(self, object msg)
