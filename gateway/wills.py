"""Will messages: their records, their delay timers, and the PUBLISHes the server makes.

``Wills`` belongs to one ``MQTTGateway`` (``gw.wills``); the gateway decides
when a will is due (see the rules in ``gateway.app``), this module keeps
the bookkeeping that goes with it.

Rules kept here:

* ``keys`` is the set of client ids that have a ``"will"`` record in the
  meta log: a will set, replaced or dropped writes one record
  (``record_item``), and a client id not in ``keys`` writes none when its
  will goes (so a session without a will costs no record).
* A published will's record is deleted in the same ``send_many`` as its
  message, so after a restart a will is never published twice, and one
  whose message was not stored is not published later either (it is
  logged, as the server's refusal of a device's message would be).
* A delay timer publishes its will only if, when due, the session is still
  disconnected and that will is still the pending one (a reconnect cancels
  the timer or replaces the will). Once due, the will is published whole,
  shielded: the session ending meanwhile must not cancel it half-way.
* No timer starts while the gateway is not running (``nursery`` None): at
  shutdown the records stay, and the restore after a restart schedules
  them again (``gateway.restore``).
* The server's own PUBLISHes (wills, event rules' MQTT targets:
  ``store_server_publish``) are mapped, stored, routed and retained like a
  device's; ``$delayed/`` ones are parked like a device's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from core.store import PROPERTY_TIMER_OUT_MS
from gateway.backend import BrokerBackend
from gateway.mapping import (P_TIMER_DELAY, MappingError, broker_topic_for, now_ms, publish_to_message, queue_for,
                             split_delayed)
from gateway.meta import record
from gateway.mqtt import Publish, ReasonCode, Will
from gateway.sessions import Session

log = logging.getLogger("mqgate.gateway")
_WILL_FIELDS = ("topic", "payload", "qos", "retain", "payload_format_indicator", "message_expiry_interval",
                "content_type", "response_topic", "correlation_data", "will_delay_interval")

SetRetained = Callable[[list[tuple[str, bytes, int]]], Awaitable[None]]


def will_record(will: Will, gone: int | None, node: str | None) -> dict:
    """The ``"will"`` record's value: the will, when its client went (ms, None
    while connected) and the gateway node it was on (None for ``serve``)."""
    rec = {name: getattr(will, name) for name in _WILL_FIELDS}
    rec["user_properties"] = [list(p) for p in will.user_properties]
    rec["gone"] = gone
    rec["node"] = node
    return rec


def will_from_record(rec: dict) -> Will:
    fields = {name: rec.get(name) for name in _WILL_FIELDS}
    fields["user_properties"] = tuple(tuple(p) for p in rec.get("user_properties", ()))
    return Will(**fields)


class NotStored(Exception):
    """The broker refused a PUBLISH the server made (a will, an event target's)."""


async def store_server_publish(backend: BrokerBackend, set_retained: SetRetained, cid: str, pub: Publish,
                               extra: list) -> None:
    """Store ``pub`` (``$delayed/`` parked) with the ``extra`` records in one
    ``send_many``, then set its retained message (``set_retained``, the
    gateway's). `MappingError` or `NotStored` when it is not stored; the
    ``extra`` records are stored all the same."""
    items = []
    topic = pub.topic
    error = None
    try:
        delay = None
        if topic.startswith("$delayed/"):
            delay, topic = split_delayed(topic)
            if not backend.timers_supported():
                raise MappingError("the broker has no timer support for $delayed",
                                   ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR)
        name = broker_topic_for(topic)
        cfg = await backend.topic_for_publish(name)
        if cfg is None:
            raise MappingError(f"broker topic {name!r} does not exist and may not be created",
                               ReasonCode.TOPIC_NAME_INVALID)
        msg = publish_to_message(pub, name, cid, now_ms(), topic=topic)
        if delay is not None:
            msg.properties[P_TIMER_DELAY] = str(delay)
        items.append((msg, queue_for(topic, cfg.write_queue_nums)))
    except MappingError as e:
        error = e
    items += extra
    results = await backend.send_many(items) if items else []
    if error is not None:
        raise error
    if len(results) < len(items):
        raise NotStored("the broker is stopping")
    if not results[0].ok:
        raise NotStored(f"{results[0].status.name} {results[0].remark or ''}".strip())
    if pub.retain and PROPERTY_TIMER_OUT_MS not in items[0][0].properties:  # a parked one: when it fires
        await set_retained([(topic, pub.payload, results[0].physical_offset)])


class Wills:
    """The wills of one gateway: which have records, their timers, their publication."""

    def __init__(self, backend: BrokerBackend, set_retained: SetRetained, node_id: str | None) -> None:
        self.backend = backend
        self.set_retained = set_retained
        self.node_id = node_id  # written into the records (a gateway node's dead-node clean-up reads it)
        self.keys: set[str] = set()  # client ids with a "will" record in the meta log
        self.nursery: trio.Nursery | None = None  # the gateway's while it runs: the timers' tasks run there

    def record_item(self, cid: str, will: Will | None, gone: int | None = None) -> tuple | None:
        """The record that sets ``cid``'s will (``will``, its client gone at
        ``gone``), or deletes it (``will`` None; None when there is no record
        to delete): an item for ``write_records``."""
        if will is not None:
            self.keys.add(cid)
            return record("will", cid, will_record(will, gone, self.node_id))
        if cid in self.keys:
            self.keys.discard(cid)
            return record("will", cid, None)
        return None

    def schedule(self, sess: Session | None, will: Will, seconds: float, cid: str | None = None) -> None:
        """Publish ``will`` in ``seconds`` unless ``sess`` (None: no session
        here, then ``cid`` names the client) has a connection again by then."""
        if self.nursery is None:
            return
        scope = trio.CancelScope()
        if sess is not None:
            sess.will_scope = scope
            sess.pending_will = will
        self.nursery.start_soon(self._later, sess, cid or sess.client_id, will, max(0.0, seconds), scope)

    async def _later(self, sess: Session | None, cid: str, will: Will, seconds: float,
                     scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(seconds)
            if sess is not None:
                if sess.conn is not None or sess.pending_will is not will:
                    return
                sess.pending_will = None
                sess.will_scope = None
        if scope.cancelled_caught:
            return
        # Due: publish it whole even if the session ends meanwhile (that would
        # cancel the timer's scope mid-publish and lose the will).
        with trio.CancelScope(shield=True):
            await self.publish(cid, will)

    async def publish(self, cid: str, will: Will) -> None:
        """Publish ``cid``'s will now and delete its record (logged, not
        raised, when it cannot be stored)."""
        pub = Publish(topic=will.topic, payload=will.payload, qos=will.qos, retain=will.retain,
                      packet_id=1 if will.qos else None, payload_format_indicator=will.payload_format_indicator,
                      message_expiry_interval=will.message_expiry_interval, content_type=will.content_type,
                      response_topic=will.response_topic, correlation_data=will.correlation_data,
                      user_properties=will.user_properties)
        self.keys.discard(cid)
        try:
            await store_server_publish(self.backend, self.set_retained, cid, pub, [record("will", cid, None)])
        except MappingError as e:
            log.warning("will of %s on %r not published: %s", cid, will.topic, e)
            return
        except NotStored as e:
            log.warning("will of %s on %r not stored: %s", cid, will.topic, e)
            return
        log.info("will of %s published on %r", cid, will.topic)
