"""Compiled kernels and their pure-Python twins (ARCHITECTURE.md decision 10).

The same inputs through both builds give the same bytes, events and errors;
the switch and the stale-copy rule of core/_kernels.py pick the source.
"""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _outcomes(pure: bool) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "MQGATE_PURE_PYTHON"}
    if pure:
        env["MQGATE_PURE_PYTHON"] = "1"
    run = subprocess.run([sys.executable, str(HERE / "kernel_outcomes.py")], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.splitlines()


def test_compiled_and_pure_kernels_give_identical_results_on_fixtures_and_fuzz_corpus():
    compiled, pure = _outcomes(pure=False), _outcomes(pure=True)
    # `make test` builds the kernels: a suite that ran them as Python would prove nothing here
    assert compiled[0].startswith('["status", "compiled (') and "older than" not in compiled[0], compiled[0]
    assert pure[0] == '["status", "pure Python (MQGATE_PURE_PYTHON)"]'
    assert len(compiled) == len(pure) > 9000
    for c, p in zip(compiled[1:], pure[1:]):
        assert c == p


def test_the_hot_modules_are_the_compiled_copies():
    code = ("import core.store.message as m, core.store.encoder as e, gateway.mqtt._decode as d, gateway.wildcard._trie as t\n"
            "print(m.__file__, e.__file__, d.__file__, t.__file__)")
    files = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                           check=True, env={k: v for k, v in os.environ.items() if k != "MQGATE_PURE_PYTHON"}).stdout.split()
    assert all(f.endswith(".so") for f in files), files


PROBE = """\
import importlib, sys, warnings
sys.path.insert(0, {tmp!r})
import core._kernels as k
k._ROOTS.add("probe")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mod = importlib.import_module("probe.{module}")
print(mod.__file__.rpartition(".")[2], len(caught), caught[0].message if caught else "")
"""


def test_switch_and_stale_copies_pick_the_source(tmp_path):
    pkg = tmp_path / "probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("def twice(x):\n    return 2 * x\n")
    (pkg / "other.py").write_text("def thrice(x):\n    return 3 * x\n")
    build = textwrap.dedent("""\
        from setuptools import setup
        from Cython.Build import cythonize
        setup(name="probe", ext_modules=cythonize(["probe/mod.py", "probe/other.py"], quiet=True),
              script_args=["-q", "build_ext", "--inplace"])
        """)
    subprocess.run([sys.executable, "-c", build], cwd=tmp_path, check=True, capture_output=True, timeout=300)
    assert list(pkg.glob("mod.*.so")) and list(pkg.glob("other.*.so"))

    def which(module="mod", **env) -> str:
        full = {k: v for k, v in os.environ.items() if k != "MQGATE_PURE_PYTHON"} | env
        return subprocess.run([sys.executable, "-c", PROBE.format(tmp=str(tmp_path), module=module)], cwd=ROOT,
                              env=full, capture_output=True, text=True, check=True).stdout.strip()

    assert which() == "so 0"
    assert which("other") == "so 0"
    assert which(MQGATE_PURE_PYTHON="1") == "py 0"
    assert which(MQGATE_PURE_PYTHON="0") == "so 0"
    later = time.time() + 10
    os.utime(pkg / "mod.py", (later, later))
    assert which() == f"py 1 {pkg / 'mod.py'} is newer than its compiled copy: using the source (run `make build`)"
    # one stale kernel: the others run from their source too (compiled kernels cimport each other's types)
    assert which("other") == (f"py 1 {pkg / 'mod.py'} is newer than its compiled copy: every kernel runs from its"
                              " source (run `make build`)")


def test_a_failed_compile_leaves_a_working_pure_python_build(tmp_path):
    import shutil

    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, tmp_path / name)
    for tree in ("core", "gateway", "build/cython"):  # Cython's C files kept: only the C compiler fails
        if (ROOT / tree).exists():
            shutil.copytree(ROOT / tree, tmp_path / tree, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    env = {**os.environ, "CC": "false", "LDSHARED": "false"}
    env.pop("MQGATE_PURE_PYTHON", None)
    run = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    warnings = [line for line in run.stderr.splitlines() if line.startswith("mqgate:")]
    assert len(warnings) == 1 and "pure-Python modules will be used" in warnings[0], run.stderr[-2000:]
    assert not list(tmp_path.rglob("*.so"))
    check = subprocess.run([sys.executable, "-c", "import core._kernels as k, core.store.message as m; print(k.status(), m.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert check.stdout.split(" /")[0] == "pure Python (not built)"
