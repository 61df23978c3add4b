# C declarations for message.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10). message.py itself stays plain Python: it is
# the pure-Python twin, and its `cython.compiled` branches use the names
# cimported here.

cimport cython
from libc.string cimport memcpy, memset
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_AS_STRING

from core.store._bigendian cimport put_int32, put_int64

cdef extern from "Python.h":
    # the str's UTF-8 bytes, kept by the str (no copy for ASCII text)
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL


cdef class EncodedMessage:
    # read by the store, the broker and tests as Python objects: kept as such
    cdef public object buf, size, topic, queue_id, tags_code, keys, uniq_key, sysflag, multi_dispatch
    cdef public object store_ts_pos, dispatch_refs

    @cython.locals(props=dict, qid=cython.longlong, flag=cython.longlong, sysflag=cython.longlong,
                   born_ts=cython.longlong, reconsume=cython.longlong, prepared=cython.longlong,
                   topic_p="const char*", text_p="const char*", topic_len=Py_ssize_t, n=Py_ssize_t,
                   props_len=Py_ssize_t, body_len=Py_ssize_t, size=Py_ssize_t, crc=cython.ulong,
                   p=cython.p_uchar, first=cython.bint)
    cdef bint _encode_common(self, object msg) except -1

    cpdef _encode(self, object msg)

