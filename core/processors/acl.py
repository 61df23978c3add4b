"""RocketMQ 4.x plain ACL: access-key / secret-key signatures on broker requests.

Modelled on 4.9.x ``PlainAccessValidator`` and ``PlainPermissionManager``.
Off unless a file is given. Rules kept here:

- The signature is Base64(HmacSHA1(secretKey, content)); content is the
  values of every request extField except ``Signature`` and
  ``_UNIQUE_KEY_QUERY``, in key order, concatenated, then the body. That is
  what the Java, Go and C++ clients sign (C++ 1.2.x signs the string forms
  of its header fields; our codec reads its JSON numbers as the same text).
- Order of checks: a global white address passes everything; otherwise the
  access key must be known ("No acl config for ..."); the account's white
  address passes; the signature must match; admin-only codes
  (UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG, DELETE_TOPIC_IN_BROKER,
  UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP) need an
  admin account; then every resource the request touches needs its
  permission (PUB for a send's topic, SUB for pulls, groups as
  ``%RETRY%<group>``), from the account's topicPerms/groupPerms or its
  defaults (DENY when unset). DENY beats anything.
- A refused request is answered SYSTEM_ERROR with the reason as remark
  (what the Java broker's remoting layer does with an AclException), and not
  answered when oneway. The connection stays open.
- The file uses RocketMQ's ``plain_acl.yml`` keys, in TOML (or YAML when the
  file ends in .yml/.yaml and PyYAML is installed)::

      globalWhiteRemoteAddresses = ["10.10.103.*"]
      [[accounts]]
      accessKey = "RocketMQ"
      secretKey = "12345678"
      whiteRemoteAddress = ""
      admin = false
      defaultTopicPerm = "DENY"
      defaultGroupPerm = "SUB"
      topicPerms = ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"]
      groupPerms = ["groupA=DENY", "groupB=PUB|SUB"]
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.processors.clients import HeartbeatError, parse_heartbeat
from core.remoting import RemotingCommand, RequestCode, ResponseCode, decode_json

__all__ = ["AclError", "PlainAcl", "sign"]

DENY, ANY, PUB, SUB = 1, 2, 4, 8
_PERMS = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}
ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
})
RETRY_PREFIX = "%RETRY%"


class AclError(Exception):
    """The request is refused; the message is the remark sent back."""


def sign(content: bytes, secret_key: str) -> str:
    return base64.b64encode(hmac.new(secret_key.encode(), content, hashlib.sha1).digest()).decode()


def request_content(req: RemotingCommand) -> bytes:
    parts = [v for k, v in sorted(req.ext_fields.items()) if k not in ("Signature", "_UNIQUE_KEY_QUERY")]
    return "".join(parts).encode() + (req.body or b"")


def _perm(text: str) -> int:
    return _PERMS.get((text or "").strip(), DENY)


def _retry(group: str) -> str:
    return group if group.startswith(RETRY_PREFIX) else RETRY_PREFIX + group


class _Addresses:
    """RocketMQ remote-address patterns: ``*``, ``a.b.c.*``, ``a.b.c.1-9``, ``a.b.c.{1,2}``, comma lists."""

    def __init__(self, text: str) -> None:
        text = (text or "").strip()
        self.patterns: list[list[str]] = []
        self.match_all = text in ("*", "*.*.*.*")
        if self.match_all or not text:
            return
        m = re.match(r"^(.*)\{([^}]*)\}$", text)
        items = [m.group(1) + x.strip() for x in m.group(2).split(",")] if m else text.split(",")
        self.patterns = [i.strip().split(".") for i in items if i.strip()]

    def match(self, ip: str) -> bool:
        if self.match_all:
            return True
        segs = ip.split(".")
        for pat in self.patterns:
            if len(pat) <= len(segs) and all(_seg_match(p, s) for p, s in zip(pat, segs)) and (
                    len(pat) == len(segs) or pat[-1] == "*"):
                return True
        return False


def _seg_match(pat: str, seg: str) -> bool:
    if pat == "*" or pat == seg:
        return True
    m = re.fullmatch(r"(\d+)-(\d+)", pat)
    return bool(m and seg.isdigit() and int(m.group(1)) <= int(seg) <= int(m.group(2)))


@dataclass
class Account:
    access_key: str
    secret_key: str
    white: _Addresses
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    perms: dict[str, int] = field(default_factory=dict)


class PlainAcl:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.global_white = [_Addresses(a) for a in doc.get("globalWhiteRemoteAddresses") or ()]
        self.accounts: dict[str, Account] = {}
        for a in doc.get("accounts") or ():
            perms: dict[str, int] = {}
            for item in a.get("topicPerms") or ():
                name, _, p = str(item).partition("=")
                perms[name.strip()] = _perm(p)
            for item in a.get("groupPerms") or ():
                name, _, p = str(item).partition("=")
                perms[_retry(name.strip())] = _perm(p)
            acc = Account(
                access_key=str(a["accessKey"]), secret_key=str(a["secretKey"]),
                white=_Addresses(str(a.get("whiteRemoteAddress") or "")), admin=bool(a.get("admin", False)),
                default_topic_perm=_perm(a.get("defaultTopicPerm")), default_group_perm=_perm(a.get("defaultGroupPerm")),
                perms=perms,
            )
            if len(acc.secret_key) < 6 or len(acc.access_key) < 6:
                raise ValueError(f"ACL account {acc.access_key!r}: accessKey and secretKey need at least 6 characters")
            self.accounts[acc.access_key] = acc

    @classmethod
    def from_file(cls, path: str | Path) -> "PlainAcl":
        path = Path(path)
        if path.suffix in (".yml", ".yaml"):
            import yaml  # optional: only for RocketMQ's own plain_acl.yml

            return cls(yaml.safe_load(path.read_text()) or {})
        return cls(tomllib.loads(path.read_text()))

    # ---- checking ----

    @staticmethod
    def resources(req: RemotingCommand) -> dict[str, int]:
        """``PlainAccessValidator.parse``: what the request touches and the permission it needs."""
        ext = req.ext_fields
        code = req.code
        out: dict[str, int] = {}
        if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            topic = ext.get("topic" if code == RequestCode.SEND_MESSAGE else "b", "")
            if topic.startswith(RETRY_PREFIX):
                out[topic] = SUB
            else:
                out[topic] = PUB
        elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
            out[_retry(ext.get("group", ""))] = SUB
        elif code == RequestCode.PULL_MESSAGE:
            out[ext.get("topic", "")] = SUB
            out[_retry(ext.get("consumerGroup", ""))] = SUB
        elif code == RequestCode.QUERY_MESSAGE:
            out[ext.get("topic", "")] = SUB
        elif code == RequestCode.HEART_BEAT:
            try:
                hb = parse_heartbeat(decode_json(req.body))
            except (ValueError, HeartbeatError) as exc:
                raise AclError(f"bad heartbeat body: {exc}") from exc
            for cd in hb.consumers:
                out[_retry(cd.group)] = SUB
                for s in cd.subscriptions:
                    out[s.topic] = SUB
        elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
            group = ext.get("consumerGroup")
            if group:
                out[_retry(group)] = SUB
        elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
            out[_retry(ext.get("consumerGroup", ""))] = SUB
            out[ext.get("topic", "")] = SUB
        return out

    def check(self, remote_ip: str, req: RemotingCommand) -> None:
        """Raise `AclError` if the request is not allowed."""
        if any(w.match(remote_ip) for w in self.global_white):
            return
        ak = req.ext_fields.get("AccessKey")
        if not ak:
            raise AclError("No accessKey is configured")
        acc = self.accounts.get(ak)
        if acc is None:
            raise AclError(f"No acl config for {ak}")
        if acc.white.match(remote_ip):
            return
        if not hmac.compare_digest(sign(request_content(req), acc.secret_key), req.ext_fields.get("Signature", "")):
            raise AclError(f"Check signature failed for accessKey={ak}")
        if req.code in ADMIN_CODES and not acc.admin:
            raise AclError(f"Need admin permission for request code={req.code}, but accessKey={ak} is not")
        self.authorize(acc, self.resources(req))

    @staticmethod
    def authorize(acc: Account, needed: dict[str, int]) -> None:
        """Raise `AclError` unless ``acc`` holds every permission of ``needed`` (resource ->
        PUB/SUB/ANY; groups as ``%RETRY%<group>``). Also what RocketMQ 5 clients get (core.proxy)."""
        if acc.admin and not acc.perms:
            return
        for resource, need in needed.items():
            if resource == "RMQ_SYS_TRACE_TOPIC" and need == PUB:
                return
            is_group = resource.startswith(RETRY_PREFIX)
            owned = acc.perms.get(resource, acc.default_group_perm if is_group else acc.default_topic_perm)
            if owned & DENY or not (need & owned):
                kind = "group" if is_group else "topic"
                name = resource[len(RETRY_PREFIX):] if is_group else resource
                raise AclError(f"No default permission for {kind}={name}")

    def hook(self, channel: Any, req: RemotingCommand) -> RemotingCommand | None:
        """For `RemotingServer(request_hook=...)`: None to go on, or the refusal."""
        try:
            self.check(channel.remote_addr[0].removeprefix("::ffff:"), req)
        except AclError as exc:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"org.apache.rocketmq.acl.common.AclException: {exc}")
        return None
