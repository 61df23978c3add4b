"""The MessagingService of RocketMQ 5, on trio, over one in-process `Broker`.

Each method takes a decoded request and returns the response message(s);
`core.proxy.server` carries them over gRPC. Nothing here knows of threads.

Rules kept here:
- Routes name this endpoint (the address the client reached it by) for every
  queue of the topic on this broker: a 5.x client sends and receives here.
- A send picks its queue on the broker: by a stable hash of the message group
  for FIFO messages (one group, one queue, so one order), round-robin
  otherwise (the 5.x clients leave the queue to the proxy).
- ReceiveMessage pops across every queue of the topic: redeliveries that are
  due first, then new messages; with nothing to give it waits (long polling)
  until a message arrives, an invisible time ends, the poll time ends, or the
  service closes. It always answers with a status: OK with messages, or
  MESSAGE_NOT_FOUND.
- A message due again after ``max_attempts`` deliveries goes to the group's
  dead-letter topic (``%DLQ%group``) instead; the group's ``retryMaxTimes``
  (16) + 1 is that maximum, as RocketMQ's.
- Bad input is a status with a one-line message; the service keeps serving.
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from dataclasses import dataclass, field

import trio

from core.broker import TRANS_HALF_TOPIC, Broker, PullStatus, dlq_topic, validate_topic
from core.store.message import (
    PROPERTY_UNIQ_KEY, MessageFormatError, StoredMessage, decode_message, decode_messages, offset_msg_id,
    parse_offset_msg_id,
)

from . import pb
from . import wire
from .pop import PopQueue, PopTable, ReceiptError
from .wire import OK, WireError, status

log = logging.getLogger("mqgate.proxy")

DEFAULT_POLL_S = 20.0  # when the request names no long-polling time
POLL_MARGIN_S = 0.5  # answer this long before the client's own deadline
MIN_INVISIBLE_S = 1.0
MAX_INVISIBLE_S = 12 * 3600.0  # RocketMQ's upper bound
MAX_BATCH = 32
MESSAGE_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY)


@dataclass
class ClientInfo:
    client_id: str
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    language: str = ""
    version: str = ""
    topics: set[str] = field(default_factory=set)
    last_seen: float = 0.0


class MessagingService:
    """RocketMQ 5's MessagingService over ``broker``; ``host``/``port`` name the
    endpoint when a request does not say how the client reached us."""

    def __init__(self, broker: Broker, host: str, port: int, transactions=None) -> None:
        """``transactions``: the broker's `core.transactions.TransactionService` (None:
        transactional sends are answered UNSUPPORTED)."""
        self.broker = broker
        self.host, self.port = host, port
        self.transactions = transactions
        self.streams: dict[str, TelemetryChannel] = {}
        self.pop = PopTable()
        self.clients: dict[str, ClientInfo] = {}
        self.closing = trio.Event()
        self._arrived: dict[str, trio.Event] = {}
        self._rr = 0
        broker.add_dispatch_listener(self._on_dispatch)

    def close(self) -> None:
        """Wake every waiting receive (it answers MESSAGE_NOT_FOUND) and stop listening."""
        self.closing.set()
        self.broker.remove_dispatch_listener(self._on_dispatch)

    def _on_dispatch(self, topic: str, queue_id: int, next_offset: int) -> None:
        ev = self._arrived.pop(topic, None)
        if ev is not None:
            ev.set()

    def attach(self, client_id: str, channel: "TelemetryChannel") -> None:
        """A Telemetry stream opened: the way to send commands to that client."""
        self.streams[client_id] = channel

    def detach(self, client_id: str, channel: "TelemetryChannel") -> None:
        channel.closed = True
        if self.streams.get(client_id) is channel:
            del self.streams[client_id]

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

    async def query_route(self, req: pb.QueryRouteRequest) -> pb.QueryRouteResponse:
        try:
            cfg = await self._topic(req.topic.name, create=True)
        except WireError as e:
            return pb.QueryRouteResponse(status=status(e.code, str(e)))
        broker = pb.Broker(name=self.broker.config.broker_name, id=0, endpoints=self._endpoints(req.endpoints))
        perm = {(True, True): pb.READ_WRITE, (True, False): pb.READ, (False, True): pb.WRITE}.get(
            (cfg.readable, cfg.writable), pb.NONE)
        queues = [pb.MessageQueue(topic=req.topic, id=i, permission=perm, broker=broker,
                                  accept_message_types=MESSAGE_TYPES)
                  for i in range(max(cfg.read_queue_nums, cfg.write_queue_nums))]
        return pb.QueryRouteResponse(status=OK, message_queues=queues)

    async def query_assignment(self, req: pb.QueryAssignmentRequest) -> pb.QueryAssignmentResponse:
        """One assignment for this broker: a receive pops every queue of the topic."""
        try:
            await self._topic(req.topic.name, create=False)
        except WireError as e:
            return pb.QueryAssignmentResponse(status=status(e.code, str(e)))
        broker = pb.Broker(name=self.broker.config.broker_name, id=0, endpoints=self._endpoints(req.endpoints))
        mq = pb.MessageQueue(topic=req.topic, id=0, permission=pb.READ_WRITE, broker=broker,
                             accept_message_types=MESSAGE_TYPES)
        return pb.QueryAssignmentResponse(status=OK, assignments=[pb.Assignment(message_queue=mq)])

    # ------------------------------------------------------------------ client lifecycle

    async def heartbeat(self, req: pb.HeartbeatRequest, client_id: str) -> pb.HeartbeatResponse:
        c = self._client(client_id)
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
        c.client_type = s.client_type
        c.language = pb.Language.Name(s.user_agent.language) if s.user_agent.language in pb.Language.values() else ""
        c.version = s.user_agent.version
        out = pb.Settings()
        out.CopyFrom(s)
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
            out.subscription.fifo = False
            if not sub.HasField("receive_batch_size"):
                out.subscription.receive_batch_size = MAX_BATCH
            if not sub.HasField("long_polling_timeout"):
                out.subscription.long_polling_timeout.FromSeconds(int(DEFAULT_POLL_S))
            out.backoff_policy.max_attempts = self._max_attempts(c.group)
            out.backoff_policy.customized_backoff.next.add().FromSeconds(1)
        return pb.TelemetryCommand(status=OK, settings=out)

    def _max_attempts(self, group: str) -> int:
        gcfg = self.broker.get_group(group) if group else None
        return (gcfg.retry_max_times if gcfg is not None else 16) + 1

    # ------------------------------------------------------------------ send

    async def send_message(self, req: pb.SendMessageRequest) -> pb.SendMessageResponse:
        if not req.messages:
            return pb.SendMessageResponse(status=status(pb.BAD_REQUEST, "the request holds no message"))
        entries = [await self._send_one(m) for m in req.messages]
        first = entries[0].status
        whole = first if all(e.status.code == first.code for e in entries) else status(pb.MULTIPLE_RESULTS, "see entries")
        return pb.SendMessageResponse(status=whole, entries=entries)

    async def _send_one(self, m: pb.Message) -> pb.SendResultEntry:
        try:
            if m.system_properties.message_type == pb.TRANSACTION and self.transactions is None:
                raise WireError(pb.UNSUPPORTED, "transactional messages need the broker's remoting listener "
                                                "(--broker-port not 0), whose transaction service checks them")
            if m.system_properties.HasField("lite_topic"):
                raise WireError(pb.UNSUPPORTED, "lite topics are not supported yet (docs/CLIENTS.md)")
            msg, _ = wire.to_store(m)
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
            await self._end_transaction(req)
        except WireError as e:
            return pb.EndTransactionResponse(status=status(e.code, str(e)))
        return pb.EndTransactionResponse(status=OK)

    async def _end_transaction(self, req: pb.EndTransactionRequest) -> None:
        if self.transactions is None:
            raise WireError(pb.UNSUPPORTED, "this broker runs no transaction service (--broker-port 0)")
        if req.resolution == pb.TRANSACTION_RESOLUTION_UNSPECIFIED:
            await trio.lowlevel.checkpoint()  # unknown: the half stays and is checked again
            return
        try:
            _, log_offset = parse_offset_msg_id(req.transaction_id)
        except ValueError:
            raise WireError(pb.INVALID_TRANSACTION_ID, f"transaction id {req.transaction_id[:60]!r} is not one "
                                                       f"this broker issued") from None
        raw = await self.broker.read_at(log_offset)
        try:
            half = decode_message(raw) if raw is not None else None
        except MessageFormatError:
            half = None
        if half is None or half.topic != TRANS_HALF_TOPIC:
            raise WireError(pb.INVALID_TRANSACTION_ID, f"no half message at transaction id {req.transaction_id}")
        if half.properties.get(PROPERTY_UNIQ_KEY) != req.message_id:
            raise WireError(pb.INVALID_TRANSACTION_ID, f"transaction {req.transaction_id} is not the one of "
                                                       f"message {req.message_id}")
        if half.properties.get(wire.REAL_TOPIC) != req.topic.name:
            raise WireError(pb.INVALID_TRANSACTION_ID, f"transaction {req.transaction_id} is not in topic "
                                                       f"{req.topic.name}")
        commit = req.resolution == pb.COMMIT
        if req.source == pb.SOURCE_SERVER_CHECK or not commit:
            log.info("5.x producer %s transaction %s%s", "commits" if commit else "rolls back", req.message_id,
                     " after a check" if req.source == pb.SOURCE_SERVER_CHECK else "")
        result = await self.transactions.end_transaction(half, commit)
        if result is not None and not result.ok:
            raise WireError(pb.INTERNAL_SERVER_ERROR, result.remark or result.status.name)

    # ------------------------------------------------------------------ pop consumption

    async def receive_message(self, req: pb.ReceiveMessageRequest, time_left: float | None) -> list[pb.ReceiveMessageResponse]:
        try:
            return await self._receive(req, time_left)
        except WireError as e:
            return [pb.ReceiveMessageResponse(status=status(e.code, str(e)))]

    async def _receive(self, req: pb.ReceiveMessageRequest, time_left: float | None) -> list[pb.ReceiveMessageResponse]:
        group, topic = req.group.name, req.message_queue.topic.name
        if not group:
            raise WireError(pb.ILLEGAL_CONSUMER_GROUP, "the request names no consumer group")
        cfg = await self._topic(topic, create=False)
        if self.broker.groups.get_or_create(group) is None:
            raise WireError(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {group} does not exist")
        invisible_s = _seconds(req.invisible_duration) if req.HasField("invisible_duration") else 30.0
        if not MIN_INVISIBLE_S <= invisible_s <= MAX_INVISIBLE_S:
            raise WireError(pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_s:g} s is outside "
                                                       f"{MIN_INVISIBLE_S:g}..{MAX_INVISIBLE_S:g} s")
        poll_s = _seconds(req.long_polling_timeout) if req.HasField("long_polling_timeout") else DEFAULT_POLL_S
        if time_left is not None:
            poll_s = min(poll_s, time_left - POLL_MARGIN_S)
        batch = max(1, min(req.batch_size or MAX_BATCH, MAX_BATCH))
        expr = req.filter_expression
        expression = expr.expression or "*"
        expression_type = "SQL92" if expr.type == pb.SQL else "TAG"
        deadline = trio.current_time() + max(0.0, poll_s)
        while True:
            wake = self._arrived.setdefault(topic, trio.Event())
            out = await self._take(group, topic, cfg.read_queue_nums, batch, invisible_s, expression, expression_type)
            now = trio.current_time()
            if out or now >= deadline or self.closing.is_set():
                break
            due = self.pop.next_due(group, topic)
            with trio.move_on_at(min(deadline, due if due is not None else math.inf)):
                async with trio.open_nursery() as waits:
                    waits.start_soon(_set_then_cancel, wake, waits.cancel_scope)
                    waits.start_soon(_set_then_cancel, self.closing, waits.cancel_scope)
        if not out:
            return [pb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))]
        stamp = pb.ReceiveMessageResponse()
        stamp.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
        return ([pb.ReceiveMessageResponse(status=OK)] + [pb.ReceiveMessageResponse(message=m) for m in out] + [stamp])

    def _pop_queue(self, group: str, topic: str, queue_id: int) -> PopQueue:
        start = self.broker.query_offset(group, topic, queue_id)
        if start is None:
            start = self.broker.min_offset(topic, queue_id)
        return self.pop.queue(group, topic, queue_id, start)

    async def _take(self, group: str, topic: str, queues: int, batch: int, invisible_s: float,
                    expression: str, expression_type: str) -> list[pb.Message]:
        now = trio.current_time()
        invisible_ms = int(invisible_s * 1000)
        out: list[pb.Message] = []
        states = [self._pop_queue(group, topic, qid) for qid in range(queues)]
        for q in states:  # redeliveries first: they waited longest
            for f in q.due(now):
                if len(out) >= batch:
                    break
                sm = await self._read_one(topic, q.queue_id, f.offset)
                if sm is None or f.attempt >= self._max_attempts(group):
                    del q.inflight[f.offset]
                    if sm is not None:
                        await self._to_dlq(group, sm, f.attempt)
                    continue
                f2, handle = self.pop.hand_out(q, f.offset, now, invisible_s)
                out.append(wire.from_store(sm, receipt_handle=handle, attempt=f2.attempt, invisible_ms=invisible_ms))
        self._rr += 1
        for i in range(queues):
            if len(out) >= batch:
                break
            q = states[(self._rr + i) % queues]
            res = await self.broker.pull(group, topic, q.queue_id, q.next_offset, batch - len(out), expression,
                                         expression_type=expression_type)
            if res.status is PullStatus.SUBSCRIPTION_PARSE_FAILED or (
                    res.status is PullStatus.SYSTEM_ERROR and expression_type == "SQL92"):
                raise WireError(pb.ILLEGAL_FILTER_EXPRESSION, res.remark or "bad filter expression")
            if res.status is PullStatus.FOUND:
                for sm in res.messages():
                    _, handle = self.pop.hand_out(q, sm.queue_offset, now, invisible_s)
                    out.append(wire.from_store(sm, receipt_handle=handle, attempt=1, invisible_ms=invisible_ms))
                q.next_offset = max(q.next_offset, res.next_begin_offset)
            elif res.status in (PullStatus.PULL_RETRY_IMMEDIATELY, PullStatus.PULL_OFFSET_MOVED):
                q.next_offset = max(q.next_offset, res.next_begin_offset) if res.status is not PullStatus.PULL_OFFSET_MOVED \
                    else res.next_begin_offset
            self._commit(group, topic, q)
        return out

    def _commit(self, group: str, topic: str, q: PopQueue) -> None:
        committed = q.committed()
        if committed != self.broker.query_offset(group, topic, q.queue_id):
            self.broker.commit_offset(group, topic, q.queue_id, committed)

    async def _read_one(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        res = await self.broker.read_queue(topic, queue_id, offset, 1)
        msgs = res.messages() if res.status is PullStatus.FOUND else []
        return msgs[0] if msgs and msgs[0].queue_offset == offset else None

    async def _to_dlq(self, group: str, sm: StoredMessage, attempts: int) -> None:
        """A message delivered ``attempts`` times and never acked: a copy to ``%DLQ%group``."""
        dlq = dlq_topic(group)
        await self.broker.ensure_topic(dlq, queue_nums=1)
        msg = sm.to_message()
        msg.topic, msg.queue_id = dlq, 0
        msg.properties = {**sm.properties, "RETRY_TOPIC": sm.topic, "ORIGIN_MESSAGE_ID": sm.msg_id}
        msg.reconsume_times = attempts
        result = await self.broker.send(msg, 0, internal=True)
        if result.ok:
            log.info("message %s of %s went to %s after %d deliveries", sm.properties.get(PROPERTY_UNIQ_KEY),
                     sm.topic, dlq, attempts)
        else:
            log.warning("message %s of %s could not go to %s: %s", sm.properties.get(PROPERTY_UNIQ_KEY), sm.topic,
                        dlq, result.remark or result.status.name)

    async def ack_message(self, req: pb.AckMessageRequest) -> pb.AckMessageResponse:
        await trio.lowlevel.checkpoint()
        group, topic = req.group.name, req.topic.name
        entries = []
        for e in req.entries:
            try:
                q = self.pop.ack(group, topic, e.receipt_handle)
            except ReceiptError as err:
                st = status(pb.INVALID_RECEIPT_HANDLE, str(err))
            else:
                self._commit(group, topic, q)
                st = OK
            entries.append(pb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=st))
        if not entries:
            return pb.AckMessageResponse(status=status(pb.BAD_REQUEST, "the request holds no entry"))
        first = entries[0].status
        whole = first if all(x.status.code == first.code for x in entries) else status(pb.MULTIPLE_RESULTS, "see entries")
        return pb.AckMessageResponse(status=whole, entries=entries)

    async def change_invisible_duration(self, req: pb.ChangeInvisibleDurationRequest) -> pb.ChangeInvisibleDurationResponse:
        await trio.lowlevel.checkpoint()
        seconds = _seconds(req.invisible_duration)
        if not 0 <= seconds <= MAX_INVISIBLE_S:
            return pb.ChangeInvisibleDurationResponse(status=status(
                pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {seconds:g} s is outside 0..{MAX_INVISIBLE_S:g} s"))
        try:
            handle = self.pop.change_invisible(req.group.name, req.topic.name, req.receipt_handle,
                                               trio.current_time(), seconds)
        except ReceiptError as err:
            return pb.ChangeInvisibleDurationResponse(status=status(pb.INVALID_RECEIPT_HANDLE, str(err)))
        ev = self._arrived.pop(req.topic.name, None)  # a waiting receive recomputes when to look again
        if ev is not None:
            ev.set()
        return pb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)


class TelemetryChannel:
    """One client's Telemetry stream, as the transaction checker sees a producer:
    ``closed`` and ``send_oneway(command)``; the remoting CHECK_TRANSACTION_STATE
    command becomes a RecoverOrphanedTransactionCommand, put on the stream's
    queue (``push``, thread-safe) that the gRPC thread writes from."""

    def __init__(self, push) -> None:
        self.push = push
        self.closed = False

    def send_oneway(self, command) -> None:
        if self.closed:
            return
        half = decode_messages(command.body)[0]
        recover = pb.RecoverOrphanedTransactionCommand(
            message=wire.orphan_from_store(half), transaction_id=command.ext_fields.get("offsetMsgId", ""))
        self.push(pb.TelemetryCommand(recover_orphaned_transaction_command=recover))


async def _set_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _seconds(d) -> float:
    return d.seconds + d.nanos / 1e9
