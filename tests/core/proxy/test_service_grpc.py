"""The MessagingService over a real gRPC port, in-process: a broker in a temp dir,
`run_grpc` on port 0, a plain grpcio channel (from a thread) as the client.

Bad input gets its status with one line and the server keeps serving;
long polling wakes at a send; a message never acked goes to the DLQ after
the group's maximum deliveries."""

from __future__ import annotations

import time
from functools import partial

import grpc
import pytest
import trio

from core.broker import BrokerConfig, dlq_topic, open_broker
from core.proxy import pb, run_grpc, wire
from core.proxy.service import MessagingService, TelemetryChannel
from core.store import StoreConfig
from core.transactions import TransactionService

SERVICE = "/apache.rocketmq.v2.MessagingService/"


class Stub:
    def __init__(self, port: int) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")

    def unary(self, method: str, req, resp_cls, timeout: float = 10):
        call = self.channel.unary_unary(SERVICE + method, request_serializer=_bytes,
                                        response_deserializer=resp_cls.FromString)
        return call(req, timeout=timeout, metadata=[("x-mq-client-id", "test-client")])

    def receive(self, req, timeout: float = 20) -> list:
        call = self.channel.unary_stream(SERVICE + "ReceiveMessage", request_serializer=_bytes,
                                         response_deserializer=pb.ReceiveMessageResponse.FromString)
        return list(call(req, timeout=timeout))


def _bytes(m) -> bytes:
    return m if isinstance(m, bytes) else m.SerializeToString()


@pytest.fixture
async def stub(tmp_path):
    store = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=1 << 20,
                        mapped_file_size_consume_queue=20 * 1024, max_hash_slot_num=1024, max_index_num=8192)
    async with open_broker(BrokerConfig(default_topic_queue_nums=2), store) as broker:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(run_grpc, broker, "127.0.0.1", 0))
            s = Stub(port)
            s.broker = broker
            yield s
            s.channel.close()
            nursery.cancel_scope.cancel()


def send_req(topic: str, body: bytes, msg_id: str = "01TEST") -> pb.SendMessageRequest:
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = msg_id
    return pb.SendMessageRequest(messages=[m])


def receive_req(topic: str, group: str, *, invisible_s: float = 30, poll_s: float = 5) -> pb.ReceiveMessageRequest:
    r = pb.ReceiveMessageRequest(batch_size=16)
    r.group.name = group
    r.message_queue.topic.name = topic
    r.invisible_duration.FromMilliseconds(int(invisible_s * 1000))
    r.long_polling_timeout.FromMilliseconds(int(poll_s * 1000))
    return r


def in_thread(fn, *args, **kw):
    return trio.to_thread.run_sync(partial(fn, *args, **kw))


