# C declarations for send_checks.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10). send_checks.py stays plain Python: the
# pure-Python twin; its `cython.compiled` branches use the names declared here.

cimport cython
from cpython.object cimport PyTypeObject

from core.store.message cimport PyType_GenericAlloc, _put_slot, _slot_offset


# Where each `SendResult` field sits in a SendResult (set at import from its slot
# descriptors; `_RESULT_BY_SLOTS` False when they are not exactly the ten expected).
cdef Py_ssize_t _AT_STATUS, _AT_TOPIC, _AT_QUEUE_ID, _AT_QUEUE_OFFSET, _AT_UNIQ_KEY, _AT_PHYS, _AT_STORE_TS
cdef Py_ssize_t _AT_COUNT, _AT_REMARK, _AT_PUT
cdef bint _RESULT_BY_SLOTS


cdef object _send_ok(object topic, object queue_id, object queue_offset, object uniq_key, object phys, object ts,
                     object put)
