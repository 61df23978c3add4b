"""Compiled kernels (ARCHITECTURE.md decision 10).

Everything else about the package is in pyproject.toml. The modules below are
plain Python, compiled as they are by Cython (pure-Python mode): the same
file runs interpreted when there is no compiled copy, when the compiled copy
is older than the file, or when MQGATE_PURE_PYTHON=1 (see core/_kernels.py).
A machine without Cython or a C compiler gets a working pure-Python install
and one warning.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

# By profile weight on a QoS 0 fan-in (docs/PERFORMANCE.md): decode and
# encode, the message record, the store's append path, topic matching and
# the MQTT-to-broker mapping. Only synchronous code: trio's tasks stay Python.
KERNELS = [
    "core/store/message.py",
    "core/store/encoder.py",
    "core/store/message_format.py",
    "core/store/commitlog.py",
    "core/store/consume_queue.py",
    "core/store/index.py",
    "core/store/store.py",
    "core/store/append_many.py",
    "core/broker/send_checks.py",
    "core/broker/hooks.py",
    "core/broker/topic_names.py",
    "core/broker/uniq_key.py",
    "gateway/mqtt/_connection.py",
    "gateway/mqtt/_decode.py",
    "gateway/mqtt/_encode.py",
    "gateway/mqtt/_events.py",
    "gateway/mqtt/_properties.py",
    "gateway/mqtt/_topic_alias.py",
    "gateway/mqtt/_wire.py",
    "gateway/mqtt/fanout.py",
    "gateway/mqtt/qos.py",
    "gateway/wildcard/_cache.py",
    "gateway/wildcard/_topic.py",
    "gateway/wildcard/_trie.py",
    "gateway/mapping.py",
    "gateway/publish_output.py",
]

DIRECTIVES = {
    "language_level": 3,
    # annotations stay documentation: `x: int` must not become a C type or an
    # exact-type check, so that both builds behave the same
    "annotation_typing": False,
    "binding": True,
}


def _warn(why: str) -> None:
    print(f"mqgate: compiled kernels not built ({why}); the pure-Python modules will be used", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """A failed compile leaves the pure-Python install working, with one warning.

    The kernels compile in parallel, one per core, unless ``-j`` says otherwise."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        self._failed: list[str] = []
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - no compiler, no headers: fall back
            self._failed.append(f"{type(e).__name__}: {e}")
        if self._failed:
            _warn(f"{len(self._failed)} failed; first: {self._failed[0]}")

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self._failed.append(f"{ext.name}: {type(e).__name__}: {str(e).strip()}")


def _extensions() -> list:
    if os.environ.get("MQGATE_PURE_PYTHON"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _warn("Cython is not installed")
        return []
    try:
        return cythonize(KERNELS, build_dir="build/cython", compiler_directives=DIRECTIVES, quiet=True,
                         nthreads=os.cpu_count() or 1)
    except Exception as e:  # noqa: BLE001 - a Cython error must not break the install
        _warn(f"{type(e).__name__}: {e}")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
