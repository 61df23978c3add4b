"""core/client: a RocketMQ 4.x client in Python, trio-native, with a blocking facade.

It speaks the remoting protocol like the Java client 4.9 (language PYTHON,
version 405): routes from the name servers (refreshed every 30 s; a new
topic is created from the TBW102 route on its first send), heartbeats to
every broker every 30 s, UNREGISTER_CLIENT on shutdown, SEND_MESSAGE_V2
(310) for single sends and SEND_BATCH_MESSAGE (320) for batches.

trio-native API::

    import trio
    from core.client import (Message, open_producer, open_push_consumer, open_pull_consumer,
                             select_by_hash, ConsumeConcurrentlyStatus, ConsumeFromWhere)

    async def main():
        async with open_producer("127.0.0.1:9876", "my-producer-group") as producer:
            r = await producer.send(Message("Orders", b"hello", tags="TagA", keys=["order-1"]))
            print(r.status, r.msg_id, r.offset_msg_id, r.queue, r.queue_offset)
            fut = producer.send_async(Message("Orders", b"later"), lambda result, error: ...)
            await fut.result()
            await producer.send_oneway(Message("Orders", b"fire and forget"))
            await producer.send(Message("Orders", b"step 1"), selector=select_by_hash, arg=order_id)
            await producer.send_orderly(Message("Orders", b"step 2"), sharding_key=order_id)
            await producer.send_batch([Message("Orders", b"a"), Message("Orders", b"b")])
            await producer.send(Message("Orders", b"in 10 s", delay_level=3))

        async def listener(msgs, ctx):          # or a plain function
            for m in msgs:
                print(m.topic, m.queue, m.queue_offset, m.msg_id, m.body)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS   # RECONSUME_LATER -> %RETRY%, then %DLQ%

        async with open_push_consumer("127.0.0.1:9876", "my-group", {"Orders": "TagA || TagC"}, listener,
                                      consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as consumer:
            await trio.sleep_forever()

        # SQL92 on message properties (broker: enablePropertyFilter = true):
        #   {"Orders": MessageSelector.by_sql("amount > 100 AND region IN ('eu', 'us')")}
        # ordered: orderly=True, listener returns ConsumeOrderlyStatus.SUCCESS or SUSPEND_CURRENT_QUEUE_A_MOMENT
        # broadcasting: message_model=MessageModel.BROADCASTING (offsets in a local file, offset_dir=...)

        async with open_pull_consumer("127.0.0.1:9876", "my-pull-group", {"Orders": "*"}) as pull:
            msgs = await pull.poll(timeout=1.0)     # or: await pull.assign(await pull.fetch_queues("Orders"))
            await pull.commit()                     # auto-committed every 5 s anyway

    trio.run(main)

Blocking facade (a trio loop in a background thread; listeners run in worker threads)::

    from core.client import Producer, PushConsumer, PullConsumer, Message

    producer = Producer("127.0.0.1:9876", "my-producer-group").start()
    result = producer.send(Message("Orders", b"hello"))
    future = producer.send_async(Message("Orders", b"x"), callback=lambda r, e: print(r, e))
    producer.send_oneway(Message("Orders", b"y"))
    producer.shutdown()

    def on_messages(msgs, ctx):
        for m in msgs:
            print(m.body)
    consumer = PushConsumer("127.0.0.1:9876", "my-group").subscribe("Orders", "*", on_messages).start()
    ...
    consumer.shutdown()

    with PullConsumer("127.0.0.1:9876", "g2").subscribe("Orders") as pull:
        print(pull.poll(1.0))

Options (keywords of the constructors and ``open_*``): producers take
``send_timeout`` (3 s), ``retry_times`` (2), ``default_topic_queue_nums``
(4), ``compress_over`` (4096), ``instance_name``. Consumers take
``message_model``, ``consume_from``, ``consume_timestamp`` (ms),
``pull_batch_size`` (32), ``rebalance_interval`` (20 s),
``persist_interval`` (5 s), ``offset_dir``, ``instance_name``; push
consumers also ``orderly``, ``consume_concurrency`` (20),
``consume_batch_size`` (1), ``max_reconsume_times`` (16; unlimited when
orderly), ``suspend_current_queue_ms`` (1000), ``lock_interval`` (20 s).

Transactions (the local transaction and the message commit together)::

    class Listener:
        def execute_local_transaction(self, msg, arg):   # runs after the half is stored
            return LocalTransactionState.COMMIT_MESSAGE   # or ROLLBACK_MESSAGE / UNKNOW
        def check_local_transaction(self, msg):           # the broker asks again later
            return LocalTransactionState.COMMIT_MESSAGE

    with TransactionProducer("127.0.0.1:9876", "tx-group", Listener()) as tx:
        tx.send_message_in_transaction(Message("Payments", b"debit 42"), arg=None)

Errors: `MQClientError` (no route, bad message, every retry failed) and its
subclass `MQBrokerError` (``.code``, ``.remark``: the broker said no).
"""

from core.client.api import ClientApi, MQBrokerError, MQClientError, open_client_api
from core.client.ids import UniqKeyFactory
from core.client.instance import parse_namesrv
from core.client.route import TopicRoute
from core.client.blocking import Producer, PullConsumer, PushConsumer
from core.client.message_selector import MessageSelector
from core.client.model import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    SendResult,
    SendStatus,
)
from core.client.producer import AsyncProducer, SendFuture, open_producer
from core.client.pull_consumer import AsyncPullConsumer, open_pull_consumer
from core.client.push_consumer import AsyncPushConsumer, ConsumeContext, open_push_consumer
from core.client.selector import select_by_hash, select_by_sharding_key, select_random
from core.client.transaction import (
    AsyncTransactionProducer, LocalTransactionState, TransactionListener, TransactionProducer,
    TransactionSendResult, open_transaction_producer,
)

__all__ = [
    "ClientApi",
    "TopicRoute",
    "UniqKeyFactory",
    "open_client_api",
    "parse_namesrv",
    "AsyncProducer",
    "AsyncTransactionProducer",
    "LocalTransactionState",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "open_transaction_producer",
    "AsyncPullConsumer",
    "AsyncPushConsumer",
    "ConsumeConcurrentlyStatus",
    "ConsumeContext",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "SendFuture",
    "SendResult",
    "SendStatus",
    "open_producer",
    "open_pull_consumer",
    "open_push_consumer",
    "select_by_hash",
    "select_by_sharding_key",
    "select_random",
]
