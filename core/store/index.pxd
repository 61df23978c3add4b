# C declarations for index.py when Cython compiles it (setup.py KERNELS):
# the index drain's loop (`IndexService.build_run`) as C arithmetic on the
# mapped file, its writes (`_put_entries`) without the GIL. index.py stays
# plain Python: the pure-Python twin.

cimport cython
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer

from core.store._bigendian cimport get_int32, put_int32, put_int64

@cython.locals(h=cython.uint, s=cython.int)
cpdef object message_key_hash(str topic, str key)

@cython.locals(c=cython.uint)
cdef unsigned int _java_hash_units(unsigned int h, str text) except? 0

cdef struct _Entry:
    long long h
    long long phys
    long long ts

ctypedef _Entry* _Entries

cdef unsigned char* _pin(object mm, Py_buffer* view, bint* pinned, long long slots, long long max_entries) except NULL


@cython.locals(n=cython.longlong, slots=cython.longlong, slot_count=cython.longlong, begin_ts=cython.longlong,
               begin_phys=cython.longlong, end_ts=cython.longlong, max_entries=cython.longlong,
               at=Py_ssize_t, n_keys=Py_ssize_t, k=Py_ssize_t, j=Py_ssize_t, i=Py_ssize_t, m=Py_ssize_t,
               phys=cython.longlong, ts=cython.longlong, h=cython.longlong, p=cython.p_uchar, pending=_Entries)
cdef tuple _build_rows(object svc, list rows, object hashes, Py_buffer* view, bint* pinned)

@cython.locals(view=Py_buffer, pinned=cython.bint)
cdef tuple _build_run(object svc, list rows, object hashes)

@cython.locals(i=Py_ssize_t, h=cython.longlong, ts=cython.longlong, phys=cython.longlong, count=cython.longlong,
               slot_pos=cython.longlong, prev=cython.longlong, diff=cython.longlong, q=cython.p_uchar)
cdef void _put_entries(unsigned char* p, long long slots, _Entries pending, Py_ssize_t m, long long* n,
                       long long* slot_count, long long* begin_ts, long long* begin_phys, long long* end_ts) noexcept nogil
