"""Who may call the gRPC service: the access-key signature of RocketMQ 5
clients, checked against a plain-ACL file (`core.processors.acl.PlainAcl`,
the format of RocketMQ 4.x's ``plain_acl.yml``, in TOML or YAML).

Rules kept here:
- Off unless ``[proxy] aclFile`` names a file; then every call is checked
  before it reaches the service (a Telemetry stream once, at its start).
- The client's ``authorization`` metadata is ``MQv2-HMAC-SHA1
  Credential=<accessKey>[/...], SignedHeaders=x-mq-date-time,
  Signature=<hex>``, the signature the hex HMAC-SHA1 of the
  ``x-mq-date-time`` value under the account's secret key (compared without
  regard to the hex's case). The date itself is not compared with the clock
  (the Python client sends local time marked ``Z``): a captured header could
  be replayed, which TLS on the port prevents.
- A peer in ``globalWhiteRemoteAddresses`` passes unsigned; an account's
  ``whiteRemoteAddress`` passes its known access key without the signature
  check, as RocketMQ's plain ACL does.
- No header, an unknown access key or a wrong signature: UNAUTHORIZED
  (40100); a permission the account lacks: FORBIDDEN (40300); one line
  each, the connection and other clients unaffected.
- Permissions per call (`resources`): sends and EndTransaction need PUB on
  the topic; receives, acks, invisible-time changes, DLQ forwards,
  assignments and lite subscriptions need SUB on the topic and on the group
  (``%RETRY%<group>`` in the account's groupPerms); a route query needs PUB
  or SUB on the topic; heartbeats and terminations SUB on the group, if any.
"""

from __future__ import annotations

import hashlib
import hmac
import re

from core.processors.acl import PUB, SUB, AclError, PlainAcl

from . import pb
from .wire import status

_HEADER = re.compile(r"MQv2-HMAC-SHA1\s+Credential=([^,\s]+),\s*SignedHeaders=([^,\s]+),\s*Signature=([0-9A-Fa-f]+)")
_RETRY = "%RETRY%"


def grpc_signature(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def _group(name: str) -> dict[str, int]:
    return {_RETRY + name: SUB} if name else {}


def resources(method: str, req) -> dict[str, int]:
    """What a call touches and the permission it needs (see the module rules)."""
    if method == "SendMessage":
        return {m.topic.name: PUB for m in req.messages}
    if method == "EndTransaction":
        return {req.topic.name: PUB}
    if method == "QueryRoute":
        return {req.topic.name: PUB | SUB}
    if method == "ReceiveMessage":
        return {req.message_queue.topic.name: SUB, **_group(req.group.name)}
    if method in ("QueryAssignment", "AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue",
                  "SyncLiteSubscription"):
        return {req.topic.name: SUB, **_group(req.group.name)}
    if method in ("Heartbeat", "NotifyClientTermination"):
        return _group(req.group.name) if req.HasField("group") else {}
    return {}


class AccessCheck:
    """The gate in front of the service; ``acl`` None lets everything through."""

    def __init__(self, acl: PlainAcl | None) -> None:
        self.acl = acl

    def refusal(self, method: str, req, metadata, peer: str) -> pb.Status | None:
        """None when the call may go on, else the status to answer with."""
        if self.acl is None:
            return None
        ip = _peer_ip(peer)
        if any(w.match(ip) for w in self.acl.global_white):
            return None
        headers = {k: v for k, v in metadata or ()}
        m = _HEADER.match(headers.get("authorization", ""))
        if m is None:
            return status(pb.UNAUTHORIZED, "no MQv2-HMAC-SHA1 authorization header: this port needs an access key")
        access_key = m.group(1).split("/")[0]
        acc = self.acl.accounts.get(access_key)
        if acc is None:
            return status(pb.UNAUTHORIZED, f"no account for access key {access_key[:64]}")
        if not acc.white.match(ip):
            expected = grpc_signature(acc.secret_key, headers.get("x-mq-date-time", ""))
            if m.group(2).lower() != "x-mq-date-time" or not hmac.compare_digest(expected, m.group(3).lower()):
                return status(pb.UNAUTHORIZED, f"signature check failed for access key {access_key}")
        try:
            PlainAcl.authorize(acc, resources(method, req))
        except AclError as e:
            return status(pb.FORBIDDEN, f"access key {access_key}: {e}")
        return None


def _peer_ip(peer: str) -> str:
    """grpcio's ``ipv4:1.2.3.4:5``, ``ipv6:[::ffff:1.2.3.4]:5`` -> the address."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rpartition("]")[0].lstrip("[").removeprefix("::ffff:")
    return rest.rpartition(":")[0]
