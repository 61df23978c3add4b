# C declarations for message.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10). message.py itself stays plain Python: it is
# the pure-Python twin, and its `cython.compiled` branches use the names
# cimported here. The slot helpers below are also cimported by the encoder
# (encoder.pxd), the broker's send checks and the store's batched append.

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.dict cimport PyDict_Copy

cdef extern from "Python.h":
    # a __slots__ field's descriptor: where the field's reference sits in the object
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

    # a new instance of a heap type with its slots NULL (tracked by the GC if the type is)
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t nitems)


# Where each `Message` field sits in a Message object (set at import from the
# class's slot descriptors; 0 when they are not slot descriptors): `new_message`
# fills them, and the encoder's `_encode_common` (encoder.pxd cimports these)
# reads a Message's fields there, not through ``getattr`` (~140 instructions each).
cdef Py_ssize_t _AT_TOPIC, _AT_BODY, _AT_QUEUE_ID, _AT_FLAG, _AT_PROPERTIES, _AT_SYSFLAG, _AT_BORN_TS
cdef Py_ssize_t _AT_BORN_HOST, _AT_STORE_HOST, _AT_RECONSUME, _AT_PREPARED, _AT_NOTE
# `new_message` fills a new Message's slots in C (its slots are the twelve it expects)
cdef bint _NEW_BY_SLOTS


cdef inline Py_ssize_t _slot_offset(object cls, str name) except -1:
    descr = cls.__dict__.get(name)
    if type(descr).__name__ != "member_descriptor":
        return 0
    return (<PyMemberDescrObject*>descr).d_member.offset


cdef inline void _put_slot(object obj, Py_ssize_t at, object value) noexcept:
    """Fill the NULL slot at ``at`` of a new object (`PyType_GenericAlloc`) with ``value``."""
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>obj) + at))[0] = <PyObject*>value


cdef inline void _set_slot(object obj, Py_ssize_t at, object value) noexcept:
    """Replace the value of the slot at ``at`` of ``obj`` with ``value`` (what ``setattr`` does
    for a __slots__ field, without the attribute lookup)."""
    cdef PyObject** slot = <PyObject**>((<char*><PyObject*>obj) + at)
    cdef PyObject* old = slot[0]
    Py_INCREF(value)
    slot[0] = <PyObject*>value
    Py_XDECREF(old)


cdef inline object _slot(object obj, Py_ssize_t at, str name):
    """The field ``name`` of ``obj`` (an exact `Message`) at ``at``; getattr's error if it was deleted."""
    cdef PyObject* value = (<PyObject**>((<char*><PyObject*>obj) + at))[0]
    if value is NULL:
        raise AttributeError(f"'Message' object has no attribute '{name}'")
    return <object>value
