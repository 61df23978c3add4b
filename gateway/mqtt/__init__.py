"""gateway.mqtt: MQTT 3.1, 3.1.1 and 5.0 packets, sans I/O.

Bytes in, events out; events in, bytes out. Nothing here touches a socket,
a clock or an event loop. Other rooms import only the names below.

Server usage, one connection::

    conn = MQTTConnection(max_packet_size=1 << 20)
    conn.receive_data(data)                  # b"" at EOF
    try:
        events = conn.events()               # every complete packet
    except RemoteProtocolError as exc:
        write(conn.error_response(exc))      # CONNACK / DISCONNECT / b""
        close()
    for ev in events:
        if isinstance(ev, Connect):
            out.append(conn.send(ConnAck(topic_alias_maximum=10)))
        elif isinstance(ev, Publish): ...
    write(b"".join(out))                     # one write per wake-up

Fan-out: ``PublishTemplate(pub, conn.protocol_version, qos=1).render(pid)``
encodes once and stamps each packet id; send the bytes via
``conn.send_encoded_publish``. QoS flows: ``OutboundFlows``/``InboundFlows``
(serialisable state, ``to_state``/``from_state``).

Errors: ``RemoteProtocolError`` (the peer broke the rules; ``.reason_code``),
``LocalProtocolError`` (we did: a bug), ``PacketTooLarge`` (legal but over the
client's Maximum Packet Size: drop it).
"""

from ._connection import NEED_DATA, MQTTConnection
from ._decode import decode_all
from ._encode import encode
from ._events import (
    Auth,
    ClientAcks,
    ConnAck,
    Connect,
    ConnectionClosed,
    Disconnect,
    Event,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from ._properties import PROPERTY_PACKETS, PROPERTY_TYPES, PropertyId, PropertyType
from ._reasons import (
    ConnectReturnCode,
    LocalProtocolError,
    PacketTooLarge,
    ProtocolError,
    ReasonCode,
    RemoteProtocolError,
)
from ._state import ConnectionState
from ._topic_alias import InboundTopicAliases, OutboundTopicAliases
from ._wire import PacketType
from .fanout import PublishTemplate, encode_publish_v4_qos0, publish_v4_head
from .qos import (
    NOT_FOUND,
    NO_REF,
    PUBACK_WORD,
    PUBCOMP_WORD,
    PUBREC_WORD,
    PUBREL_WORD,
    WORD_PID,
    InboundAction,
    InboundFlows,
    InboundStage,
    OutboundAck,
    OutboundFlows,
    OutboundStage,
    Redelivery,
    ack_event,
    plain_acks,
)

__all__ = [
    # connection
    "MQTTConnection", "ConnectionState", "NEED_DATA",
    # events
    "Event", "Connect", "Will", "ConnAck", "Publish", "PubAck", "PubRec", "PubRel", "PubComp",
    "Subscribe", "Subscription", "SubAck", "Unsubscribe", "UnsubAck", "PingReq", "PingResp",
    "Disconnect", "Auth", "ConnectionClosed", "ClientAcks",
    # codec
    "encode", "decode_all", "PacketType", "PropertyId", "PropertyType", "PROPERTY_TYPES",
    "PROPERTY_PACKETS",
    # reason codes and errors
    "ReasonCode", "ConnectReturnCode", "ProtocolError", "RemoteProtocolError",
    "LocalProtocolError", "PacketTooLarge",
    # topic aliases, fan-out, QoS flows
    "InboundTopicAliases", "OutboundTopicAliases", "PublishTemplate", "encode_publish_v4_qos0", "publish_v4_head",
    "OutboundFlows", "OutboundStage", "OutboundAck", "Redelivery",
    "InboundFlows", "InboundStage", "InboundAction",
    "PUBACK_WORD", "PUBREC_WORD", "PUBREL_WORD", "PUBCOMP_WORD", "NOT_FOUND", "NO_REF", "WORD_PID",
    "plain_acks", "ack_event",
]
