# C declarations for send_checks.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10). send_checks.py stays plain Python: the
# pure-Python twin; its `cython.compiled` branches use the names declared here.

cimport cython
from cpython.object cimport PyTypeObject

from core.store.encoder cimport EncodedMessage
from core.store.message cimport PyType_GenericAlloc, _put_slot, _set_slot, _slot, _slot_offset


# Where each `SendResult` field sits in a SendResult (set at import from its slot
# descriptors; `_RESULT_BY_SLOTS` False when they are not exactly the ten expected).
cdef Py_ssize_t _AT_STATUS, _AT_TOPIC, _AT_QUEUE_ID, _AT_QUEUE_OFFSET, _AT_UNIQ_KEY, _AT_PHYS, _AT_STORE_TS
cdef Py_ssize_t _AT_COUNT, _AT_REMARK, _AT_PUT
cdef bint _RESULT_BY_SLOTS


cdef object _send_ok(object topic, object queue_id, object queue_offset, object uniq_key, object phys, object ts,
                     object put)

@cython.locals(p=tuple, row=tuple, enc=EncodedMessage, by_topic=dict, i=Py_ssize_t, index=Py_ssize_t, end=cython.longlong,
               phys=cython.longlong, reach=cython.longlong)
cdef long long _results_and_stored_hooks(list prepared, list rows, object ts, list results, list waiting,
                                         object stored_hooks) except? -1


# Where `_stamp_each` (and the results' loop) reads and writes a Message's fields (`_MSG_BY_SLOTS` False: by attribute).
cdef Py_ssize_t _AT_MSG_TOPIC, _AT_MSG_PROPS, _AT_MSG_QUEUE_ID, _AT_MSG_STORE_HOST, _AT_MSG_BORN_TS
cdef bint _MSG_BY_SLOTS

@cython.locals(i=Py_ssize_t, props=dict, multi=cython.bint)
cdef int _stamp_each(list msgs, list places, object cluster, object host, list waits, list keyless) except -1

@cython.locals(i=Py_ssize_t, props=dict, triggers=tuple, enc=EncodedMessage)
cdef int _hooks_and_encoding(object checks, list msgs, list places, list indexes, list waits,
                             list prepared) except -1
