# C declarations for send_checks.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10). send_checks.py stays plain Python: the
# pure-Python twin; its `cython.compiled` branches use the names declared here.

cimport cython
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF

from core.store.message cimport _slot_offset

cdef extern from "Python.h":
    # a new instance of a heap type with its slots NULL (tracked by the GC if the type is)
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t nitems)


# Where each `SendResult` field sits in a SendResult (set at import from its slot
# descriptors; `_RESULT_BY_SLOTS` False when they are not exactly the ten expected).
cdef Py_ssize_t _AT_STATUS, _AT_TOPIC, _AT_QUEUE_ID, _AT_QUEUE_OFFSET, _AT_UNIQ_KEY, _AT_PHYS, _AT_STORE_TS
cdef Py_ssize_t _AT_COUNT, _AT_REMARK, _AT_PUT
cdef bint _RESULT_BY_SLOTS


cdef inline void _put_slot(object obj, Py_ssize_t at, object value) noexcept:
    """Fill the NULL slot at ``at`` of a new object with ``value``."""
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>obj) + at))[0] = <PyObject*>value


cdef object _send_ok(object topic, object queue_id, object queue_offset, object uniq_key, object phys, object ts,
                     object put)
