"""Which copy of a compiled kernel is imported (ARCHITECTURE.md decision 10).

setup.py compiles some modules of ``core`` and ``gateway`` with Cython; the
compiled copy (``name.cpython-*.so``) sits next to its source (``name.py``)
and Python's import system prefers it. `install` puts a finder in front that
imports the source instead when

- ``MQGATE_PURE_PYTHON`` is set to anything but ``0`` or empty (the switch the
  suite's pure-mode run uses), or
- the source is newer than the compiled copy (an edited checkout that was not
  rebuilt; one warning per module says so: run ``make build``).

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


class _SourceFirst:
    """A meta path finder for our packages' compiled modules only."""

    @staticmethod
    def find_spec(name: str, path, target=None):
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
        if stale and not pure_python_forced():
            warnings.warn(f"{source} is newer than its compiled copy: using the source (run `make build`)",
                          RuntimeWarning, stacklevel=2)
        elif not stale and not pure_python_forced():
            return spec
        return importlib.util.spec_from_file_location(name, source)


def install() -> None:
    if not any(f is _SourceFirst for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst)


def status() -> str:
    """'compiled (N modules)', with how many are stale, 'pure Python (MQGATE_PURE_PYTHON)'
    or 'pure Python (not built)'."""
    if pure_python_forced():
        return "pure Python (MQGATE_PURE_PYTHON)"
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    built = stale = 0
    for pkg in sorted(_ROOTS):
        for root, _dirs, files in os.walk(os.path.join(here, pkg)):
            for f in files:
                if f.endswith(_SUFFIXES):
                    source = os.path.join(root, f.partition(".")[0] + ".py")
                    if os.path.exists(source) and os.stat(source).st_mtime > os.stat(os.path.join(root, f)).st_mtime:
                        stale += 1
                    else:
                        built += 1
    if not built and not stale:
        return "pure Python (not built)"
    return f"compiled ({built} modules" + (f"; {stale} older than their source, run as Python)" if stale else ")")
