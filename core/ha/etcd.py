"""`EtcdClient`: the few etcd v3 calls failover needs, over etcd's JSON gateway.

etcd (Debian's ``etcd-server``) serves its gRPC API as JSON on the client
URL (``POST /v3/kv/range`` ...); we reach it with httpx, which runs on trio.
Keys and values travel base64-encoded; int64 fields come back as strings;
fields equal to their zero value are left out of answers (a failed
transaction has no ``succeeded``; a lease that is gone answers keepalive
with no ``TTL``).

Rules kept:
- Every call is bounded by ``timeout``; endpoints are tried in turn, and
  `EtcdUnavailable` means none answered in time (the caller cannot tell
  whether a write it sent took effect, so writes that matter are
  transactions whose compare makes a retry harmless).
- An answer etcd gives (an error status, a lease that is gone) is
  `EtcdError` / `LeaseNotFound`, never `EtcdUnavailable`.
- Messages are one line, naming the endpoint.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import logging

import httpx
import trio

# httpx logs every request at INFO: a lease renewal every second would fill the broker's log
logging.getLogger("httpx").setLevel(logging.WARNING)


class EtcdError(Exception):
    """etcd answered with an error, or an answer we cannot read."""


class EtcdUnavailable(EtcdError):
    """No endpoint answered within the timeout."""


class LeaseNotFound(EtcdError):
    """The lease expired or was revoked."""


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _prefix_end(prefix: str) -> bytes:
    """The range end that selects every key starting with ``prefix``."""
    b = bytearray(prefix.encode())
    while b and b[-1] == 0xFF:
        b.pop()
    if not b:
        return b"\0"
    b[-1] += 1
    return bytes(b)


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_json(cls, kv: dict) -> "KeyValue":
        return cls(_unb64(kv.get("key")).decode(), _unb64(kv.get("value")), int(kv.get("create_revision", 0)),
                   int(kv.get("mod_revision", 0)), int(kv.get("version", 0)), int(kv.get("lease", 0)))


_RESULTS = {"=": "EQUAL", "!=": "NOT_EQUAL", ">": "GREATER", "<": "LESS"}


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction (``Compare.version(key, "=", 0)``...)."""

    body: dict

    @classmethod
    def _make(cls, target: str, field: str, key: str, op: str, value) -> "Compare":
        return cls({"target": target, "key": _b64(key), "result": _RESULTS[op], field: value})

    @classmethod
    def version(cls, key: str, op: str, value: int) -> "Compare":
        return cls._make("VERSION", "version", key, op, str(value))

    @classmethod
    def create_revision(cls, key: str, op: str, value: int) -> "Compare":
        return cls._make("CREATE", "create_revision", key, op, str(value))

    @classmethod
    def mod_revision(cls, key: str, op: str, value: int) -> "Compare":
        return cls._make("MOD", "mod_revision", key, op, str(value))

    @classmethod
    def value(cls, key: str, op: str, value: bytes | str) -> "Compare":
        return cls._make("VALUE", "value", key, op, _b64(value))


@dataclass(frozen=True, slots=True)
class Op:
    """One request of a transaction branch."""

    body: dict

    @classmethod
    def put(cls, key: str, value: bytes | str, lease: int = 0) -> "Op":
        put = {"key": _b64(key), "value": _b64(value)}
        if lease:
            put["lease"] = str(lease)
        return cls({"request_put": put})

    @classmethod
    def delete(cls, key: str) -> "Op":
        return cls({"request_delete_range": {"key": _b64(key)}})

    @classmethod
    def get(cls, key: str) -> "Op":
        return cls({"request_range": {"key": _b64(key)}})


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    responses: list


