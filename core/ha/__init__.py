"""core/ha."""

import importlib

# What the gateway assembles a broker node from, imported on first use
# (the controller needs httpx and etcd only when failover is configured).
_LAZY = {
    "HANode": "core.ha.node",
    "ha_routes": "core.ha.node",
    "SlaveMetadataSync": "core.ha.metadata",
    "Controller": "core.ha.controller",
    # the gateway nodes' client-id ownership (gateway.owners) holds its keys in etcd too
    "EtcdClient": "core.ha.etcd",
    "EtcdError": "core.ha.etcd",
    "LeaseNotFound": "core.ha.etcd",
    "Compare": "core.ha.etcd",
    "Op": "core.ha.etcd",
    "KeyValue": "core.ha.etcd",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'core.ha' has no attribute {name!r}")
