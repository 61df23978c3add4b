# C declarations for uniq_key.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10). uniq_key.py stays plain Python: the pure-Python
# twin; its `cython.compiled` branch uses the names declared here.

cimport cython
from libc.string cimport memcpy

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    bint PyUnicode_IS_ASCII(object text)


@cython.locals(m=Py_ssize_t, c=cython.long, j=cython.int, d=cython.int, src=cython.p_char, dst=cython.p_char)
cdef _append_keys(list keys, str stem, long first, long n)
