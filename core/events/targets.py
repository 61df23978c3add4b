"""Pushing one event to one target: an HTTP(S) webhook, a broker topic, an MQTT topic.

Rules kept here:
- `Targets.deliver` returns when the target took the event and raises
  `DeliveryFailed` (one line: what failed, where) otherwise; the caller
  retries (RocketMQ's retry levels) and dead-letters.
- Webhook: a POST through one shared httpx client (on trio), CloudEvents
  binary or structured mode (the SDK's HTTP binding), the target's extra
  headers, its own timeout; any 2xx is taken, anything else (status,
  timeout, refused connection) is a failure with that reason.
- Each target has its own `trio.CapacityLimiter` (``concurrency``): a slow
  webhook holds at most that many of its rule's deliveries, and other
  targets and rules never wait for it.
- Broker topic: stored through the in-process broker's normal send path,
  with the target's tag, KEYS from a JSONPath of the event, and the
  event's id, source, type and subject as ``CE_*`` properties.
- MQTT: through the gateway's publish path (``mqtt_publish``: mapped,
  stored, routed and retained like a device's PUBLISH). A process with no
  MQTT gateway fails such deliveries with that reason.
"""

from __future__ import annotations

from typing import Awaitable, Callable

import httpx
import trio

from core.broker import Broker
from core.store import Message

from .envelope import body_of, to_http
from .model import Target
from .transform import Payload, find_path, parse_path

__all__ = ["DeliveryFailed", "MqttPublish", "Targets", "ce_properties"]

# (mqtt topic, payload, qos, retain, content type) -> stored and routed, or raises
MqttPublish = Callable[[str, bytes, int, bool, str], Awaitable[None]]


class DeliveryFailed(Exception):
    """A target did not take an event; the message is the reason (one line)."""


def ce_properties(event: dict) -> dict[str, str]:
    props = {}
    for attr in ("id", "source", "type", "subject"):
        value = event.get(attr)
        if isinstance(value, str) and value:
            props[f"CE_{attr.upper()}"] = value[:512]
    return props


class Targets:
    """What deliveries use: the broker, one HTTP client, the gateway's publish (or None)."""

    def __init__(self, broker: Broker, http: httpx.AsyncClient, mqtt_publish: MqttPublish | None) -> None:
        self.broker = broker
        self.http = http
        self.mqtt_publish = mqtt_publish
        self._limiters: dict[int, trio.CapacityLimiter] = {}
        self._paths: dict[str, object] = {}

    def limiter(self, target: Target) -> trio.CapacityLimiter:
        lim = self._limiters.get(id(target))
        if lim is None:
            lim = self._limiters[id(target)] = trio.CapacityLimiter(target.options["concurrency"])
        return lim

    def forget(self, targets) -> None:
        for t in targets:
            self._limiters.pop(id(t), None)

    async def deliver(self, target: Target, event: dict, payload: Payload) -> None:
        async with self.limiter(target):
            if target.type == "http":
                await self._http(target.options, event, payload)
            elif target.type == "topic":
                await self._topic(target.options, event, payload)
            else:
                await self._mqtt(target.options, event, payload)

    async def _http(self, o: dict, event: dict, payload: Payload) -> None:
        headers, body = to_http(event, payload, o["mode"])
        headers = {**headers, **o["headers"]}
        try:
            r = await self.http.post(o["url"], content=body, headers=headers, timeout=o["timeout"])
        except httpx.TimeoutException:
            raise DeliveryFailed(f"webhook {o['url']}: no answer in {o['timeout']:g} s") from None
        except httpx.HTTPError as e:
            raise DeliveryFailed(f"webhook {o['url']}: {type(e).__name__}: {e}".strip()) from None
        if not 200 <= r.status_code < 300:
            reason = r.reason_phrase or httpx.codes.get_reason_phrase(r.status_code)
            raise DeliveryFailed(f"webhook {o['url']}: HTTP {r.status_code} {reason}".strip())

    async def _topic(self, o: dict, event: dict, payload: Payload) -> None:
        props = ce_properties(event)
        if o["tag"]:
            props["TAGS"] = o["tag"]
        if o["keys"]:
            expr = self._paths.get(o["keys"])
            if expr is None:
                expr = self._paths[o["keys"]] = parse_path(o["keys"], "keys")
            found = find_path(expr, event)
            if found is not None:
                values = found if isinstance(found, list) else [found]
                props["KEYS"] = " ".join(str(v).replace(" ", "_") for v in values)[:1024]
        result = await self.broker.send(Message(topic=o["topic"], body=body_of(event, payload), properties=props))
        if not result.ok:
            raise DeliveryFailed(f"topic {o['topic']}: {result.status.name} {result.remark or ''}".strip())

    async def _mqtt(self, o: dict, event: dict, payload: Payload) -> None:
        if self.mqtt_publish is None:
            raise DeliveryFailed(f"MQTT topic {o['topic']}: this process runs no MQTT gateway")
        content_type = "application/cloudevents+json" if payload.original else payload.content_type
        try:
            await self.mqtt_publish(o["topic"], body_of(event, payload), o["qos"], o["retain"], content_type)
        except Exception as e:  # noqa: BLE001 - the gateway's refusal becomes the reason
            raise DeliveryFailed(f"MQTT topic {o['topic']}: {e}") from None
