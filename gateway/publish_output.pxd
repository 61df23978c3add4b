# C declarations for publish_output.py when Cython compiles it (setup.py
# KERNELS; ARCHITECTURE.md decision 10): `PublishOutput`, the base of
# `gateway.connection.Connection`, as an extension type holding the output
# state the router's fast path touches per message, so `forward_v4` reads and
# moves it as C fields; the session's as `SessionState` (its base), its
# flows as `OutboundFlows` (gateway/mqtt/qos.pxd) when that is the compiled
# class (`_start`).
# publish_output.py stays plain Python: the twin.

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcpy

from gateway.mqtt.qos cimport OutboundFlows


cdef class SessionState:
    cdef public object conn, pending, flows, refs, mem


cdef class PublishOutput:
    cdef public object mq, out
    cdef public Py_ssize_t out_bytes
    cdef public bint live, closing, _writing
    cdef public int _writer_of, _plain_v4


@cython.locals(c=PublishOutput, sess=SessionState, key=cython.long, k=cython.long, size=cython.long,
               qos=cython.long, pub_qos=cython.long, retain=cython.long, pid=cython.long, plain=cython.int,
               sent=cython.long, sent1=cython.long, sent2=cython.long, t=tuple, ref_map=dict, mem_map=dict,
               head=bytes, payload=bytes, kept=dict)
cpdef object forward_v4(object heads, object head_of, object topic, object targets, object pub, object msg,
                        object stats)


@cython.locals(typed=OutboundFlows)
cdef long _start(object flows, object qos) except? -1


@cython.locals(data=bytes, n_head=Py_ssize_t, n_payload=Py_ssize_t, at=cython.p_char)
cpdef bytes with_packet_id(bytes head, long packet_id, bytes payload)
