"""core/namesrv: the name server (broker registration and expiry, topic routes).

Public API::

    port = await nursery.start(run_namesrv, host, port)     # serve until cancelled
    NameServer()                     # processors + RouteTable, for embedding
    RouteTable                       # pure tables (register, expire, route)
    BrokerRegistrar(client, namesrv_addrs, BrokerIdentity(...), topic_wrapper)
        await nursery.start(registrar.run); registrar.trigger()
    encode_register_body / decode_register_body / RegisterBrokerBody
"""

from core.namesrv.register_body import (
    RegisterBodyError,
    RegisterBrokerBody,
    body_crc32,
    decode_register_body,
    encode_register_body,
)
from core.namesrv.registration import BrokerIdentity, BrokerRegistrar
from core.namesrv.route_table import BROKER_EXPIRED_MS, DataVersion, RouteTable, TopicConfig
from core.namesrv.server import STANDARD_JSON_VERSION, NameServer, run_namesrv

__all__ = [
    "BROKER_EXPIRED_MS",
    "BrokerIdentity",
    "BrokerRegistrar",
    "DataVersion",
    "NameServer",
    "RegisterBodyError",
    "RegisterBrokerBody",
    "RouteTable",
    "STANDARD_JSON_VERSION",
    "TopicConfig",
    "body_crc32",
    "decode_register_body",
    "encode_register_body",
    "run_namesrv",
]
