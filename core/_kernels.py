"""Which copy of a compiled kernel is imported (ARCHITECTURE.md decision 10).

setup.py compiles some modules of ``core`` and ``gateway`` with Cython; the
compiled copy (``name.cpython-*.so``) sits next to its source (``name.py``)
and Python's import system prefers it. `install` puts a finder in front that
imports the source instead when

- ``MQGATE_PURE_PYTHON`` is set to anything but ``0`` or empty (the switch the
  suite's pure-mode run uses), or
- the source is newer than the compiled copy (an edited checkout that was not
  rebuilt; one warning per module says so: run ``make build``), or another
  kernel's source is (one warning says so): compiled kernels ``cimport`` each
  other's types, and one of them imported from its source would make the
  others refuse to load ("size changed"), so the set runs compiled or not at
  all.

`status` tells which modules run compiled; ``mqgate --version`` prints it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import warnings

_ROOTS = {"core", "gateway"}  # the packages whose compiled modules this finder chooses for
_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def pure_python_forced() -> bool:
    return os.environ.get("MQGATE_PURE_PYTHON", "") not in ("", "0")


_stale: list[str] | None = None  # the kernels' sources newer than their compiled copies (found once)
_warned = False


def _compiled_modules():
    """(source, compiled copy) of every compiled module of our packages."""
    for pkg in sorted(_ROOTS):
        spec = importlib.util.find_spec(pkg)  # a top-level package: found, not imported
        for top in (spec.submodule_search_locations or ()) if spec is not None else ():
            for root, _dirs, files in os.walk(top):
                for f in files:
                    if f.endswith(_SUFFIXES):
                        yield os.path.join(root, f.partition(".")[0] + ".py"), os.path.join(root, f)


def _newer(source: str, compiled: str) -> bool:
    return os.path.exists(source) and os.stat(source).st_mtime > os.stat(compiled).st_mtime


def _find_stale() -> list[str]:
    return [source for source, compiled in _compiled_modules() if _newer(source, compiled)]


def stale_kernels() -> list[str]:
    """The sources newer than their compiled copies, found at the first call."""
    global _stale
    if _stale is None:
        _stale = _find_stale()
    return _stale


class _SourceFirst:
    """A meta path finder for our packages' compiled modules only."""

    @staticmethod
    def find_spec(name: str, path, target=None):
        global _warned
        if path is None or name.partition(".")[0] not in _ROOTS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = spec.origin if spec is not None else None
        if not origin or not origin.endswith(_SUFFIXES):
            return spec
        source = origin[: origin.rindex(os.sep) + 1] + name.rpartition(".")[2] + ".py"
        try:
            stale = os.stat(source).st_mtime > os.stat(origin).st_mtime
        except OSError:  # an install without sources: the compiled copy is all there is
            return spec
        if pure_python_forced():
            pass
        elif stale:
            warnings.warn(f"{source} is newer than its compiled copy: using the source (run `make build`)",
                          RuntimeWarning, stacklevel=2)
        elif not stale_kernels():
            return spec
        elif not _warned:
            _warned = True
            warnings.warn(f"{stale_kernels()[0]} is newer than its compiled copy: every kernel runs from its source"
                          " (run `make build`)", RuntimeWarning, stacklevel=2)
        return importlib.util.spec_from_file_location(name, source)


def install() -> None:
    if not any(f is _SourceFirst for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst)


def status() -> str:
    """'compiled (N modules)', 'pure Python (MQGATE_PURE_PYTHON)', 'pure Python
    (not built)' or 'pure Python (K kernels older than their source ...)'."""
    if pure_python_forced():
        return "pure Python (MQGATE_PURE_PYTHON)"
    built = sum(1 for _ in _compiled_modules())
    if not built:
        return "pure Python (not built)"
    stale = _find_stale()  # now, not as found at import: a `make build` since may have mended them
    if stale:
        return f"pure Python ({len(stale)} of {built} kernels older than their source: run `make build`)"
    return f"compiled ({built} modules)"
