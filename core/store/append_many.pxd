# C declarations for append_many.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10): the store's batched append as C arithmetic on
# the messages' buffers and the mappings. append_many.py stays plain Python:
# the pure-Python twin, its `cython.compiled` branches use the names cimported here.

cimport cython
from libc.string cimport memcpy
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.object cimport PyTypeObject
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from core.store._bigendian cimport put_int32, put_int64
from core.store.commitlog cimport CommitLog
from core.store.consume_queue cimport ConsumeQueue
from core.store.encoder cimport EncodedMessage
from core.store.message cimport PyType_GenericAlloc, _put_slot, _slot_offset


# Where each `PutResult` field sits in a PutResult (set at import from its slot
# descriptors; `_RESULT_BY_SLOTS` False when they are not exactly the ten expected).
cdef Py_ssize_t _AT_STATUS, _AT_PHYS, _AT_QOFF, _AT_BYTES, _AT_TS, _AT_QID, _AT_NUM, _AT_END, _AT_HOST, _AT_OFFSETS
cdef bint _RESULT_BY_SLOTS


cdef int _count(ConsumeQueue cq, long long mark, list touched) except -1

@cython.locals(enc=EncodedMessage, cq=ConsumeQueue, size=Py_ssize_t, max_entry=Py_ssize_t, total=Py_ssize_t,
               flag=cython.longlong, tx=cython.longlong, general=cython.bint, cqs=list, touched=list, cl=CommitLog)
cpdef tuple plan(object store, list encs, long long mark)

@cython.locals(enc=EncodedMessage, cq=ConsumeQueue, size=Py_ssize_t, qoff=cython.longlong, pos=cython.longlong,
               start=cython.longlong, seg_size=cython.longlong, phys=cython.longlong, rel=Py_ssize_t,
               upos=cython.longlong, unit_size=cython.longlong, ufstart=cython.longlong, ufend=cython.longlong,
               tspos=Py_ssize_t, i=Py_ssize_t, held=cython.bint, uheld=cython.bint,
               p=cython.p_uchar, b=cython.p_uchar, u=cython.p_uchar, segview=Py_buffer, unitview=Py_buffer,
               cl=CommitLog)
cpdef write(object store, list encs, list cqs, long long ts, list rows)

cdef object _put_ok(long long phys, long long qoff, Py_ssize_t size, long long ts, EncodedMessage enc)

@cython.locals(now=timespec, ts=cython.longlong, last=cython.longlong)
cpdef long long store_time(CommitLog cl) except? -1

@cython.locals(enc=EncodedMessage, cq=ConsumeQueue, size=Py_ssize_t, qoff=cython.longlong, phys=cython.longlong,
               rel=cython.longlong, upos=cython.longlong, tx=cython.longlong, tspos=Py_ssize_t, fstart=cython.longlong,
               ts=cython.longlong, b=cython.p_uchar, u=cython.p_uchar, view=Py_buffer, queues=dict, dirty=set,
               cl=CommitLog)
cpdef object append_one(object store, object obj)
