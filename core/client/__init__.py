"""core/client: a trio-native RocketMQ 4.x client (placeholder docstring, expanded below)."""

from core.client.api import MQBrokerError, MQClientError
from core.client.blocking import Producer, PullConsumer, PushConsumer
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
from core.client.push_consumer import AsyncPushConsumer, ConsumeContext, open_push_consumer
from core.client.pull_consumer import AsyncPullConsumer, open_pull_consumer
from core.client.selector import select_by_hash, select_by_sharding_key, select_random
