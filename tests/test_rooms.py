"""Each room imports only what ../shared/ARCHITECTURE.md's table lets it.

Read from the source (AST), so a lazy import inside a function counts too.
A room's imports of itself (relative or absolute) are always allowed; the
standard library and third-party packages are not ours to police here,
except where a room promises none (loadtest: paho-mqtt, matplotlib for the
report's plots and the standard library only, outside its bench_*
micro-benchmarks).
"""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
OURS = ("core", "gateway", "spark", "loadtest")

# The packages of core whose __init__ is its public face for the gateway.
CORE_PACKAGES = sorted(p.parent.name for p in (ROOT / "core").glob("*/__init__.py"))


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of each import in ``path``."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            out.append((node.lineno, name))
    return out


def _files(room: str, exclude: tuple[str, ...] = ()) -> list[pathlib.Path]:
    base = ROOT / room
    files = [p for p in base.rglob("*.py") if "__pycache__" not in p.parts]
    return [p for p in files if not any(str(p.relative_to(ROOT)).startswith(e) for e in exclude)]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _gateway_core(name: str) -> bool:
    """``core`` itself or one of its packages, never a module inside one."""
    parts = name.split(".")
    return parts == ["core"] or (len(parts) == 2 and parts[1] in CORE_PACKAGES)


# room -> (files, allowed(name) for our own modules; None = any of ours except the forbidden)
RULES = {
    "gateway/mqtt": (lambda: _files("gateway/mqtt"), lambda n: _within(n, "gateway.mqtt")),
    "gateway/wildcard": (lambda: _files("gateway/wildcard"), lambda n: _within(n, "gateway.wildcard")),
    "gateway": (lambda: _files("gateway", ("gateway/mqtt", "gateway/wildcard")),
                lambda n: _within(n, "gateway") or _gateway_core(n)),
    "core/store": (lambda: _files("core/store"), lambda n: _within(n, "core.store")),
    "core/remoting": (lambda: _files("core/remoting"), lambda n: _within(n, "core.remoting")),
    "core/namesrv": (lambda: _files("core/namesrv"),
                     lambda n: _within(n, "core.namesrv") or _within(n, "core.remoting")),
    "core": (lambda: _files("core", ("core/store", "core/remoting", "core/namesrv")), lambda n: _within(n, "core")),
    "spark": (lambda: _files("spark"),
              lambda n: _within(n, "spark") or _within(n, "core.store") or _within(n, "core.client") or n == "core"),
    "loadtest": (lambda: [p for p in _files("loadtest") if not p.name.startswith("bench_")],
                 lambda n: _within(n, "loadtest")),
}


@pytest.mark.parametrize("room", list(RULES))
def test_the_room_imports_only_what_it_may(room):
    files, allowed = RULES[room]
    bad = []
    for path in files():
        for line, name in _imports(path):
            if name.split(".")[0] in OURS and not allowed(name):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def test_loadtest_needs_nothing_but_paho_matplotlib_and_the_standard_library():
    bad = []
    for path in _files("loadtest"):
        if path.name.startswith("bench_"):
            continue
        for line, name in _imports(path):
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in ("paho", "matplotlib", "loadtest", "__future__"):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not bad, "\n".join(bad)
