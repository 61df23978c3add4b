"""A disk that refuses to grow files, for fault tests: a real OS error, no mock."""

from __future__ import annotations

import resource
import signal
from contextlib import contextmanager


@contextmanager
def max_file_size(limit: int):
    """RLIMIT_FSIZE: the kernel refuses to make any file larger than ``limit``
    (EFBIG), like a full disk refuses new blocks.  SIGXFSZ is ignored so the
    call fails instead of the process."""
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
