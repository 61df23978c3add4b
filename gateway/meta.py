"""The gateway's own durable records: msgpack entries in the broker's store.

ARCHITECTURE decision 8. Session state, subscriptions, wills, inbound QoS 2
state and the retained-message index have no RocketMQ format, so each
change is one message in topic ``rmq_sys_mqtt_meta`` (queue 0) of the same
commit log: replicated, flushed (SYNC_FLUSH: fsynced before we answer) and
recovered exactly like application messages.

Record body: ``msgpack([kind, key, value])``; ``value`` None deletes the
key. Kinds: ``"sess"`` (client id -> session state), ``"in2"`` (client id
-> inbound QoS 2 packet ids awaiting PUBREL), ``"will"`` (client id ->
will), ``"ret"`` (MQTT topic -> [physical offset, size] of the retained
PUBLISH), ``"live"`` (``<node>/<client id>`` -> the subscriptions of a
non-persistent session on that gateway node: ``gateway.cluster``), ``"rel"``
(client id -> ``{"node": owner, "by": asking node, "clean": bool}``: a node
asks the etcd owner of a client id to release it, ``gateway.owners``). The key also goes into the ``KEYS`` property for ``mqgate admin``.

Rules kept here:

* Replay (``gateway.meta_log``; on gateway nodes ``gateway.node_meta_log``)
  reads the queue from the compaction checkpoint, or from its first offset; the last record per (kind, key) wins; a record that does not decode, or is no [kind, key,
  value] with a known kind and a text key, is counted, logged and skipped
  (never fatal: it is our data, and the rest still holds). A record of the
  right form whose value is not a shape we write is skipped the same way by
  the gateway's restore (one line naming it).
* The topic is a system topic (``rmq_sys_`` prefix): MQTT publishes never
  map onto it (``gateway.mapping`` refuses them) and the router ignores it.
* Writes are batched by the caller with application messages
  (``broker.send_many``) so a PUBREC and its state share one flush wait.
"""

from __future__ import annotations

from core.broker import parse_record, record_message
from core.store import Message

META_TOPIC = "rmq_sys_mqtt_meta"
KINDS = ("sess", "in2", "will", "ret", "live", "rel")
SNAP = "snap"  # compaction's marker kind (gateway.meta_log)
_KINDS_AND_SNAP = (*KINDS, SNAP)


class RecordsRefused(Exception):
    """The broker takes no writes now (it lost its master lease, is a slave, or
    has its write permission off), so a change whose record it would refuse is
    not made: the client is told, and tries again."""


def record(kind: str, key: str, value) -> tuple[Message, int]:
    """A (message, queue id) pair for ``broker.send_many``."""
    assert kind in KINDS
    return record_message(META_TOPIC, kind, key, value), 0


def record_of_body(kind: str, key: str, body: bytes) -> tuple[Message, int]:
    """The (message, queue id) pair of an already encoded record body."""
    return Message(topic=META_TOPIC, body=body, properties={"KEYS": f"{kind}:{key}"[:200].replace(" ", "_")}), 0


def decode_record(body: bytes) -> tuple[str, str, object]:
    """``(kind, key, value)`` of a record body; ValueError (or msgpack's own
    errors) when it is not one. Kind ``"snap"`` is compaction's marker
    (``gateway.meta_log``), the others are ``KINDS``."""
    return parse_record(body, _KINDS_AND_SNAP)
