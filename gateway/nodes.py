"""Names of gateway nodes and of the light queue each one reads (``gateway.cluster``)."""

from __future__ import annotations

import secrets

from core.broker import LMQ_TOPIC_PREFIX

P_NODE = "mqgateNode"  # the property naming the node that sent a message
# The client ids a publishing node picked for $share groups, for the nodes
# whose node queue gets the message: they deliver shared subscriptions to these only.
P_SHARE_PICKS = "mqgateShare"


def new_node_id() -> str:
    """A node's id for one run of ``mqgate gateway``: random, so a restarted
    node never reads what its previous run was sent."""
    return "gw" + secrets.token_hex(4)


def node_queue_name(node: str) -> str:
    """The light queue a node reads for its non-persistent sessions."""
    return f"{LMQ_TOPIC_PREFIX}%node_{node}"


def live_key(node: str, client_id: str) -> str:
    """The key of a ``"live"`` meta record: a non-persistent session on a node."""
    return f"{node}/{client_id}"
