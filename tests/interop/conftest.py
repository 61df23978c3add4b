"""Interop tests with the PyPI `rocketmq` 0.4.4 client (bundled C++ client 1.2.x).

The C++ client is blocking and runs its own threads, so our name server and
broker run with trio in a background thread of the test process
(`harness.ClusterThread`). Group and topic names carry a per-run suffix:
the C++ client keeps broadcasting offsets in ~/.rocketmq_offsets.
"""

import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from harness import FAST_DELAY_LEVELS, ClusterThread  # noqa: E402

import rocketmq.client as rocketmq  # the PyPI C++ client; `make test` installs it


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    c = ClusterThread(str(tmp_path_factory.mktemp("interop-store")), delay_levels=FAST_DELAY_LEVELS).start()
    yield c
    c.stop()


@pytest.fixture
def names():
    suffix = uuid.uuid4().hex[:8]
    return lambda base: f"{base}_{suffix}"
