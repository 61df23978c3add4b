"""The broker's remoting role: listener, processors, delay levels, name-server registration.

``port = await nursery.start(run_broker_remoting, broker, host, port, namesrv_addrs)``
serves RocketMQ clients for a running `core.broker.Broker` until cancelled.

Rules kept here:

- The dispatch table `broker_routes` is the whole list of request codes the
  broker answers; every other code gets REQUEST_CODE_NOT_SUPPORTED from
  the server. PULL_MESSAGE is spawned (long polling); every other route is
  inline, so one connection's sends are stored in arrival order; a run of
  sends from one read is stored through one `Broker.send_many` call.
- Started means: the transaction service has loaded its pending set,
  listening, delay-level service running (neither runs on a slave: it
  writes nothing), and one registration round done
  with every name server (each bounded by its timeout, so a dead name
  server delays start by at most that).
- Put hooks: the delay-level hook, then the transaction hook (a half keeps
  its DELAY until commit); a timer service's hook, installed by whoever
  starts it before this role, runs first.
- The registered address is ``brokerIP1:<bound port>``; with ``listenPort``
  0 (tests) the broker's store host is set to the bound port too, so
  offset message ids point at the real listener.
- ACL is off unless an ACL file (or `PlainAcl`) is given.
- Any topic change (auto-created on send, ``%RETRY%`` on heartbeat,
  UPDATE_AND_CREATE_TOPIC) re-registers with the name servers at once.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import trio

from core.broker import Broker, BrokerRole
from core.namesrv import BrokerIdentity, BrokerRegistrar
from core.processors import admin, client_manage, end_transaction, group_admin, offsets, pull, send
from core.processors.acl import PlainAcl
from core.processors.context import BrokerContext
from core.remoting import RequestCode
from core.remoting.client import RemotingClient
from core.remoting.server import RemotingServer, Route
from core.delay_levels import DEFAULT_DELAY_LEVELS, ScheduleService
from core.store.message import pack_host
from core.transactions import TransactionService

__all__ = ["BrokerRemoting", "broker_routes", "run_broker_remoting"]

log = logging.getLogger("mqgate.processors.runner")


def broker_routes(ctx: BrokerContext, schedule: ScheduleService | None = None,
                  transactions: TransactionService | None = None) -> dict[int, Route]:
    def r(fn, spawn=False, batch=None):
        return Route(functools.partial(fn, ctx), spawn, functools.partial(batch, ctx) if batch else None)

    C = RequestCode
    routes = {
        C.SEND_MESSAGE: r(send.send_message, batch=send.send_messages),
        C.SEND_MESSAGE_V2: r(send.send_message, batch=send.send_messages),
        C.SEND_BATCH_MESSAGE: r(send.send_message, batch=send.send_messages),
        C.CONSUMER_SEND_MSG_BACK: r(send.consumer_send_msg_back),
        C.PULL_MESSAGE: r(pull.pull_message, spawn=True),
        C.HEART_BEAT: r(client_manage.heart_beat),
        C.UNREGISTER_CLIENT: r(client_manage.unregister_client),
        C.GET_CONSUMER_LIST_BY_GROUP: r(client_manage.get_consumer_list),
        C.LOCK_BATCH_MQ: r(client_manage.lock_batch_mq),
        C.UNLOCK_BATCH_MQ: r(client_manage.unlock_batch_mq),
        C.CHECK_CLIENT_CONFIG: r(client_manage.check_client_config),
        C.QUERY_CONSUMER_OFFSET: r(offsets.query_consumer_offset),
        C.UPDATE_CONSUMER_OFFSET: r(offsets.update_consumer_offset),
        C.GET_MAX_OFFSET: r(offsets.get_max_offset),
        C.GET_MIN_OFFSET: r(offsets.get_min_offset),
        C.SEARCH_OFFSET_BY_TIMESTAMP: r(offsets.search_offset_by_timestamp),
        C.GET_EARLIEST_MSG_STORETIME: r(offsets.get_earliest_msg_storetime),
        C.QUERY_MESSAGE: r(admin.query_message),
        C.VIEW_MESSAGE_BY_ID: r(admin.view_message_by_id),
        C.UPDATE_AND_CREATE_TOPIC: r(admin.update_and_create_topic),
        C.GET_ALL_TOPIC_CONFIG: r(admin.get_all_topic_config),
        C.GET_BROKER_RUNTIME_INFO: r(admin.runtime_info_route(transactions)),
        C.GET_ALL_CONSUMER_OFFSET: r(admin.get_all_consumer_offset),
        C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: r(admin.get_all_subscription_group),
        C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: r(admin.update_and_create_subscription_group),
        C.GET_ALL_DELAY_OFFSET: r(admin.delay_offset_route(schedule)),
        C.GET_TOPIC_STATS_INFO: r(admin.get_topic_stats_info),
        C.DELETE_TOPIC_IN_BROKER: r(admin.delete_topic_in_broker),
        C.GET_CONSUMER_CONNECTION_LIST: r(group_admin.get_consumer_connection_list),
        C.GET_CONSUME_STATS: r(group_admin.get_consume_stats),
        C.INVOKE_BROKER_TO_RESET_OFFSET: r(group_admin.invoke_broker_to_reset_offset),
        C.GET_CONSUMER_RUNNING_INFO: r(group_admin.get_consumer_running_info, spawn=True),
        C.CONSUME_MESSAGE_DIRECTLY: r(group_admin.consume_message_directly, spawn=True),
    }
    if transactions is not None:
        routes[C.END_TRANSACTION] = r(end_transaction.end_transaction_route(transactions))
    return routes


class BrokerRemoting:
    """The remoting side of one broker; `run` is what ``nursery.start`` takes."""

    def __init__(
        self,
        broker: Broker,
        host: str | None,
        port: int,
        namesrv_addrs: list[str] | str | None = None,
        *,
        delay_levels: str | None = None,
        register_period: float | None = None,
        register_timeout: float = 3.0,
        client_scan_interval: float = 10.0,
        acl: "PlainAcl | str | None" = None,
        ha_server_addr: str | None = None,
        extra_routes: dict[int, Route] | None = None,
    ) -> None:
        if isinstance(namesrv_addrs, str):
            namesrv_addrs = [a for a in namesrv_addrs.split(";") if a]
        self.broker = broker
        self.host = host
        self.port = port
        self.namesrv_addrs = list(namesrv_addrs or [])
        levels = delay_levels or getattr(broker.config, "message_delay_level", None) or DEFAULT_DELAY_LEVELS
        self.schedule = ScheduleService(broker, levels)
        self.ctx = BrokerContext(broker)
        self.transactions = TransactionService(broker, producer_channels=self.ctx.clients.producer_channels)
        if isinstance(acl, (str, Path)):
            acl = PlainAcl.from_file(acl)
        self.acl = acl
        routes = broker_routes(self.ctx, self.schedule, self.transactions)
        routes.update(extra_routes or {})
        self.ha_server_addr = ha_server_addr
        self.server = RemotingServer(routes, name=f"broker {broker.config.broker_name}",
                                     request_hook=acl.hook if acl is not None else None)
        self.server.on_close(self.ctx.channel_closed)
        self.register_period = register_period or broker.config.register_name_server_period / 1000
        self.register_timeout = register_timeout
        self.client_scan_interval = client_scan_interval
        self.registrar: BrokerRegistrar | None = None
        self.bound_port: int | None = None

    @property
    def addr(self) -> str:
        return f"{self.broker.config.broker_ip1}:{self.bound_port}"

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        cfg = self.broker.config
        master = cfg.broker_role is not BrokerRole.SLAVE  # a slave writes nothing: no delivery or check-back
        self.schedule.install()
        self.transactions.install()
        async with trio.open_nursery() as nursery:
            if master:
                await nursery.start(self.transactions.run)
            self.bound_port = bound = await nursery.start(self.server.serve, self.host, self.port)
            if cfg.listen_port == 0:
                self.broker.store_host = pack_host(cfg.broker_ip1, bound)
            if master:
                await nursery.start(self.schedule.run)
            nursery.start_soon(self.ctx.expire_clients_loop, self.client_scan_interval)
            client = RemotingClient(nursery)
            self.registrar = BrokerRegistrar(
                client,
                self.namesrv_addrs,
                BrokerIdentity(cfg.broker_cluster_name, cfg.broker_name, self.addr, cfg.broker_id,
                               self.ha_server_addr if self.ha_server_addr is not None else f"{cfg.broker_ip1}:{bound + 1}"),
                self.broker.topics.to_json,
                period=self.register_period,
                timeout=self.register_timeout,
            )
            self.broker.topics.add_listener(lambda _name, _cfg: self.registrar.trigger())
            await nursery.start(self.registrar.run)
            log.info("broker %s serving on %s, name servers %s", cfg.broker_name, self.addr, self.namesrv_addrs)
            task_status.started(bound)


async def run_broker_remoting(
    broker: Broker,
    host: str | None,
    port: int,
    namesrv_addrs: list[str] | str | None,
    *,
    delay_levels: str | None = None,
    acl_file: str | None = None,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve RocketMQ clients for ``broker`` on ``host:port`` until cancelled; reports the bound port.

    ``delay_levels``: ``messageDelayLevel`` text (default the 18 4.x levels);
    ``acl_file``: a plain-ACL file (TOML, or RocketMQ's plain_acl.yml) turns ACL on.
    """
    remoting = BrokerRemoting(broker, host, port, namesrv_addrs, delay_levels=delay_levels, acl=acl_file)
    await remoting.run(task_status=task_status)
