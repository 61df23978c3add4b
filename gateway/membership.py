"""Which gateway nodes are alive: the brokers' client table decides.

Every node heartbeats to its home broker as a client (its node id as the
client id) of consumer group ``mqgate_gateway_nodes`` (HEART_BEAT, as any
RocketMQ consumer) and asks for the group's members
(GET_CONSUMER_LIST_BY_GROUP) every ``POLL_INTERVAL``. A broker drops a
client when its connection closes (a SIGKILLed node's socket is closed by
its kernel) or after 120 s without a heartbeat (a node cut off), so no
node guesses about another: a node is dead when the broker's list stops
naming it. The node heartbeats to every other broker group's master too
(only so that ``mqgate admin cluster status`` shows the groups it uses);
only the home broker's list decides who is alive.

Rules kept here:

* ``alive`` is the last list the broker answered (this node always in it);
  when the broker cannot be asked, the last answer stands. Until a broker
  has answered once (``known``), nobody may be judged dead: ``alive`` then
  holds this node only.
* A broker that is new to this node (a failover promoted another master)
  has not heard every node's heartbeat yet: for ``GRACE`` after the
  address changes, its list only adds nodes, never removes one, and this
  node heartbeats to it at once.
* The *leader* is the smallest alive node id, once ``known``: it alone acts for dead nodes
  (``gateway.cluster`` publishes their clients' wills), so a will is
  published once while the membership is stable.
"""

from __future__ import annotations

import logging
from typing import Callable

import trio

from core.client import ClientApi
from core.remoting import RequestCode, ResponseCode, decode_json

log = logging.getLogger("mqgate.gateway")

NODES_GROUP = "mqgate_gateway_nodes"
POLL_INTERVAL = 1.0
HEARTBEAT_INTERVAL = 10.0
GRACE = HEARTBEAT_INTERVAL * 1.5


class Membership:
    def __init__(self, api: ClientApi, addr_of: Callable[[], str], node_id: str,
                 others_of: Callable[[], list[str]] = list) -> None:
        self.api = api
        self.addr_of = addr_of
        self.others_of = others_of  # the other groups' masters: heartbeats only, so they list the node too
        self.node_id = node_id
        self.alive: set[str] = {node_id}
        self.known = False  # a broker has answered: ``alive`` is a list, not just this node
        self.changed = trio.Event()
        self._asked = ""  # the broker address the last poll went to
        self._grace_until = 0.0

    @property
    def leader(self) -> bool:
        """The smallest alive node id is this node's, and a broker has said who is alive
        (before that every node would think itself the leader)."""
        return self.known and min(self.alive) == self.node_id

    def _heartbeat_body(self) -> dict:
        consumer = {"groupName": NODES_GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": [], "unitMode": False}
        return {"clientID": self.node_id, "consumerDataSet": [consumer], "producerDataSet": []}

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self._heartbeat()
        task_status.started()
        last_beat = trio.current_time()
        while True:
            await trio.sleep(POLL_INTERVAL)
            if trio.current_time() - last_beat >= HEARTBEAT_INTERVAL:
                await self._heartbeat()
                last_beat = trio.current_time()
            await self.poll()

    async def _heartbeat(self) -> None:
        home = self.addr_of()
        for addr in dict.fromkeys([home, *self.others_of()]):
            try:
                with trio.fail_after(5):
                    await self.api.heartbeat(addr, self._heartbeat_body())
            except Exception as e:  # noqa: BLE001 - the next beat tries again
                log.log(logging.WARNING if addr == home else logging.INFO,
                        "gateway node %s: heartbeat to %s failed: %s", self.node_id, addr, e)

    async def poll(self) -> None:
        addr = self.addr_of()
        if addr != self._asked:
            if self._asked:
                self._grace_until = trio.current_time() + GRACE
                await self._heartbeat()
            self._asked = addr
        try:
            resp = await self.api.call(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": NODES_GROUP})
            if resp.code != ResponseCode.SUCCESS:  # not an empty list: an answer we cannot use
                raise RuntimeError(f"response code {resp.code}: {resp.remark}")
            ids = [str(c) for c in decode_json(resp.body).get("consumerIdList") or ()]
        except Exception as e:  # noqa: BLE001 - the last answer stands
            log.info("gateway node %s: members of %s not known now: %s", self.node_id, NODES_GROUP, e)
            return
        alive = set(ids) | {self.node_id}
        first, self.known = not self.known, True
        if trio.current_time() < self._grace_until:
            alive |= self.alive
        if alive != self.alive or first:
            gone = self.alive - alive
            if gone:
                log.info("gateway node(s) %s gone (the broker dropped them)", ", ".join(sorted(gone)))
            self.alive = alive
            self.changed.set()
            self.changed = trio.Event()
