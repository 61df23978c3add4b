"""core/processors: the broker's RocketMQ request processors and its remoting role.

Public API::

    port = await nursery.start(run_broker_remoting, broker, host, port, namesrv_addrs)
        # keyword options: delay_levels="1s 5s ..." (messageDelayLevel), acl_file="plain_acl.toml"
    BrokerRemoting(broker, host, port, namesrv_addrs, delay_levels=None, acl=None)
        # the same as an object: .run(task_status=...), .ctx (clients, locks), .schedule, .server, .addr
    broker_routes(ctx, schedule) -> {code: Route}
    PlainAcl.from_file(path)

Codes answered (everything else: 3 REQUEST_CODE_NOT_SUPPORTED):
10/310/320 send (batch flag "1" honoured for C++ 1.2.x: a batch of N stores N
messages), 11 pull (long polling, spawned), 12 query by key / unique key,
14/15 consumer offsets, 17 create topic, 21 all topic config, 28 runtime info,
29-32 queue offsets and times, 33 view by offset, 34 heartbeat (C++ integer
enums), 35 unregister, 36 send-back to %RETRY% / %DLQ%, 37 END_TRANSACTION
(oneway or sync), 38 consumer list, 41/42 queue locks (60 s lease), 43 all
consumer offsets, 45 delay offsets, 46 client config check, 201 subscription
groups, 202 topic stats, 203 consumer connections, 215 delete topic, 222
reset a group's offsets by time. Broker to client: 40 NOTIFY_CONSUMER_IDS_CHANGED
on every membership or subscription change; 39 CHECK_TRANSACTION_STATE (oneway)
for half messages still unresolved after the transaction timeout
(core.transactions); 220 RESET_CONSUMER_CLIENT_OFFSET (oneway) on 222.
"""

from core.processors.acl import PlainAcl
from core.processors.context import BrokerContext
from core.processors.runner import BrokerRemoting, broker_routes, run_broker_remoting

__all__ = ["BrokerContext", "BrokerRemoting", "PlainAcl", "broker_routes", "run_broker_remoting"]
