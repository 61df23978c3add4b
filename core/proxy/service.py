"""The MessagingService of RocketMQ 5, on trio, over one in-process `Broker`.

Each method takes a decoded request and returns the response message(s);
`core.proxy.server` carries them over gRPC. Nothing here knows of threads.
Pop consumption is `core.proxy.consuming`, transactions
`core.proxy.transacting`; this module keeps routes, clients and sends.

Rules kept here:
- Routes name every broker group's master that serves the topic
  (`core.proxy.routing`, from the name servers), this broker with the
  endpoint the client reached it by, the others with their own gRPC
  endpoints: a 5.x client sends to and receives from each, and follows the
  name server to a new master after a failover.
- A send picks its queue on the broker: by a stable hash of the message group
  for FIFO messages (one group, one queue, so one order), round-robin
  otherwise (the 5.x clients leave the queue to the proxy).
- The Telemetry settings exchange answers the client's settings completed
  with the broker's: the body limit (``maxMessageSize``), the producer's
  retry policy, the consumer's maximum deliveries and retry backoff.
- A lite consumer (its settings say LITE_*, or it has lite subscriptions)
  receives from its group's lite topics of the requested topic
  (`core.proxy.lite`), here and in the topic's other broker groups
  (`core.proxy.remote`), any other consumer from the topic's queues; 5.x
  producers cannot send to the broker's system topics (``rmq_sys_``...).
- The transaction checker asks a 5.x producer of a topic over its Telemetry
  stream: the topics are those of its settings, plus those it sent a
  transactional message to. The Python client reopens its stream after a
  broker restart without sending settings on it until its next settings
  sync, up to 300 s later; a producer that sends transactions meanwhile
  is reachable for their topic at once.
- Bad input is a status with a one-line message; the service keeps serving.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass, field

import trio

from core.broker import Broker, is_system_topic, validate_topic
from core.store.message import PROPERTY_UNIQ_KEY, offset_msg_id

from . import pb, wire
from .consuming import DEFAULT_POLL_S, MAX_BATCH, PopConsumption, max_attempts
from .lite import QUOTA as LITE_QUOTA
from .lite import LiteSubscriptions
from .remote import RemoteQueues
from .routing import ClusterRoutes, RoutedGroup
from .transacting import TelemetryChannel, end_transaction
from .wire import OK, WireError, status

log = logging.getLogger("mqgate.proxy")

MESSAGE_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION, pb.LITE)
LITE_CONSUMERS = (pb.LITE_PUSH_CONSUMER, pb.LITE_SIMPLE_CONSUMER)


@dataclass
class ClientInfo:
    client_id: str
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    language: str = ""
    version: str = ""
    topics: set[str] = field(default_factory=set)
    last_seen: float = 0.0


def _scheme(host: str) -> int:
    if ":" in host:
        return pb.IPv6
    return pb.IPv4 if host.replace(".", "").isdigit() else pb.DOMAIN_NAME


class MessagingService:
    """RocketMQ 5's MessagingService over ``broker``; ``host``/``port`` name the
    endpoint when a request does not say how the client reached us."""

    def __init__(self, broker: Broker, host: str, port: int, transactions=None,
                 routes: ClusterRoutes | None = None) -> None:
        """``transactions``: the broker's `core.transactions.TransactionService` (None:
        transactional sends are answered UNSUPPORTED); ``routes``: the other broker
        groups, from the name servers (None: this broker alone)."""
        self.broker = broker
        self.routes = routes or ClusterRoutes(None, [], broker.config.broker_name)
        self.host, self.port = host, port
        self.transactions = transactions
        self.streams: dict[str, TelemetryChannel] = {}
        self.clients: dict[str, ClientInfo] = {}
        self.consumption = PopConsumption(broker, self._topic, RemoteQueues(self.routes.api))
        self.lite = LiteSubscriptions()
        # the pop methods, served as they are
        self.ack_message = self.consumption.ack_message
        self.change_invisible_duration = self.consumption.change_invisible_duration
        self.forward_to_dlq = self.consumption.forward_to_dlq

    def close(self) -> None:
        """Wake every waiting receive (it answers MESSAGE_NOT_FOUND)."""
        self.consumption.close()

    def attach(self, client_id: str, channel: "TelemetryChannel") -> None:
        """A Telemetry stream opened: the way to send commands to that client."""
        log.debug("telemetry stream of client %s opened", client_id)
        self.streams[client_id] = channel

    def detach(self, client_id: str, channel: "TelemetryChannel") -> None:
        """The stream ended: the client is gone, or will say who it is again (heartbeat, settings)."""
        channel.closed = True
        log.debug("telemetry stream of client %s ended", client_id)
        if self.streams.get(client_id) is channel:
            del self.streams[client_id]
            self.clients.pop(client_id, None)

    def producer_channels(self, group: str) -> list["TelemetryChannel"]:
        """For the transaction checker: the streams of 5.x producers of the topic that
        ``group`` (a `wire.transaction_group`) stands for."""
        topic = wire.topic_of_transaction_group(group)
        if topic is None:
            return []
        return [ch for cid, ch in self.streams.items() if not ch.closed and (c := self.clients.get(cid)) is not None
                and c.client_type == pb.PRODUCER and topic in c.topics]

    def _client(self, client_id: str) -> ClientInfo:
        c = self.clients.get(client_id)
        if c is None:
            c = self.clients[client_id] = ClientInfo(client_id)
        c.last_seen = trio.current_time()
        return c

    # ------------------------------------------------------------------ routes

    def _endpoints(self, asked: pb.Endpoints) -> pb.Endpoints:
        if asked.addresses:
            return asked
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=self.port)])

    async def _topic(self, name: str, *, create: bool):
        problem = validate_topic(name)
        if problem:
            raise WireError(pb.ILLEGAL_TOPIC, problem)
        cfg = self.broker.get_topic(name)
        if cfg is None and create and self.broker.config.auto_create_topic_enable:
            cfg = await self.broker.ensure_topic(name, queue_nums=self.broker.config.default_topic_queue_nums)
        if cfg is None:
            why = " (autoCreateTopicEnable is off)" if create else ""
            raise WireError(pb.TOPIC_NOT_FOUND, f"topic {name} does not exist on broker "
                                                f"{self.broker.config.broker_name}{why}")
        return cfg

    async def _groups(self, name: str, *, create: bool) -> list[RoutedGroup]:
        """The broker groups serving topic ``name`` (`core.proxy.routing`); a topic no
        broker has is created here when ``create`` and auto-creation allow."""
        problem = validate_topic(name)
        if problem:
            raise WireError(pb.ILLEGAL_TOPIC, problem)
        groups = await self.routes.groups(name, self._own_group(self.broker.get_topic(name)))
        if not groups and create:
            groups = [self._own_group(await self._topic(name, create=True))]
        if not groups:
            raise WireError(pb.TOPIC_NOT_FOUND, f"topic {name} does not exist on any broker")
        return groups

    def _own_group(self, cfg) -> RoutedGroup | None:
        if cfg is None:
            return None
        return RoutedGroup(self.broker.config.broker_name, max(cfg.read_queue_nums, cfg.write_queue_nums),
                           cfg.readable, cfg.writable, None)

    def _broker(self, g: RoutedGroup, asked: pb.Endpoints) -> pb.Broker:
        if g.endpoint is None:
            endpoints = self._endpoints(asked)
        else:
            host, port = g.endpoint
            endpoints = pb.Endpoints(scheme=_scheme(host), addresses=[pb.Address(host=host, port=port)])
        return pb.Broker(name=g.broker_name, id=0, endpoints=endpoints)

    async def query_route(self, req: pb.QueryRouteRequest) -> pb.QueryRouteResponse:
        """Every queue of the topic on every broker group's master (`core.proxy.routing`)."""
        try:
            groups = await self._groups(req.topic.name, create=True)
        except WireError as e:
            return pb.QueryRouteResponse(status=status(e.code, str(e)))
        queues = []
        for g in groups:
            broker = self._broker(g, req.endpoints)
            perm = {(True, True): pb.READ_WRITE, (True, False): pb.READ, (False, True): pb.WRITE}.get(
                (g.readable, g.writable), pb.NONE)
            queues += [pb.MessageQueue(topic=req.topic, id=i, permission=perm, broker=broker,
                                       accept_message_types=MESSAGE_TYPES) for i in range(g.queues)]
        return pb.QueryRouteResponse(status=OK, message_queues=queues)

    async def query_assignment(self, req: pb.QueryAssignmentRequest) -> pb.QueryAssignmentResponse:
        """One assignment per readable broker group: a receive there pops every queue of the topic."""
        try:
            groups = await self._groups(req.topic.name, create=False)
        except WireError as e:
            return pb.QueryAssignmentResponse(status=status(e.code, str(e)))
        assignments = [pb.Assignment(message_queue=pb.MessageQueue(
            topic=req.topic, id=0, permission=pb.READ_WRITE, broker=self._broker(g, req.endpoints),
            accept_message_types=MESSAGE_TYPES)) for g in groups if g.readable]
        return pb.QueryAssignmentResponse(status=OK, assignments=assignments)

    # ------------------------------------------------------------------ client lifecycle

    async def heartbeat(self, req: pb.HeartbeatRequest, client_id: str) -> pb.HeartbeatResponse:
        c = self._client(client_id)
        log.debug("heartbeat of %s client %s", pb.ClientType.Name(req.client_type), client_id)
        c.client_type = req.client_type
        if req.HasField("group") and req.group.name:
            c.group = req.group.name
            if self.broker.groups.get_or_create(c.group) is None:
                return pb.HeartbeatResponse(status=status(pb.CONSUMER_GROUP_NOT_FOUND,
                                                          f"consumer group {c.group} does not exist "
                                                          f"(autoCreateSubscriptionGroup is off)"))
        return pb.HeartbeatResponse(status=OK)

    async def notify_client_termination(self, req: pb.NotifyClientTerminationRequest,
                                        client_id: str) -> pb.NotifyClientTerminationResponse:
        self.clients.pop(client_id, None)
        self.lite.forget(client_id)
        await trio.lowlevel.checkpoint()
        return pb.NotifyClientTerminationResponse(status=OK)

    async def telemetry(self, cmd: pb.TelemetryCommand, client_id: str) -> pb.TelemetryCommand | None:
        """The settings exchange: the client's settings come back completed with the
        broker's (body size limit, retry policy, polling); other commands need no answer."""
        await trio.lowlevel.checkpoint()
        if cmd.WhichOneof("command") != "settings":
            return None
        s = cmd.settings
        c = self._client(client_id)
        log.debug("settings of %s client %s", pb.ClientType.Name(s.client_type), client_id)
        c.client_type = s.client_type
        c.language = pb.Language.Name(s.user_agent.language) if s.user_agent.language in pb.Language.values() else ""
        c.version = s.user_agent.version
        out = pb.Settings()
        out.CopyFrom(s)
        out.metric.Clear()  # no metrics collector here: the client must not export to this port
        if s.WhichOneof("pub_sub") == "publishing":
            c.topics = {t.name for t in s.publishing.topics}
            out.publishing.max_body_size = self.broker.config.max_message_size
            out.publishing.validate_message_type = False
            out.backoff_policy.max_attempts = 3
            out.backoff_policy.exponential_backoff.initial.FromMilliseconds(10)
            out.backoff_policy.exponential_backoff.max.FromSeconds(1)
            out.backoff_policy.exponential_backoff.multiplier = 2.0
        elif s.WhichOneof("pub_sub") == "subscription":
            sub = s.subscription
            c.group = sub.group.name
            c.topics = {e.topic.name for e in sub.subscriptions}
            out.subscription.fifo = self.consumption.orderly(c.group)
            if not sub.HasField("receive_batch_size"):
                out.subscription.receive_batch_size = MAX_BATCH
            if not sub.HasField("long_polling_timeout"):
                out.subscription.long_polling_timeout.FromSeconds(int(DEFAULT_POLL_S))
            out.backoff_policy.max_attempts = max_attempts(self.broker, c.group)
            out.backoff_policy.customized_backoff.next.add().FromSeconds(1)
            if s.client_type in LITE_CONSUMERS:
                out.subscription.lite_subscription_quota = LITE_QUOTA
                out.subscription.max_lite_topic_size = wire.MAX_LITE_TOPIC
        return pb.TelemetryCommand(status=OK, settings=out)

    # ------------------------------------------------------------------ lite topics and receive

    async def sync_lite_subscription(self, req: pb.SyncLiteSubscriptionRequest,
                                     client_id: str) -> pb.SyncLiteSubscriptionResponse:
        """A lite consumer's lite topics under its parent topic (`core.proxy.lite`)."""
        try:
            if not req.group.name:
                raise WireError(pb.ILLEGAL_CONSUMER_GROUP, "the request names no consumer group")
            await self._topic(req.topic.name, create=False)
            self.lite.sync(client_id, req.group.name, req.topic.name, req.action, req.lite_topic_set)
        except WireError as e:
            return pb.SyncLiteSubscriptionResponse(status=status(e.code, str(e)))
        self.consumption.wake(req.topic.name)  # a waiting receive looks at its new queues
        return pb.SyncLiteSubscriptionResponse(status=OK)

    async def receive_message(self, req: pb.ReceiveMessageRequest, time_left: float | None,
                              client_id: str = "") -> list[pb.ReceiveMessageResponse]:
        """A lite consumer (by its settings, or by its lite subscriptions) pops its group's
        lite topics of the request's topic; any other consumer the topic's queues."""
        group, topic = req.group.name, req.message_queue.topic.name
        c = self.clients.get(client_id)
        lite = (c is not None and c.client_type in LITE_CONSUMERS) or self.lite.has(client_id, group, topic)
        if not lite:
            return await self.consumption.receive_message(req, time_left)
        queues = self.lite.queues(group, topic)
        # the producers spread lite messages over every group of the topic: theirs are read too
        others = [(g.broker_name, g.addr) for g in await self.routes.other_groups(topic) if g.readable and g.addr]
        return await self.consumption.receive_message(req, time_left, queues, others if queues else [])

    # ------------------------------------------------------------------ send

    async def send_message(self, req: pb.SendMessageRequest, client_id: str = "") -> pb.SendMessageResponse:
        if not req.messages:
            return pb.SendMessageResponse(status=status(pb.BAD_REQUEST, "the request holds no message"))
        entries = [await self._send_one(m) for m in req.messages]
        if client_id:  # its checker answers for the transactions it sends (the Java proxy's remoting send does so too)
            sent = {m.topic.name for m, e in zip(req.messages, entries) if e.transaction_id}
            if sent:
                c = self._client(client_id)
                c.client_type = pb.PRODUCER
                c.topics |= sent
        first = entries[0].status
        whole = first if all(e.status.code == first.code for e in entries) else status(pb.MULTIPLE_RESULTS, "see entries")
        return pb.SendMessageResponse(status=whole, entries=entries)

    async def _send_one(self, m: pb.Message) -> pb.SendResultEntry:
        try:
            if m.system_properties.message_type == pb.TRANSACTION and self.transactions is None:
                raise WireError(pb.UNSUPPORTED, "transactional messages need the broker's remoting listener "
                                                "(--broker-port not 0), whose transaction service checks them")
            msg, _ = wire.to_store(m, self.broker.config.max_message_size)
            if is_system_topic(msg.topic):
                raise WireError(pb.ILLEGAL_TOPIC, f"topic {msg.topic} is a system topic of the broker")
            if not msg.body:
                raise WireError(pb.MESSAGE_BODY_EMPTY, "the message body is empty")
            if len(msg.body) > self.broker.config.max_message_size:
                raise WireError(pb.MESSAGE_BODY_TOO_LARGE, f"the body has {len(msg.body)} bytes, more than "
                                                           f"maxMessageSize {self.broker.config.max_message_size}")
            cfg = await self._topic(msg.topic, create=True)
            group = msg.properties.get(wire.SHARDING_KEY)
            queue_id = zlib.crc32(group.encode()) % cfg.write_queue_nums if group is not None else None
        except WireError as e:
            return pb.SendResultEntry(status=status(e.code, str(e)), message_id=m.system_properties.message_id)
        result = await self.broker.send(msg, queue_id)
        if not result.ok:
            code = {"TOPIC_NOT_EXIST": pb.TOPIC_NOT_FOUND, "NO_PERMISSION": pb.FORBIDDEN,
                    "MESSAGE_ILLEGAL": pb.BAD_REQUEST, "SYSTEM_BUSY": pb.TOO_MANY_REQUESTS,
                    "SERVICE_NOT_AVAILABLE": pb.HA_NOT_AVAILABLE}.get(result.status.name, pb.INTERNAL_SERVER_ERROR)
            return pb.SendResultEntry(status=status(code, result.remark or result.status.name),
                                      message_id=m.system_properties.message_id)
        code = {"FLUSH_DISK_TIMEOUT": pb.MASTER_PERSISTENCE_TIMEOUT, "FLUSH_SLAVE_TIMEOUT": pb.SLAVE_PERSISTENCE_TIMEOUT,
                "SLAVE_NOT_AVAILABLE": pb.HA_NOT_AVAILABLE}.get(result.status.name, pb.OK)
        # a half's transaction id is its offset message id: EndTransaction finds the half by it
        tx_id = offset_msg_id(msg.store_host, result.physical_offset) if wire.TRAN_MSG in msg.properties else ""
        return pb.SendResultEntry(status=status(code, "OK" if code == pb.OK else result.status.name),
                                  message_id=msg.properties[PROPERTY_UNIQ_KEY], offset=result.queue_offset,
                                  transaction_id=tx_id)

    # ------------------------------------------------------------------ transactions
    async def end_transaction(self, req: pb.EndTransactionRequest) -> pb.EndTransactionResponse:
        try:
            await end_transaction(self.broker, self.transactions, req)
        except WireError as e:
            return pb.EndTransactionResponse(status=status(e.code, str(e)))
        return pb.EndTransactionResponse(status=OK)

