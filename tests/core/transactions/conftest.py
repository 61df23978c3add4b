"""Helpers for the transaction tests: `txnode` (brokers in-process) and `javawire` (the Java client's frames)."""

import sys
from pathlib import Path

import pytest
from thread_aware_clock import thread_aware_clock

sys.path.insert(0, str(Path(__file__).parent))  # txnode.py, javawire.py


@pytest.fixture
def clock():
    # not 0: the broker does file work in worker threads, and a clock that jumps the
    # moment the loop waits for one would fire every deadline before the thread answers
    return thread_aware_clock(0.01)
