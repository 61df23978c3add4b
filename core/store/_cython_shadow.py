"""What ``import cython`` gives a compiled kernel's source when Cython is not
installed (a pure-Python install): the names that source uses at import
time, doing nothing, and ``compiled`` False so its compiled-only branches
never run. With Cython installed, its own ``cython`` module (Cython.Shadow)
plays this part."""

compiled = False


def cclass(cls):
    return cls


no_gc = cclass


def freelist(_n: int):
    return cclass
