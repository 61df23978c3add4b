"""What ``import cython`` gives this package's compiled kernels when Cython is
not installed (a pure-Python install): ``compiled`` False, so their
compiled-only branches never run. With Cython installed, its own ``cython``
module (Cython.Shadow) plays this part. (The package imports nothing of
the project's, so it does not share ``core.store._cython_shadow``.)"""

compiled = False


def locals(**_types):  # noqa: A001 - Cython's name: C types for a function's locals, here none
    return lambda f: f


long = int  # noqa: A001 - a C type's name in Cython
int = int  # noqa: A001, PLW0127
bint = bool
Py_ssize_t = int