async def test_bad_requests_get_their_status_in_one_line_and_the_server_keeps_serving(stub, caplog):
    with pytest.raises(grpc.RpcError) as e:  # not a protobuf message at all
        await in_thread(stub.unary, "SendMessage", b"\xff\xff\xff", pb.SendMessageResponse)
    assert e.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT)
    (logged,) = [r for r in caplog.records if r.name == "grpc._common"]
    assert logged.exc_info is None and "Wire format was corrupt" in logged.getMessage()
    with pytest.raises(grpc.RpcError) as e:
        await in_thread(stub.unary, "RecallMessage", b"", pb.SendMessageResponse)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED

    cases = [
        ("SendMessage", pb.SendMessageRequest(), pb.SendMessageResponse, pb.BAD_REQUEST),
        ("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="bad topic!")), pb.QueryRouteResponse,
         pb.ILLEGAL_TOPIC),
        ("AckMessage", pb.AckMessageRequest(group=pb.Resource(name="G"), topic=pb.Resource(name="T"),
                                            entries=[pb.AckMessageEntry(message_id="x", receipt_handle="junk")]),
         pb.AckMessageResponse, pb.INVALID_RECEIPT_HANDLE),
    ]
    for method, req, resp_cls, code in cases:
        resp = await in_thread(stub.unary, method, req, resp_cls)
        assert resp.status.code == code, (method, resp)
        assert resp.status.message and "\n" not in resp.status.message
    (answer,) = await in_thread(stub.receive, receive_req("NoSuchTopic", "G"))
    assert answer.status.code == pb.TOPIC_NOT_FOUND and "NoSuchTopic" in answer.status.message
    await in_thread(stub.unary, "QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="T")), pb.QueryRouteResponse)
    entry = (await in_thread(stub.unary, "SendMessage", send_req("T", b""), pb.SendMessageResponse)).entries[0]
    assert entry.status.code == pb.MESSAGE_BODY_EMPTY
    half = send_req("T", b"half")
    half.messages[0].system_properties.message_type = pb.TRANSACTION
    entry = (await in_thread(stub.unary, "SendMessage", half, pb.SendMessageResponse)).entries[0]
    assert entry.status.code == pb.UNSUPPORTED and "--broker-port" in entry.status.message  # no transaction service here
    end = pb.EndTransactionRequest(topic=pb.Resource(name="T"), message_id="x", transaction_id="nothex",
                                   resolution=pb.COMMIT)
    assert (await in_thread(stub.unary, "EndTransaction", end, pb.EndTransactionResponse)).status.code == pb.UNSUPPORTED
    (answer,) = await in_thread(stub.receive, receive_req("T", "G", invisible_s=0.2))
    assert answer.status.code == pb.ILLEGAL_INVISIBLE_TIME and "0.2 s" in answer.status.message
    entry = (await in_thread(stub.unary, "SendMessage", send_req("rmq_sys_pop_state", b"forged"),
                             pb.SendMessageResponse)).entries[0]
    assert entry.status.code == pb.ILLEGAL_TOPIC and "system topic" in entry.status.message
    sync = pb.SyncLiteSubscriptionRequest(topic=pb.Resource(name="NoSuchTopic"), group=pb.Resource(name="G"),
                                          lite_topic_set=["a"])
    assert (await in_thread(stub.unary, "SyncLiteSubscription", sync,
                            pb.SyncLiteSubscriptionResponse)).status.code == pb.TOPIC_NOT_FOUND

    resp = await in_thread(stub.unary, "SendMessage", send_req("T", b"still serving"), pb.SendMessageResponse)
    assert resp.status.code == pb.OK and resp.entries[0].message_id == "01TEST"


async def test_a_waiting_receive_wakes_when_a_message_arrives(stub):
    await in_thread(stub.unary, "QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="Wake")),
                    pb.QueryRouteResponse)
    async with trio.open_nursery() as nursery:
        result = {}

        async def receive():
            t = time.monotonic()
            result["answers"] = await in_thread(stub.receive, receive_req("Wake", "G", poll_s=15))
            result["waited"] = time.monotonic() - t

        nursery.start_soon(receive)
        await trio.sleep(0.5)  # let the receive start waiting: nothing to give yet
        await in_thread(stub.unary, "SendMessage", send_req("Wake", b"hello"), pb.SendMessageResponse)
    status, message, stamp = result["answers"]
    assert status.status.code == pb.OK and message.message.body == b"hello"
    assert stamp.HasField("delivery_timestamp")
    assert result["waited"] < 10  # woken by the send, not by the end of the 15 s poll


async def test_a_message_never_acked_goes_to_the_dead_letter_queue_after_the_group_maximum(stub):
    stub.broker.groups.get_or_create("Fragile")
    stub.broker.groups.update("Fragile", retry_max_times=1)  # at most 2 deliveries
    await in_thread(stub.unary, "SendMessage", send_req("Dlq", b"poison", "01POISON"), pb.SendMessageResponse)
    attempts = []
    for _ in range(2):
        answers = await in_thread(stub.receive, receive_req("Dlq", "Fragile", invisible_s=1, poll_s=5))
        attempts += [a.message.system_properties.delivery_attempt for a in answers if a.HasField("message")]
    assert attempts == [1, 2]
    # the third time it comes due it is not delivered: it goes to %DLQ%Fragile
    (answer,) = await in_thread(stub.receive, receive_req("Dlq", "Fragile", invisible_s=1, poll_s=3))
    assert answer.status.code == pb.MESSAGE_NOT_FOUND
    dead = (await stub.broker.read_queue(dlq_topic("Fragile"), 0, 0)).messages()
    assert [(m.body, m.properties["UNIQ_KEY"], m.reconsume_times) for m in dead] == [(b"poison", "01POISON", 2)]
    assert stub.broker.query_offset("Fragile", "Dlq", 0) is not None


async def test_forward_to_dead_letter_queue_moves_the_message_at_once_and_ends_its_delivery(stub):
    await in_thread(stub.unary, "SendMessage", send_req("Fwd", b"give up", "01GIVEUP"), pb.SendMessageResponse)
    answers = await in_thread(stub.receive, receive_req("Fwd", "G", invisible_s=1, poll_s=5))
    (m,) = [a.message for a in answers if a.HasField("message")]
    req = pb.ForwardMessageToDeadLetterQueueRequest(group=pb.Resource(name="G"), topic=pb.Resource(name="Fwd"),
                                                    receipt_handle=m.system_properties.receipt_handle,
                                                    message_id=m.system_properties.message_id, delivery_attempt=1,
                                                    max_delivery_attempts=1)
    resp = await in_thread(stub.unary, "ForwardMessageToDeadLetterQueue", req, pb.ForwardMessageToDeadLetterQueueResponse)
    assert resp.status.code == pb.OK
    again = await in_thread(stub.unary, "ForwardMessageToDeadLetterQueue", req, pb.ForwardMessageToDeadLetterQueueResponse)
    assert again.status.code == pb.INVALID_RECEIPT_HANDLE  # done once: the handle is spent
    dead = (await stub.broker.read_queue(dlq_topic("G"), 0, 0)).messages()
    assert [(d.body, d.properties["UNIQ_KEY"]) for d in dead] == [(b"give up", "01GIVEUP")]
    # not delivered again once its invisible time is over
    (answer,) = await in_thread(stub.receive, receive_req("Fwd", "G", invisible_s=1, poll_s=2.5))
    assert answer.status.code == pb.MESSAGE_NOT_FOUND


async def test_receives_of_one_group_at_once_never_get_the_same_message(stub):
    """Called on the service directly, in the trio loop: concurrent receives interleave at
    every checkpoint of the broker's reads, the worst case for handing one offset twice."""
    service = MessagingService(stub.broker, "127.0.0.1", 0)
    for i in range(40):
        await service.send_message(send_req("Many", f"m{i}".encode(), f"01M{i:03d}"))
    got: list[list[str]] = [[] for _ in range(4)]

    async def receive(n: int) -> None:
        answers = await service.receive_message(receive_req("Many", "Shared", poll_s=0), None)
        got[n] = [a.message.system_properties.message_id for a in answers if a.HasField("message")]

    async with trio.open_nursery() as nursery:
        for n in range(4):
            nursery.start_soon(receive, n)
    ids = [i for batch in got for i in batch]
    assert len(ids) == len(set(ids)), got  # no message handed to two receives
    assert sorted(ids) == [f"01M{i:03d}" for i in range(40)]  # and, between them, every one (32 a batch)
    service.close()


async def test_a_tag_filter_gives_only_matching_messages_and_the_others_count_as_done(stub):
    for i, tag in enumerate(["TagA", "TagB", "TagA", "TagC"]):
        req = send_req("Tagged", f"{tag}-{i}".encode(), f"01TAG{i}")
        req.messages[0].system_properties.tag = tag
        await in_thread(stub.unary, "SendMessage", req, pb.SendMessageResponse)
    queues = stub.broker.get_topic("Tagged").read_queue_nums
    r = receive_req("Tagged", "OnlyA", poll_s=1)
    r.filter_expression.type, r.filter_expression.expression = pb.TAG, "TagA || TagC"
    answers = await in_thread(stub.receive, r)
    msgs = [a.message for a in answers if a.HasField("message")]
    assert sorted(m.body for m in msgs) == [b"TagA-0", b"TagA-2", b"TagC-3"]
    ack = pb.AckMessageRequest(group=pb.Resource(name="OnlyA"), topic=pb.Resource(name="Tagged"), entries=[
        pb.AckMessageEntry(message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle)
        for m in msgs])
    assert (await in_thread(stub.unary, "AckMessage", ack, pb.AckMessageResponse)).status.code == pb.OK
    # TagB was skipped, not left behind: the group's offsets are at the end of every queue
    assert all(stub.broker.query_offset("OnlyA", "Tagged", q) == stub.broker.max_offset("Tagged", q)
               for q in range(queues))


async def test_settings_answer_completes_the_client_s_and_turns_client_metrics_off(stub):
    service = MessagingService(stub.broker, "127.0.0.1", 0)
    s = pb.Settings(client_type=pb.SIMPLE_CONSUMER)
    s.subscription.group.name = "G"
    s.subscription.subscriptions.add().topic.name = "T"
    s.metric.on = True
    s.user_agent.language = pb.PYTHON
    answer = await service.telemetry(pb.TelemetryCommand(settings=s), "client-1")
    assert answer.status.code == pb.OK and not answer.settings.metric.on
    assert answer.settings.backoff_policy.max_attempts == 17  # retryMaxTimes 16 + 1
    assert answer.settings.subscription.receive_batch_size == 32
    assert service.clients["client-1"].language == "PYTHON" and service.clients["client-1"].topics == {"T"}
    p = pb.Settings(client_type=pb.PRODUCER)
    p.publishing.topics.add().name = "T"
    answer = await service.telemetry(pb.TelemetryCommand(settings=p), "client-2")
    assert answer.settings.publishing.max_body_size == stub.broker.config.max_message_size
    assert await service.telemetry(pb.TelemetryCommand(thread_stack_trace=pb.ThreadStackTrace(nonce="n")), "c") is None
    service.close()


async def test_a_fifo_group_gets_each_queue_in_order_one_batch_at_a_time(stub):
    """consumeMessageOrderly: nothing new from a queue while a message of it is out, and an
    unacked message comes back before anything after it; a normal group is not held back."""
    for i in range(3):
        req = send_req("Fifo", f"g1-{i}".encode(), f"01FIFO{i}")
        req.messages[0].system_properties.message_group = "g1"
        await in_thread(stub.unary, "SendMessage", req, pb.SendMessageResponse)
    stub.broker.groups.get_or_create("Ordered")
    stub.broker.groups.update("Ordered", consume_message_orderly=True)

    async def receive(group: str, batch: int, invisible_s: float = 30, poll_s: float = 0.5) -> list:
        r = receive_req("Fifo", group, invisible_s=invisible_s, poll_s=poll_s)
        r.batch_size = batch
        return [a.message for a in await in_thread(stub.receive, r) if a.HasField("message")]

    async def ack(group: str, m) -> None:
        req = pb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name="Fifo"), entries=[
            pb.AckMessageEntry(message_id=m.system_properties.message_id,
                               receipt_handle=m.system_properties.receipt_handle)])
        assert (await in_thread(stub.unary, "AckMessage", req, pb.AckMessageResponse)).status.code == pb.OK

    (first,) = await receive("Ordered", 1, invisible_s=1)
    assert first.body == b"g1-0"
    assert await receive("Ordered", 1) == []          # g1-1 waits while g1-0 is out
    (again,) = await receive("Ordered", 1, poll_s=3)  # not acked: g1-0 again, before g1-1
    assert (again.body, again.system_properties.delivery_attempt) == (b"g1-0", 2)
    await ack("Ordered", again)
    assert [m.body for m in await receive("Ordered", 16)] == [b"g1-1", b"g1-2"]
    # a normal group is not held back
    assert [m.body for m in await receive("Plain", 1)] == [b"g1-0"]
    assert [m.body for m in await receive("Plain", 1)] == [b"g1-1"]
    service = MessagingService(stub.broker, "127.0.0.1", 0)
    s = pb.Settings(client_type=pb.SIMPLE_CONSUMER)
    s.subscription.group.name = "Ordered"
    assert (await service.telemetry(pb.TelemetryCommand(settings=s), "c")).settings.subscription.fifo
    service.close()


