"""What the admin API reads and does on a running gateway, as plain dicts.

Rules kept here:
- Reads walk the gateway's public tables (sessions, the retained index,
  counters) and change nothing. Lists are sorted by client id or topic and
  cut by ``limit``/``offset``, so a page is stable between two calls.
- Only MQTT client ids, topics and numbers come out; never a password, a
  will payload or a message payload (a retained message shows its size).
- Kicking a client is the server ending its connection: an MQTT 5 client
  gets DISCONNECT 0x98 (Administrative action), a 3.1.1 client is closed.
  Its will is published as for any connection that ends without DISCONNECT,
  and its session stays if it is persistent.
- Deleting a session kicks its client if connected, then ends the session
  as its expiry would: subscriptions, queue and records go, a pending will
  is published.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from gateway.mqtt import ReasonCode

if TYPE_CHECKING:
    from gateway.app import MQTTGateway
    from gateway.sessions import Session

PROTOCOLS = {3: "3.1", 4: "3.1.1", 5: "5.0"}
KICK_WAIT_S = 10.0


class NotFound(LookupError):
    """No such client, session or retained topic (HTTP 404)."""


def page(items: list, limit: int, offset: int) -> dict:
    return {"total": len(items), "offset": offset, "items": items[offset:offset + limit]}


class GatewayOps:
    def __init__(self, gw: MQTTGateway) -> None:
        self.gw = gw

    # ---- clients (connected sessions) -------------------------------------------------

    def _client(self, sess: Session) -> dict[str, Any]:
        conn = sess.conn
        return {
            "clientId": sess.client_id,
            "username": conn.username,
            "peer": f"{conn.info.peer[0]}:{conn.info.peer[1]}",
            "listener": conn.info.listener,
            "protocol": PROTOCOLS.get(conn.version, str(conn.version)),
            "keepalive": conn.keepalive,
            "persistent": sess.persistent,
            "subscriptions": len(sess.subs),
            "inflight": len(sess.refs),
            "dropped": sess.dropped,
        }

    def clients(self, limit: int, offset: int) -> dict:
        online = [s for _cid, s in sorted(self.gw.router.sessions.items()) if s.conn is not None]
        return {"total": len(online), "offset": offset,
                "items": [self._client(s) for s in online[offset:offset + limit]]}

    def client(self, cid: str) -> dict:
        sess = self.gw.router.sessions.get(cid)
        if sess is None or sess.conn is None:
            raise NotFound(f"client {cid!r} is not connected")
        return self._client(sess) | {"subscriptionList": self._subs(sess)}

    async def kick(self, cid: str) -> dict:
        sess = self.gw.router.sessions.get(cid)
        conn = None if sess is None else sess.conn
        if conn is None:
            raise NotFound(f"client {cid!r} is not connected")
        conn.kick(ReasonCode.ADMINISTRATIVE_ACTION)
        with trio.move_on_after(KICK_WAIT_S):
            await conn.done.wait()
        return {"clientId": cid, "kicked": True}

    # ---- sessions --------------------------------------------------------------------------

    def _session(self, sess: Session) -> dict[str, Any]:
        return {
            "clientId": sess.client_id,
            "online": sess.conn is not None,
            "persistent": sess.persistent,
            "expiryInterval": sess.expiry,
            "protocol": PROTOCOLS.get(sess.version, str(sess.version)),
            "subscriptions": len(sess.subs),
            "inflight": len(sess.refs),
            "pending": len(sess.pending),
            "dropped": sess.dropped,
        }

    def sessions(self, limit: int, offset: int) -> dict:
        items = sorted(self.gw.router.sessions.items())
        return {"total": len(items), "offset": offset,
                "items": [self._session(s) for _cid, s in items[offset:offset + limit]]}

    def session(self, cid: str) -> dict:
        sess = self.gw.router.sessions.get(cid)
        if sess is None:
            raise NotFound(f"session {cid!r} does not exist")
        return self._session(sess) | {"subscriptionList": self._subs(sess)}

    async def delete_session(self, cid: str) -> dict:
        router = self.gw.router
        sess = router.sessions.get(cid)
        if sess is None:
            raise NotFound(f"session {cid!r} does not exist")
        conn = sess.conn
        if conn is not None:
            conn.kick(ReasonCode.ADMINISTRATIVE_ACTION)
            with trio.move_on_after(KICK_WAIT_S):
                await conn.done.wait()
        sess = router.sessions.get(cid)
        if sess is not None and sess.conn is None:
            await self.gw.end_session(sess)
        return {"clientId": cid, "deleted": True}

    # ---- subscriptions ---------------------------------------------------------------------

    @staticmethod
    def _subs(sess: Session) -> list[dict]:
        return [{"filter": text, "qos": opts.qos, "noLocal": opts.no_local,
                 "retainAsPublished": opts.retain_as_published, "retainHandling": opts.retain_handling}
                for text, (_flt, opts) in sorted(sess.subs.items())]

    def subscriptions(self, limit: int, offset: int, client_id: str | None = None) -> dict:
        sessions = self.gw.router.sessions
        if client_id is None:
            chosen = sorted(sessions.items())
        else:
            chosen = [(client_id, sessions[client_id])] if client_id in sessions else []
        rows = [{"clientId": cid, **sub} for cid, sess in chosen for sub in self._subs(sess)]
        return page(rows, limit, offset)

    # ---- retained messages -----------------------------------------------------------------

    async def retained(self, limit: int, offset: int) -> dict:
        topics = sorted(self.gw.retained.stored.items())
        items = []
        for topic, ref in topics[offset:offset + limit]:
            out = await self.gw.router.load(["r", ref[0], ref[1]], None)
            items.append({"topic": topic, "qos": None if out is None else out.qos,
                          "size": None if out is None else len(out.payload)})
        return {"total": len(topics), "offset": offset, "items": items}

    async def delete_retained(self, topic: str) -> dict:
        if topic not in self.gw.retained.stored:
            raise NotFound(f"no retained message on {topic!r}")
        await self.gw.set_retained([(topic, b"", 0)])
        return {"topic": topic, "deleted": True}

    # ---- overview ----------------------------------------------------------------------------

    def stats(self) -> dict:
        s = self.gw.stats
        sessions = self.gw.router.sessions
        return {"connected": s.connected, "sessions": len(sessions), "connects": s.connects,
                "received": s.received, "sent": s.sent, "dropped": s.dropped, "expired": s.expired,
                "retained": len(self.gw.retained.stored)}
