# C declarations for _events.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10). _events.py stays plain Python: the
# pure-Python twin; its `cython.compiled` branch uses the names declared here.

cimport cython
from cpython.object cimport PyTypeObject

cdef extern from "Python.h":
    # a new instance of a heap type, as object.__new__ makes it (tracked by the GC if the type is)
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t nitems)
    # what object.__setattr__(obj, "__dict__", value) ends in
    int PyObject_GenericSetDict(object obj, object value, void* context) except -1
