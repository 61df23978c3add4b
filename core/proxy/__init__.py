"""core.proxy: RocketMQ 5's gRPC MessagingService in the broker process.

What other rooms use::

    port = await nursery.start(partial(run_grpc, broker, host, port))   # 0 = any free port
    DEFAULT_GRPC_PORT   # 8081, RocketMQ 5 proxy's
    access = AccessCheck(plain_acl)   # run_grpc(..., access=access); access.acl = new one (SIGHUP)

The 5.x clients (rocketmq-clients: Java, Go, C++, C#, Python, Node.js, Rust)
speak this; what works and what does not yet is in docs/CLIENTS.md.
"""

from .auth import AccessCheck
from .server import run_grpc

DEFAULT_GRPC_PORT = 8081

__all__ = ["run_grpc", "AccessCheck", "DEFAULT_GRPC_PORT"]
