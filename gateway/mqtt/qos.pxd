# C declarations for qos.py when Cython compiles it (setup.py KERNELS;
# ARCHITECTURE.md decision 10): `OutboundFlows` and `InboundFlows` as
# extension types, so that their per-message methods (`start`: the router's
# fast path allocates a packet id per QoS 1/2 forward, C to C;
# `on_ack_words` steps every subscriber ack; `on_publish` and `acknowledge`
# every publisher's message) read the window, the next packet id and the
# flows as C fields. qos.py stays plain Python: the twin.

cdef class OutboundFlows:
    cdef public long receive_maximum
    cdef public long _next
    cdef public object _flows

    cpdef long start(self, qos, ref=*) except? -1


cdef class InboundFlows:
    cdef public long receive_maximum
    cdef public object _flows
