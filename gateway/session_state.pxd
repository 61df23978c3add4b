# C declarations for session_state.py when Cython compiles it (setup.py
# KERNELS; ARCHITECTURE.md decision 10): `SessionState`, the base of
# `gateway.sessions.Session`, as an extension type, so the router's fast path
# (`gateway.publish_output.forward_v4`) reads a session's fields as C fields.
# session_state.py stays plain Python: the twin.

cdef class SessionState:
    cdef public object conn, pending, flows, refs, mem
