"""The command line as a new user meets it in the first hour: `--version`,
start-up errors, listeners. Real `python -m gateway` processes."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version


def run_mqgate(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=timeout)


def test_version_is_the_package_metadata_version():
    r = run_mqgate("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"mqgate {version('mqgate')}"
