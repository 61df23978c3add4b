"""core/events: EventBridge-style event buses, rules (filter patterns, transforms), targets, delivery.

What other rooms use::

    service = EventService(broker, namesrv_addrs, mqtt_publish=gateway_publish_or_None,
                           bus_queues=4, counts_interval=5.0)
    await nursery.start(service.run)           # loads the registry, starts rules and MQTT sources
    await service.create_bus({"name": "iot"}); await service.create_rule({...}); await service.create_source({...})
    await service.put_events("iot", events_from_http(headers, body))   # EventError: a 4xx with its reason
    service.set_enabled(bus, rule, False); service.delete_rule(bus, rule); service.rule_json(rule)
    compile_pattern(json) -> Pattern (.matches(event)); compile_transform(json) -> Transform (.apply(event))

Errors: `SpecError` / `PatternError` / `TransformError` (a definition that
cannot be accepted, message starting with the bad path), `EventError` (an
event that is no valid CloudEvent), `NotFound`, `Conflict`, `StoreRefused`
(the broker did not store it: try again).

Modules: ``pattern`` (the filter language), ``transform`` (the four
forms), ``envelope`` (CloudEvents in and out), ``model`` (buses, sources,
rules, targets from JSON), ``registry`` (their records in the store),
``targets`` (webhook, broker topic, MQTT), ``delivery`` (one rule's
consumer group, retries, dead letters), ``sources`` (the MQTT source),
``service`` (all of it for one broker). docs/EVENTS.md is the user's guide.
"""

from .envelope import MAX_BATCH, EventError, decode_event, encode_event, event_from_mqtt, events_from_http
from .model import Bus, Rule, Source, SpecError, Target, bus_topic, parse_bus, parse_rule, parse_source
from .pattern import Pattern, PatternError, compile_pattern
from .registry import EVENTS_META_TOPIC
from .service import Conflict, EventService, NotFound, StoreRefused
from .sources import topic_matches
from .transform import Payload, Transform, TransformError, compile_transform

__all__ = [
    "Bus", "Conflict", "EVENTS_META_TOPIC", "EventError", "EventService", "MAX_BATCH", "NotFound", "Pattern",
    "PatternError", "Payload", "Rule", "Source", "SpecError", "StoreRefused", "Target", "Transform",
    "TransformError", "bus_topic", "compile_pattern", "compile_transform", "decode_event", "encode_event",
    "event_from_mqtt", "events_from_http", "parse_bus", "parse_rule", "parse_source", "topic_matches",
]
