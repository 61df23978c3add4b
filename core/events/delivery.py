"""One rule's delivery: a RocketMQ consumer group on its bus topic, retries and dead letters.

Rules kept here:
- A rule consumes the bus topic as the push consumer group
  ``MQGATE_EVENTRULE_<bus>_<rule>`` (``core.client``, over the remoting
  protocol like any client), so its progress is the group's committed
  offsets and its retries are RocketMQ's: a failed event goes back
  (CONSUMER_SEND_MSG_BACK) to ``%RETRY%<group>`` and comes again after
  delay level ``3 + attempts`` of the broker's ``messageDelayLevel``.
- An event is acknowledged only when every target took it, or when it is
  dead-lettered: after ``maxRetries`` retries it is stored in the rule's
  dead-letter topic (the original event as body; the reason in the
  ``EVENT_FAILURE_REASON`` property, with ``EVENT_RULE`` and
  ``EVENT_ATTEMPTS``), then acknowledged. If that store fails the event is
  retried again, never dropped.
- Targets that already took an event are remembered (by message id, in a
  bounded map) and skipped on its retries in this process, so a retry for
  one failing target does not repeat the others (after a restart they
  may: delivery is at least once).
- ``ordered``: the group consumes orderly (one event at a time per queue;
  events of one subject share a queue), so a failing event holds the ones
  after it on its subject's queue until it is delivered or dead-lettered.
- Counts per rule (`RuleCounts`): matched, delivered, failed (attempts
  that failed), deadLettered.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import trio

from core.broker import Broker
from core.client import ConsumeFromWhere, open_push_consumer
from core.store import Message

from .envelope import decode_event
from .model import Rule, bus_topic
from .targets import DeliveryFailed, Targets, ce_properties

log = logging.getLogger("mqgate.events")

__all__ = ["RuleCounts", "RuleDelivery"]

_REMEMBERED = 10_000


async def until_stopped(stop_requested: trio.Event, consumer, broker: Broker) -> None:
    """Consume until ``stop_requested`` (then the consumer leaves its group: offsets
    committed, unregistered). Cancelled instead, the process is stopping and the
    remoting connections are being cancelled with us: the consumer's offsets are
    committed straight into the in-process broker's table (which its shutdown
    persists), and the consumer is told it is already stopping so that it does
    not wait out its timeouts on goodbye round-trips."""
    try:
        await stop_requested.wait()
    except trio.Cancelled:
        own = broker.config.broker_name
        for mq, offset in list(consumer.offsets.table.items()):
            if mq.broker_name == own:
                broker.commit_offset(consumer.group, mq.topic, mq.queue_id, offset)
        consumer.stopping = True
        raise


@dataclass
class RuleCounts:
    matched: int = 0
    delivered: int = 0
    failed: int = 0
    dead_lettered: int = 0

    def as_json(self) -> dict:
        return {"matched": self.matched, "delivered": self.delivered, "failed": self.failed,
                "deadLettered": self.dead_lettered}

    @classmethod
    def from_json(cls, d: dict) -> "RuleCounts":
        return cls(int(d.get("matched", 0)), int(d.get("delivered", 0)), int(d.get("failed", 0)),
                   int(d.get("deadLettered", 0)))


class RuleDelivery:
    """``await nursery.start(delivery.run)``; cancel its scope to stop it."""

    def __init__(self, rule: Rule, targets: Targets, broker: Broker, namesrv: list[str], counts: RuleCounts,
                 *, decode=None, orderly_suspend_ms: int = 1000, consumer_options: dict | None = None) -> None:
        self.rule = rule
        self.targets = targets
        self.broker = broker
        self.namesrv = namesrv
        self.counts = counts
        self.decode = decode or (lambda m: decode_event(m.body))  # message -> event dict (shared: never mutated)
        self.orderly_suspend_ms = orderly_suspend_ms
        self.consumer_options = consumer_options or {}
        self.stop_requested = trio.Event()  # set: leave the group (offsets committed, unregistered)
        self._done: OrderedDict[str, set[int]] = OrderedDict()  # msg id -> indexes of targets that took it
        self._attempts: OrderedDict[str, int] = OrderedDict()  # msg id -> failed attempts seen here

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        rule = self.rule
        await self.broker.ensure_topic(rule.dead_letter_topic, 1)
        async with open_push_consumer(self.namesrv, rule.group, {bus_topic(rule.bus): "*"}, self.listener,
                                      orderly=rule.ordered, consume_concurrency=rule.concurrency,
                                      max_reconsume_times=rule.max_retries + 1,
                                      suspend_current_queue_ms=self.orderly_suspend_ms,
                                      consume_from=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                                      **self.consumer_options) as consumer:
            task_status.started()
            await until_stopped(self.stop_requested, consumer, self.broker)

    async def listener(self, msgs, ctx) -> bool:
        ok = True
        for m in msgs:
            ok = await self.handle(m) and ok
        return ok

    async def handle(self, m) -> bool:
        """True: acknowledge; False: retry later."""
        event = self.decode(m)
        rule = self.rule
        if event is None or not rule.pattern.matches(event):
            return True
        key = m.msg_id
        if key not in self._attempts:
            self.counts.matched += 1
        payload = rule.transform.apply(event)
        done = self._done.get(key) or set()
        reasons = []
        for i, target in enumerate(rule.targets):
            if i in done:
                continue
            try:
                await self.targets.deliver(target, event, payload)
                done.add(i)
            except DeliveryFailed as e:
                reasons.append(str(e))
        if not reasons:
            self.counts.delivered += 1
            self._done.pop(key, None)
            self._attempts.pop(key, None)
            return True
        self.counts.failed += 1
        attempts = max(m.reconsume_times, self._attempts.get(key, 0)) + 1
        reason = "; ".join(reasons)
        if attempts > rule.max_retries:
            if await self._dead_letter(m, event, reason, attempts):
                self.counts.dead_lettered += 1
                self._done.pop(key, None)
                self._attempts.pop(key, None)
                return True
        else:
            log.info("rule %s: event %s not delivered (attempt %d of %d): %s", rule.key, event.get("id"),
                     attempts, rule.max_retries + 1, reason)
        self._remember(self._done, key, done)
        self._remember(self._attempts, key, attempts)
        return False

    @staticmethod
    def _remember(table: OrderedDict, key: str, value) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > _REMEMBERED:
            table.popitem(last=False)

    async def _dead_letter(self, m, event: dict, reason: str, attempts: int) -> bool:
        rule = self.rule
        props = {**ce_properties(event), "EVENT_RULE": rule.key, "EVENT_FAILURE_REASON": reason[:2000],
                 "EVENT_ATTEMPTS": str(attempts), "KEYS": str(event.get("id", ""))[:200].replace(" ", "_")}
        result = await self.broker.send(Message(topic=rule.dead_letter_topic, body=m.body, properties=props))
        if not result.ok:
            log.warning("rule %s: dead-lettering event %s failed (%s): it will be retried", rule.key,
                        event.get("id"), result.status.name)
            return False
        log.warning("rule %s: event %s dead-lettered to %s after %d attempts: %s", rule.key, event.get("id"),
                    rule.dead_letter_topic, attempts, reason)
        return True
