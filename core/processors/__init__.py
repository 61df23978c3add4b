"""core/processors: the broker's RocketMQ request processors and its remoting role.

Public API::

    port = await nursery.start(run_broker_remoting, broker, host, port, namesrv_addrs,
                               delay_levels=None)        # "1s 5s ..." override
    BrokerRemoting(broker, host, port, namesrv_addrs, ...)  # same, keeps .ctx/.schedule/.server
    broker_routes(ctx, schedule) -> {code: Route}
"""

from core.processors.context import BrokerContext
from core.processors.runner import BrokerRemoting, broker_routes, run_broker_remoting

__all__ = ["BrokerContext", "BrokerRemoting", "broker_routes", "run_broker_remoting"]
