"""The part of a session the router's fast path reads per message (issue 13).

``SessionState`` is the base of ``gateway.sessions.Session``: the fields
``PublishOutput.forward_v4`` reads or replaces for every QoS 1/2 forward to
a live 3.1.1 subscriber (the connection, the pending deliveries, the
outbound flows, the refs and the in-memory entries). Compiled
(``session_state.pxd``, setup.py KERNELS) it is an extension type and they
are C fields, read by the compiled fast path without an attribute lookup;
this file is its pure-Python twin. It holds no logic: what the fields mean
and the rules they keep are ``gateway.sessions``'.
"""

from __future__ import annotations


class SessionState:
    """Storage of ``Session``'s per-message fields (see the module docstring)."""

    __slots__ = ("conn", "pending", "flows", "refs", "mem")