async def test_a_gzip_body_is_received_as_it_was_before_compression(stub):
    import gzip

    body = b"sensor reading " * 500
    req = send_req("Zipped", gzip.compress(body))
    req.messages[0].system_properties.body_encoding = pb.GZIP
    resp = await in_thread(stub.unary, "SendMessage", req, pb.SendMessageResponse)
    assert resp.status.code == pb.OK, resp
    answers = await in_thread(stub.receive, receive_req("Zipped", "G", poll_s=1))
    (got,) = [a.message for a in answers if a.HasField("message")]
    assert got.body == body and got.system_properties.body_encoding == pb.IDENTITY


async def test_a_telemetry_stream_without_settings_is_asked_about_the_topics_its_client_sends_transactions_to(stub):
    """Issue 17: after a broker restart the 5.x Python client reopens its stream but sends
    its settings on it only at its next sync (up to 300 s); its transactional sends say
    which topics its checker answers for."""
    transactions = TransactionService(stub.broker)
    transactions.install()
    service = MessagingService(stub.broker, "127.0.0.1", 0, transactions)
    group = wire.transaction_group("TxAgain")
    pushed = []
    channel = TelemetryChannel(pushed.append)
    service.attach("producer-1", channel)  # a stream, no settings on it
    await service.heartbeat(pb.HeartbeatRequest(client_type=pb.PRODUCER), "producer-1")
    assert service.producer_channels(group) == []  # which topics it produces is not known yet
    plain = await service.send_message(send_req("TxAgain", b"plain", "01PLAIN"), "producer-1")
    assert plain.status.code == pb.OK and service.producer_channels(group) == []  # not a transaction
    half = send_req("TxAgain", b"half", "01HALF")
    half.messages[0].system_properties.message_type = pb.TRANSACTION
    sent = await service.send_message(half, "producer-1")
    assert sent.status.code == pb.OK and sent.entries[0].transaction_id
    assert service.producer_channels(group) == [channel]
    assert service.producer_channels(wire.transaction_group("Other")) == []
    service.detach("producer-1", channel)
    assert service.producer_channels(group) == []
    service.close()
