"""Producer and consumer groups as the broker knows them from heartbeats.

Modelled on RocketMQ 4.9.x ``ConsumerManager`` / ``ProducerManager`` and
``HeartbeatData`` (reference 3.2). Pure bookkeeping: channels are opaque
hashable objects and time is passed in (ms).

Invariants kept here:
- A channel belongs to a group while it keeps heartbeating; it leaves on
  UNREGISTER_CLIENT, when its connection closes, or 120 s after its last
  heartbeat (`expire`).
- Every change of a consumer group's membership or subscriptions is
  reported to the caller as the group name, so the caller can send
  NOTIFY_CONSUMER_IDS_CHANGED to the members that remain; this module never
  does I/O itself.
- Heartbeat enums are accepted as names (Java, Go, ali-ons) or ordinals (C++):
  both normalise to the Java names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable

CHANNEL_EXPIRED_MS = 120_000

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


class HeartbeatError(ValueError):
    """A heartbeat body that cannot be understood."""


def _enum(value: Any, names: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if isinstance(value, bool):
        raise HeartbeatError(f"bad enum value {value!r}")
    if isinstance(value, int) or (isinstance(value, str) and value.lstrip("-").isdigit()):
        i = int(value)
        if 0 <= i < len(names):
            return names[i]
        raise HeartbeatError(f"enum ordinal {i} out of range for {names[0]}...")
    if isinstance(value, str) and value in names:
        return value
    raise HeartbeatError(f"bad enum value {value!r}")


def split_tags(sub_string: str) -> tuple[list[str], bool]:
    """Tags of a TAG expression ``A || B``; the flag is True for ``*`` (all)."""
    expr = (sub_string or "").strip()
    if not expr or expr == "*":
        return [], True
    return [t.strip() for t in expr.split("||") if t.strip()], False


@dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    sub_string: str = "*"
    tags: tuple[str, ...] = ()
    codes: tuple[int, ...] = ()
    sub_version: int = 0
    expression_type: str = "TAG"

    @property
    def matches_all(self) -> bool:
        return self.sub_string.strip() in ("", "*")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Subscription":
        if not isinstance(d, dict) or not d.get("topic"):
            raise HeartbeatError("subscription without a topic")
        sub = str(d.get("subString") or "*")
        tags = tuple(str(t) for t in d.get("tagsSet") or ())
        codes = tuple(int(c) for c in d.get("codeSet") or ())
        expression_type = str(d.get("expressionType") or "TAG")
        if not tags and expression_type == "TAG":  # an SQL92 text has no tags
            parsed, _all = split_tags(sub)
            tags = tuple(parsed)
        try:
            ver = int(d.get("subVersion") or 0)
        except (TypeError, ValueError):
            ver = 0
        return cls(str(d["topic"]), sub, tags, codes, ver, expression_type)


@dataclass(frozen=True, slots=True)
class ConsumerData:
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: tuple[Subscription, ...]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    client_id: str
    producer_groups: tuple[str, ...]
    consumers: tuple[ConsumerData, ...]


def parse_heartbeat(doc: Any) -> Heartbeat:
    """A decoded HeartbeatData JSON document (C++ ordinals or Java names); `HeartbeatError` if not one."""
    try:
        return _parse_heartbeat(doc)
    except HeartbeatError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise HeartbeatError(f"malformed heartbeat: {exc}") from exc


def _parse_heartbeat(doc: Any) -> Heartbeat:
    if not isinstance(doc, dict):
        raise HeartbeatError("heartbeat body is not a JSON object")
    client_id = doc.get("clientID")
    if not client_id:
        raise HeartbeatError("heartbeat without clientID")
    producers = tuple(str(p["groupName"]) for p in doc.get("producerDataSet") or () if isinstance(p, dict) and p.get("groupName"))
    consumers = []
    for c in doc.get("consumerDataSet") or ():
        if not isinstance(c, dict) or not c.get("groupName"):
            raise HeartbeatError("consumer data without groupName")
        consumers.append(
            ConsumerData(
                group=str(c["groupName"]),
                consume_type=_enum(c.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
                message_model=_enum(c.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
                consume_from_where=_enum(c.get("consumeFromWhere"), CONSUME_FROM_WHERE, "CONSUME_FROM_LAST_OFFSET"),
                subscriptions=tuple(Subscription.from_json(s) for s in c.get("subscriptionDataSet") or ()),
            )
        )
    return Heartbeat(str(client_id), producers, tuple(consumers))


@dataclass(slots=True)
class ClientChannel:
    channel: Hashable
    client_id: str
    language: str
    version: int
    last_update_ms: int


@dataclass(slots=True)
class ConsumerGroup:
    name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    channels: dict[Hashable, ClientChannel] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [c.client_id for c in self.channels.values()]


class ClientTable:
    """Consumer and producer groups, by heartbeat."""

    def __init__(self) -> None:
        self.consumers: dict[str, ConsumerGroup] = {}
        self.producers: dict[str, dict[Hashable, ClientChannel]] = {}

    def heartbeat(self, hb: Heartbeat, channel: Hashable, *, language: str, version: int, now_ms: int) -> list[str]:
        """Apply one heartbeat; the consumer groups whose members or subscriptions changed."""
        changed = []
        for cd in hb.consumers:
            g = self.consumers.get(cd.group)
            if g is None:
                g = self.consumers[cd.group] = ConsumerGroup(cd.group)
            g.consume_type, g.message_model, g.consume_from_where = cd.consume_type, cd.message_model, cd.consume_from_where
            cc = g.channels.get(channel)
            is_new = cc is None or cc.client_id != hb.client_id
            g.channels[channel] = ClientChannel(channel, hb.client_id, language, version, now_ms)
            subs = {s.topic: s for s in cd.subscriptions}
            subs_changed = subs != g.subscriptions
            if subs_changed:
                # like ConsumerGroupInfo.updateSubscription: a heartbeat replaces the set
                g.subscriptions = subs
            if is_new or subs_changed:
                changed.append(cd.group)
        for group in hb.producer_groups:
            self.producers.setdefault(group, {})[channel] = ClientChannel(channel, hb.client_id, language, version, now_ms)
        return changed

    def unregister(self, channel: Hashable, *, producer_group: str | None, consumer_group: str | None) -> list[str]:
        """UNREGISTER_CLIENT; the consumer groups that lost a member."""
        changed = []
        if producer_group and producer_group in self.producers:
            self.producers[producer_group].pop(channel, None)
            if not self.producers[producer_group]:
                del self.producers[producer_group]
        if consumer_group and consumer_group in self.consumers:
            g = self.consumers[consumer_group]
            if g.channels.pop(channel, None) is not None:
                changed.append(consumer_group)
            if not g.channels:
                del self.consumers[consumer_group]
        return changed

    def channel_closed(self, channel: Hashable) -> list[str]:
        """Forget a connection everywhere; the consumer groups that lost a member."""
        changed = []
        for name in list(self.consumers):
            g = self.consumers[name]
            if g.channels.pop(channel, None) is not None:
                changed.append(name)
                if not g.channels:
                    del self.consumers[name]
        for name in list(self.producers):
            self.producers[name].pop(channel, None)
            if not self.producers[name]:
                del self.producers[name]
        return changed

    def expired_channels(self, now_ms: int, max_idle_ms: int = CHANNEL_EXPIRED_MS) -> set[Hashable]:
        """Channels whose last heartbeat (in any group) is older than ``max_idle_ms``."""
        out = set()
        for g in self.consumers.values():
            out.update(c.channel for c in g.channels.values() if now_ms - c.last_update_ms > max_idle_ms)
        for chans in self.producers.values():
            out.update(c.channel for c in chans.values() if now_ms - c.last_update_ms > max_idle_ms)
        return out

    def consumer_ids(self, group: str) -> list[str]:
        g = self.consumers.get(group)
        return g.client_ids() if g else []

    def consumer_channels(self, group: str) -> list[Hashable]:
        g = self.consumers.get(group)
        return list(g.channels) if g else []

    def producer_channels(self, group: str) -> list[Hashable]:
        return list(self.producers.get(group, {}))

    def subscription(self, group: str, topic: str) -> Subscription | None:
        g = self.consumers.get(group)
        return g.subscriptions.get(topic) if g else None
