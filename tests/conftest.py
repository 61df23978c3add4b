"""Suite-wide set-up: shared helpers in tests/support are importable by name."""

import sys
from pathlib import Path

SUPPORT = Path(__file__).parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

# Tests that load both cores on their own run after the rest, one at a time
# (`make test`: `pytest -n 2 -m "not serial"`, then `pytest -m serial`): Spark
# runs local[2] with a JVM, and the documentation examples run whole
# programs, Spark jobs among them. Beside another test they ran 3-5x slower
# and hit Spark's 10 s Python-worker connect-back timeout.
SERIAL_DIRS = ("spark", "docs")


def pytest_collection_modifyitems(config, items):
    import pytest

    tests_root = Path(__file__).parent
    for item in items:
        try:
            top = item.path.relative_to(tests_root).parts[0]
        except ValueError:
            continue
        if top in SERIAL_DIRS:
            item.add_marker(pytest.mark.serial)
