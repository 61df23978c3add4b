"""Helpers for the transaction tests: `txnode` (brokers in-process) and `javawire` (the Java client's frames)."""

import sys
from pathlib import Path

import pytest
from trio.testing import MockClock

sys.path.insert(0, str(Path(__file__).parent))  # txnode.py, javawire.py


@pytest.fixture
def clock():
    # not 0: the broker does file work in worker threads, and a clock that jumps the
    # moment the loop waits for one would fire every deadline before the thread answers
    return MockClock(autojump_threshold=0.01)
