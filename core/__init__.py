"""core: the broker room.

What other rooms use is re-exported here lazily (PEP 562), so that
``import core.store`` (Spark's record decoding) does not pull in trio:

    from core import Broker, BrokerConfig, open_broker, Message, StoreConfig

The full list is ``core.broker.__all__`` plus the store's `Message`,
`StoredMessage`, `StoreConfig`, `FlushDiskType`, `decode_message(s)`, the
timer service (`TimerMessageService`, `TimerConfig`) and `kernel_status()`.
"""

import importlib

from core import _kernels

_kernels.install()  # MQGATE_PURE_PYTHON, and stale compiled copies: see core/_kernels.py

_TIMER_NAMES = frozenset({"TimerConfig", "TimerMessageService"})
_STORE_NAMES = frozenset({"Message", "StoredMessage", "StoreConfig", "FlushDiskType", "decode_message", "decode_messages"})


def kernel_status() -> str:
    """Which build of the compiled kernels this process runs (``mqgate --version``)."""
    return _kernels.status()


def __getattr__(name: str):
    if name in _TIMER_NAMES:
        return getattr(importlib.import_module("core.timers"), name)
    if name in _STORE_NAMES:
        return getattr(importlib.import_module("core.store"), name)
    if not name.startswith("_") and name not in ("broker", "store"):
        broker = importlib.import_module("core.broker")
        if name in broker.__all__:
            return getattr(broker, name)
    raise AttributeError(f"module 'core' has no attribute {name!r}")
