"""core/ha."""

import importlib

# What the gateway assembles a broker node from, imported on first use
# (the controller needs httpx and etcd only when failover is configured).
_LAZY = {
    "HANode": "core.ha.node",
    "ha_routes": "core.ha.node",
    "SlaveMetadataSync": "core.ha.metadata",
    "Controller": "core.ha.controller",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'core.ha' has no attribute {name!r}")
