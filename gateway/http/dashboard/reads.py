"""What the dashboard shows beyond the admin API: searches, broker topics and
queues, consumer groups, message search, replication, retained payloads.

Rules kept here:
- Reads only: nothing here changes the gateway or the broker (kick and
  delete go through ``GatewayOps``, like the JSON API's).
- Searches are case-insensitive substring matches over client id,
  username and IP address; lists are sorted, so a page is stable.
- A body or payload is shown as a preview of at most ``PREVIEW_BYTES``:
  UTF-8 text when it decodes, else hex.
- Broker topics that are MQTT sessions' light queues (``%LMQ%``) are one
  per client: the topics page leaves them out unless asked, and the
  groups page leaves out their offsets (as /metrics does).
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from core.broker import LMQ_TOPIC_PREFIX, is_system_topic

PREVIEW_BYTES = 4096
MAX_KEY_SEARCH_TOPICS = 64
MAX_TIME_RESULTS = 50
PROTOCOLS = {3: "3.1", 4: "3.1.1", 5: "5.0"}


def preview(data: bytes) -> dict[str, Any]:
    cut = data[:PREVIEW_BYTES]
    try:
        text, kind = cut.decode("utf-8"), "text"
    except UnicodeDecodeError:
        text, kind = cut.hex(" "), "hex"
    return {"text": text, "kind": kind, "size": len(data), "truncated": len(data) > PREVIEW_BYTES}


def local_time(ts: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts / 1000)) if ts > 0 else "-"


class DashboardReads:
    def __init__(self, gw, view=None) -> None:
        self.gw = gw
        self.view = view  # BrokerView or None

    @property
    def broker(self):
        return self.view.broker if self.view is not None else None

    # ---- clients and sessions -------------------------------------------------------------

    def sessions(self, query: str = "", state: str = "all") -> list[dict]:
        q = query.strip().lower()
        rows = []
        for cid, sess in sorted(self.gw.router.sessions.items()):
            conn = sess.conn
            online = conn is not None
            if (state == "online" and not online) or (state == "offline" and online):
                continue
            row = {"clientId": cid, "online": online, "username": conn.username if online else None,
                   "ip": conn.info.peer[0] if online else None, "port": conn.info.peer[1] if online else None,
                   "listener": conn.info.listener if online else None,
                   "protocol": PROTOCOLS.get(sess.version, str(sess.version)), "persistent": sess.persistent,
                   "subscriptions": len(sess.subs), "inflight": len(sess.refs), "pending": len(sess.pending)}
            if q and not any(q in str(row[k] or "").lower() for k in ("clientId", "username", "ip")):
                continue
            rows.append(row)
        return rows

    def subscriptions(self, query: str = "") -> list[dict]:
        q = query.strip().lower()
        rows = []
        for cid, sess in sorted(self.gw.router.sessions.items()):
            for text, (_flt, opts) in sorted(sess.subs.items()):
                if q and q not in cid.lower() and q not in text.lower():
                    continue
                rows.append({"clientId": cid, "filter": text, "qos": opts.qos, "online": sess.conn is not None})
        return rows

    # ---- retained ----------------------------------------------------------------------------

    def retained_topics(self, query: str = "") -> list[str]:
        q = query.strip().lower()
        return [t for t in sorted(self.gw.retained.stored) if not q or q in t.lower()]

    async def retained_message(self, topic: str) -> dict | None:
        ref = self.gw.retained.stored.get(topic)
        if ref is None:
            return None
        out = await self.gw.router.load(["r", ref[0], ref[1]], None)
        if out is None:
            return None
        return {"topic": topic, "qos": out.qos, "payload": preview(bytes(out.payload))}

    # ---- overview ----------------------------------------------------------------------------

    def overview(self) -> dict:
        s = self.gw.stats
        sessions = self.gw.router.sessions
        out = {"connected": s.connected, "sessions": len(sessions),
               "subscriptions": sum(len(x.subs) for x in sessions.values()),
               "retained": len(self.gw.retained.stored), "received": s.received, "sent": s.sent,
               "dropped": s.dropped + s.expired}
        b = self.broker
        if b is not None:
            store = b.store
            out["commitlogBytes"] = store.max_phy_offset - store.min_phy_offset
            try:
                disk = shutil.disk_usage(store.root)
                out["diskUsedRatio"] = disk.used / disk.total if disk.total else 0.0
                out["diskFreeBytes"] = disk.free
            except OSError:
                pass
        return out

    def counters(self) -> dict[str, float]:
        """What the rate sampler reads: plain integers, no walk of big tables."""
        s = self.gw.stats
        b = self.broker
        return {"received": s.received, "sent": s.sent, "connected": s.connected,
                "written": b.store.max_phy_offset if b is not None else 0}

    # ---- broker topics, groups, messages ----------------------------------------------------

    def topics(self, include_lmq: bool = False) -> list[dict]:
        b = self.broker
        if b is None:
            return []
        rows = []
        for name, cfg in sorted(b.topics.all().items()):
            if name.startswith(LMQ_TOPIC_PREFIX) and not include_lmq:
                continue
            n = max(cfg.read_queue_nums, cfg.write_queue_nums)
            queues = [{"queueId": q, "min": b.min_offset(name, q), "max": b.max_offset(name, q)} for q in range(n)]
            rows.append({"name": name, "read": cfg.read_queue_nums, "write": cfg.write_queue_nums,
                         "messages": sum(q["max"] for q in queues), "queues": queues})
        return rows

    def groups(self) -> list[dict]:
        b = self.broker
        if b is None:
            return []
        by: dict[str, list[dict]] = {}
        for group, topic, qid, offset in b.offsets.items():
            if topic.startswith(LMQ_TOPIC_PREFIX) or group.startswith(LMQ_TOPIC_PREFIX):
                continue
            end = b.max_offset(topic, qid)
            by.setdefault(group, []).append({"topic": topic, "queueId": qid, "brokerOffset": end,
                                             "consumerOffset": offset, "lag": max(0, end - offset)})
        table = self.view.clients if self.view is not None else None
        members: dict[str, dict] = {}
        if table is not None:
            for name, g in table.consumers.items():
                members[name] = {"clients": sorted(g.client_ids()), "model": g.message_model}
                by.setdefault(name, [])
        return [{"group": g, "queues": sorted(q, key=lambda r: (r["topic"], r["queueId"])),
                 "lag": sum(r["lag"] for r in q), "members": members.get(g, {}).get("clients", []),
                 "model": members.get(g, {}).get("model", "-"), "online": g in members}
                for g, q in sorted(by.items())]

    def _message(self, m) -> dict:
        return {"msgId": m.msg_id, "uniqKey": m.properties.get("UNIQ_KEY", ""), "topic": m.topic,
                "queueId": m.queue_id, "queueOffset": m.queue_offset, "msgKeys": " ".join(m.keys),
                "tags": m.tags or "", "stored": local_time(m.store_timestamp), "body": preview(bytes(m.body))}

    async def find_messages(self, topic: str, key: str, msg_id: str) -> list[dict]:
        """By offset message id; else by key or client message id (UNIQ_KEY) in
        ``topic``, or in every user topic when empty (at most ``MAX_KEY_SEARCH_TOPICS``)."""
        from core.store import decode_message

        b = self.broker
        if b is None:
            return []
        found = []
        if msg_id:
            m = await b.view_message(msg_id)
            if m is not None:
                found.append(self._message(m))
        needle = key or msg_id
        if needle and not found:
            if topic:
                topics = [topic]
            else:
                topics = [t for t in sorted(b.topics.all()) if not t.startswith(LMQ_TOPIC_PREFIX)
                          and not t.startswith("%") and not is_system_topic(t)][:MAX_KEY_SEARCH_TOPICS]
            for t in topics:
                result = await b.query_message(t, needle)
                found.extend(self._message(decode_message(raw)) for raw in result.entries)
        return found

    async def messages_between(self, topic: str, start_ms: int, end_ms: int, limit: int = MAX_TIME_RESULTS) -> list[dict]:
        """Messages of ``topic`` stored in [start_ms, end_ms], oldest first over all its
        queues, at most ``limit``."""
        from core.store import decode_message

        b = self.broker
        cfg = b.get_topic(topic) if b is not None else None
        if cfg is None:
            return []
        found = []
        for qid in range(cfg.read_queue_nums):
            offset = max(0, await b.offset_by_time(topic, qid, start_ms))
            end = b.max_offset(topic, qid)
            while offset < end and len(found) < limit * 4:
                result = await b.read_queue(topic, qid, offset, 32)
                if not result.entries:
                    break
                stop = False
                for raw in result.entries:
                    m = decode_message(raw)
                    if m.store_timestamp > end_ms:
                        stop = True
                        break
                    if m.store_timestamp >= start_ms:
                        found.append(m)
                if stop:
                    break
                offset = result.next_begin_offset
        found.sort(key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset))
        return [self._message(m) for m in found[:limit]]

    def tracing_on(self) -> bool:
        """Whether this broker holds a trace topic (``traceTopicEnable``, or clients' traces)."""
        from core.trace import TRACE_TOPIC

        b = self.broker
        return b is not None and b.get_topic(TRACE_TOPIC) is not None

    def replication(self) -> dict | None:
        if self.view is None or self.view.ha_status is None:
            return None
        return self.view.ha_status()
