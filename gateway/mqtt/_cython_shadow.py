"""What ``import cython`` gives this package's compiled kernels when Cython is
not installed (a pure-Python install): ``compiled`` False, so their
compiled-only branches never run. With Cython installed, its own ``cython``
module (Cython.Shadow) plays this part. (The package imports nothing of
the project's, so it does not share ``core.store._cython_shadow``.)"""

compiled = False
