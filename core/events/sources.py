"""The MQTT event source: publishes on a topic filter become CloudEvents on a bus.

An MQTT topic ``a/b/c`` is stored in broker topic ``a`` with the full
topic in the ``mqttTopic`` property (ARCHITECTURE decision 3). A source
bound to the filter ``a/+/c`` therefore consumes broker topic ``a`` as the
push consumer group ``MQGATE_EVENTSOURCE_<name>``, keeps the messages
whose MQTT topic matches the filter, and stores each as a CloudEvent on
its bus (``envelope.event_from_mqtt``).

Rules kept here:
- At least once: a publish is acknowledged to the source's group only
  after its event is stored on the bus; a refused store retries it
  (RocketMQ's retry levels), so nothing the device got a PUBACK for is lost.
  The event id is the stored publish's message id, so a repeated
  conversion is recognisable downstream.
- The filter's first level is a plain name (checked by
  `model.parse_source`): the source reads exactly that broker topic, and
  starts at its end when the source is created (earlier publishes are not
  events).
- Messages without an MQTT topic (native sends to that topic) are skipped,
  and so are the publishes of event rules' own MQTT targets (client id
  ``$events``, `SERVER_CLIENT_ID`): a rule publishing under its source's
  filter does not feed itself forever.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

import trio

from core.broker import Broker, mqtt_level_to_topic
from core.client import ConsumeFromWhere, open_push_consumer
from core.store import PROPERTY_MQTT_TOPIC

from .delivery import until_stopped
from .envelope import event_from_mqtt
from .model import Source

log = logging.getLogger("mqgate.events")

__all__ = ["MqttSource", "topic_matches"]

# The client id the gateway stores on the publishes it makes for MQTT targets (its
# ``publish_from_server`` default), in the message property the gateway names it in.
SERVER_CLIENT_ID = "$events"
_CLIENT_ID_PROPERTY = "mqttClientId"

# (bus, events) -> stored, or raises
PutEvents = Callable[[str, list[dict]], Awaitable[list[str]]]


def topic_matches(flt: str, topic: str) -> bool:
    """MQTT 3.1.1 section 4.7 matching of a topic name against a filter (``+``, ``#``)."""
    f, t = flt.split("/"), topic.split("/")
    if t[0].startswith("$") and f[0] in ("+", "#"):
        return False
    for i, level in enumerate(f):
        if level == "#":
            return True
        if i >= len(t) or (level != "+" and level != t[i]):
            return False
    return len(f) == len(t)


def source_topic(source: Source) -> str:
    return mqtt_level_to_topic(source.first_level)


class MqttSource:
    """``await nursery.start(source.run)``; cancel its scope to stop it."""

    def __init__(self, source: Source, broker: Broker, namesrv: list[str], put: PutEvents,
                 *, consumer_options: dict | None = None) -> None:
        self.source = source
        self.broker = broker
        self.namesrv = namesrv
        self.put = put
        self.consumer_options = consumer_options or {}
        self.stop_requested = trio.Event()  # set: leave the group (offsets committed, unregistered)
        self.converted = 0

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        s = self.source
        async with open_push_consumer(self.namesrv, s.group, {source_topic(s): "*"}, self.listener,
                                      consume_batch_size=32, consume_from=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                                      **self.consumer_options) as consumer:
            task_status.started()
            await until_stopped(self.stop_requested, consumer, self.broker)

    async def listener(self, msgs, ctx) -> bool:
        s = self.source
        events = []
        for m in msgs:
            topic = m.properties.get(PROPERTY_MQTT_TOPIC)
            if topic and topic_matches(s.mqtt_topic, topic) and m.properties.get(_CLIENT_ID_PROPERTY) != SERVER_CLIENT_ID:
                events.append(event_from_mqtt(s.name, s.type, topic, m.body, m.msg_id))
        if not events:
            return True
        try:
            await self.put(s.bus, events)
        except Exception as e:  # noqa: BLE001 - retried through RocketMQ's retry levels
            log.warning("event source %s: %d event(s) not stored on bus %s (retried later): %s",
                        s.name, len(events), s.bus, e)
            return False
        self.converted += len(events)
        return True