class EtcdClient:
    def __init__(self, endpoints: list[str] | str, timeout: float = 2.0):
        if isinstance(endpoints, str):
            endpoints = [e for e in endpoints.replace(",", ";").split(";") if e.strip()]
        if not endpoints:
            raise ValueError("no etcd endpoint given")
        self.endpoints = [e.strip().rstrip("/") for e in endpoints]
        self.timeout = timeout
        self._http: httpx.AsyncClient | None = None
        self._good = 0  # index of the endpoint that answered last

    async def __aenter__(self) -> "EtcdClient":
        self._http = httpx.AsyncClient(timeout=self.timeout)
        return self

    async def __aexit__(self, *exc) -> None:
        if self._http is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self._http.aclose()
            self._http = None

    async def _call(self, path: str, body: dict) -> dict:
        assert self._http is not None, "use `async with EtcdClient(...)`"
        last = ""
        n = len(self.endpoints)
        with trio.move_on_after(self.timeout * n + 0.5):
            for i in range(n):
                endpoint = self.endpoints[(self._good + i) % n]
                try:
                    with trio.fail_after(self.timeout):
                        resp = await self._http.post(f"{endpoint}{path}", content=json.dumps(body))
                except (httpx.TransportError, trio.TooSlowError) as e:
                    last = f"{endpoint}: {type(e).__name__} {e}".strip()
                    continue
                self._good = (self._good + i) % n
                try:
                    data = resp.json()
                except ValueError:
                    raise EtcdError(f"etcd {endpoint}{path}: HTTP {resp.status_code}, not JSON") from None
                if resp.status_code != 200 or "error" in data:
                    message = data.get("message") or data.get("error") or f"HTTP {resp.status_code}"
                    if "lease not found" in str(message):
                        raise LeaseNotFound(f"etcd {endpoint}: {message}")
                    raise EtcdError(f"etcd {endpoint}{path}: {message}")
                return data
        raise EtcdUnavailable(f"no etcd endpoint answered within {self.timeout:g} s ({last or 'timed out'})")

    # ---- keys ----

    async def get(self, key: str) -> KeyValue | None:
        data = await self._call("/v3/kv/range", {"key": _b64(key)})
        kvs = data.get("kvs") or []
        return KeyValue.from_json(kvs[0]) if kvs else None

    async def get_prefix(self, prefix: str) -> list[KeyValue]:
        data = await self._call("/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(_prefix_end(prefix))})
        return [KeyValue.from_json(kv) for kv in data.get("kvs") or []]

    async def put(self, key: str, value: bytes | str, lease: int = 0) -> int:
        data = await self._call("/v3/kv/put", Op.put(key, value, lease).body["request_put"])
        return int(data.get("header", {}).get("revision", 0))

    async def delete(self, key: str) -> int:
        data = await self._call("/v3/kv/deleterange", {"key": _b64(key)})
        return int(data.get("deleted", 0))

    async def delete_prefix(self, prefix: str) -> int:
        data = await self._call("/v3/kv/deleterange", {"key": _b64(prefix), "range_end": _b64(_prefix_end(prefix))})
        return int(data.get("deleted", 0))

    async def txn(self, compare: list[Compare], success: list[Op], failure: list[Op] = ()) -> TxnResult:
        body = {"compare": [c.body for c in compare], "success": [o.body for o in success],
                "failure": [o.body for o in failure]}
        data = await self._call("/v3/kv/txn", body)
        return TxnResult(bool(data.get("succeeded", False)), int(data.get("header", {}).get("revision", 0)),
                         data.get("responses") or [])

    # ---- leases ----

    async def lease_grant(self, ttl_s: int) -> int:
        data = await self._call("/v3/lease/grant", {"TTL": str(int(ttl_s))})
        return int(data["ID"])

    async def lease_keepalive(self, lease_id: int) -> int:
        """Renew; the TTL granted again. `LeaseNotFound` when it is gone."""
        data = await self._call("/v3/lease/keepalive", {"ID": str(lease_id)})
        ttl = int((data.get("result") or {}).get("TTL", 0))
        if ttl <= 0:
            raise LeaseNotFound(f"etcd lease {lease_id:x} is gone")
        return ttl

    async def lease_revoke(self, lease_id: int) -> None:
        await self._call("/v3/lease/revoke", {"ID": str(lease_id)})
