"""The send path's hook points (mixed into `Broker` through `SendChecks`), and
stored hooks that name the topics they want (issue 13).

Put hooks run on a message before it is encoded; stored hooks once it is
appended (the rules of their order are in ``sending.py``'s docstring).
Stored hooks are kept in a `TopicHooks`, which the gateway's remote backend
uses too, so that both keep the same rules:

- A stored hook added with ``topics=None`` hears every stored message; with
  a collection of topic names, the messages stored on one of them; with a
  predicate ``wants(topic) -> bool``, those on a topic it says yes to.
- The topic is the one the message is stored on: after the put hooks (a
  delayed message parked by a put hook is on SCHEDULE_TOPIC_XXXX).
- `TopicHooks.for_topic` answers the hooks of a topic in the order they were
  added, whatever their filters: a message hears its hooks in that order.
- A predicate is asked once per topic and its answer kept (it must depend on
  the topic alone); adding a hook forgets every answer. At most ``CACHE``
  topics are kept (then all are forgotten together), so a broker with many
  topics asks again rather than grows without bound.
- A predicate that raises is a bug of its owner: logged, and its hook hears
  the topic's messages (it may still filter them itself).

``TopicHooks.by_topic`` is the kept answers, topic -> tuple of hooks; the
send path reads it directly (one dict lookup per message) and calls
`TopicHooks.for_topic` on a miss. It is cleared in place, never replaced.
Compiled with the other kernels (setup.py): the batch paths run here per item.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Iterable

from core.store.encoder import EncodedMessage
from core.store.message import Message

from .results import SendResult, SendStatus

log = logging.getLogger("core.broker.sending")

PutHook = Callable[[Message], "SendResult | None"]
StoredHook = Callable[[Message, SendResult], None]
TopicFilter = Collection[str] | Callable[[str], bool] | None

CACHE = 4096


class TopicHooks:
    """Hooks with their topic filters, and the hooks of each topic seen."""

    __slots__ = ("_entries", "by_topic")

    def __init__(self) -> None:
        self._entries: list[tuple[Callable, Callable[[str], bool] | None]] = []
        self.by_topic: dict[str, tuple] = {}

    def add(self, hook: Callable, topics: TopicFilter = None) -> None:
        if topics is None or callable(topics):
            wants = topics
        elif isinstance(topics, str):  # frozenset("meta") would be its letters
            raise TypeError(f"topics: a collection of topic names or a predicate, not the string {topics!r}")
        else:
            wants = frozenset(topics).__contains__
        self._entries.append((hook, wants))
        self.by_topic.clear()

    def for_topic(self, topic: str) -> tuple:
        """The hooks that hear a message stored on ``topic``, in the order added."""
        hooks = self.by_topic.get(topic)
        if hooks is None:
            hooks = tuple([hook for hook, wants in self._entries if wants is None or _asks(wants, hook, topic)])
            if len(self.by_topic) >= CACHE:
                self.by_topic.clear()
            self.by_topic[topic] = hooks
        return hooks

    def __len__(self) -> int:
        return len(self._entries)


def _asks(wants: Callable[[str], bool], hook: Callable, topic: str) -> bool:
    try:
        return bool(wants(topic))
    except Exception:
        log.exception("the topic filter of stored hook %r failed for topic %s; the hook hears it", hook, topic)
        return True


class SendHooks:
    """Adding hooks, and running them for single messages and batch items;
    the state they use is set up in ``Broker.__init__``."""

    def add_put_hook(self, hook: PutHook, *, when: Iterable[str] | None = None) -> None:
        """``hook(msg)`` runs on every send, each item of a batch included, after
        validation and before encoding, and may rewrite topic, queue id and
        properties in place (delay levels, timers, transactions; never on a
        batch item: that refuses the batch). It must not block. A hook that
        returns a `SendResult` refuses the message (a batch item: the whole
        batch): the send answers it and nothing is stored.

        ``when``: property names; the hook then runs only on messages that
        carry at least one of them as the hooks start (decided once per
        message, before the first hook), so that a hook with nothing to do
        costs a message nothing. Hooks run in the order they were added."""
        names = None if when is None else frozenset(when)
        self._put_hooks.append((hook, names))
        self._put_always = [h for h, w in self._put_hooks if w is None]
        # a tuple: the send path tests each name with `in` (cheaper than a keys view's isdisjoint)
        self._put_triggers = tuple(sorted(frozenset().union(*(w for _, w in self._put_hooks if w is not None))))

    def _hooks_for(self, props: dict) -> list[PutHook]:
        """The put hooks that run on a message with ``props`` (see `add_put_hook`)."""
        if props.keys().isdisjoint(self._put_triggers):
            return self._put_always
        return [h for h, w in self._put_hooks if w is None or not props.keys().isdisjoint(w)]

    def add_stored_hook(self, hook: StoredHook, *, topics: TopicFilter = None) -> None:
        """``hook(msg, result)`` runs, in send order, for every message whose put
        hooks ran, once the call's messages are appended (before any
        durability wait), refused ones included; ``result.ok`` says it was
        stored. `send_many` appends its messages together, so a put hook that
        keeps state for a message finds it here, not in a dispatch listener.

        ``topics``: the names of the topics whose messages the hook wants, or
        a predicate on a topic name (asked once per topic), by the topic a
        message is stored on; None: every topic. A message on another topic
        costs the hook nothing. A message hears its hooks in the order they
        were added (`TopicHooks`)."""
        self._stored_hooks.add(hook, topics)

    def _stored(self, msg: Message, result: SendResult) -> None:
        """Run the stored hooks of ``msg``'s topic; one that raises is logged and
        the others still run (a put hook may be waiting for its message's
        outcome to free its state)."""
        for hook in self._stored_hooks.for_topic(msg.topic):
            try:
                hook(msg, result)
            except Exception:
                log.exception("stored hook %r failed for a message to %s", hook, result.topic)

    def _batch_put_hooks(self, msgs: list[Message], topic: str, queue_id: int) -> tuple[int, SendResult | None]:
        """The put hooks on each item in order: (items they ran on, refusal or None).
        One item refused refuses the batch; so does an item a hook moved to
        another topic or queue (a batch is stored in one queue)."""
        for i, m in enumerate(msgs):
            try:
                for hook in self._hooks_for(m.properties):
                    refused = hook(m)
                    if refused is not None:
                        return i + 1, refused
            except Exception:  # a hook's bug: the hooks that ran before it still hear the outcome
                self._batch_stored(msgs[:i + 1], None, SendResult(SendStatus.SYSTEM_ERROR, topic=topic, queue_id=queue_id,
                                                                  remark="put hook failed"))
                raise
            if m.topic != topic or m.queue_id != queue_id:
                return i + 1, SendResult(SendStatus.MESSAGE_ILLEGAL, topic=topic,
                                         remark="a put hook moved a batch message off the batch's queue")
        return len(msgs), None

    def _batch_stored(self, msgs: list[Message], put, result: SendResult,
                      encoded: list[EncodedMessage] | None = None) -> None:
        """The stored hooks for each item: its own `SendResult` when the batch
        was stored (its queue and log offsets), else the batch's refusal."""
        if put is None or not result.ok:
            for m in msgs:
                self._stored(m, result)
            return
        status, remark, qoff, ts = result.status, result.remark, put.queue_offset, put.store_timestamp
        topic, qid = result.topic, result.queue_id
        for i, (m, enc, phys) in enumerate(zip(msgs, encoded, put.physical_offsets)):
            self._stored(m, SendResult(status, topic, qid, qoff + i, enc.uniq_key or None, phys, ts, 1, remark, enc))
