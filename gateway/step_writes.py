"""Output woken during a reader's step, written at the end of that step (issue 13).

A delivery routed by one client's read (a PUBLISH fanned out, a QoS 1
message, a session's pump made due) lands in the subscriber's ``out`` and
calls its ``Connection.wake``. Starting a writer task for it costs a task
and the two trio steps of its ``send_all``: the subscriber's ``send`` comes
three scheduler ticks after the publisher's read. Instead, while a reader
acts on a read (``Connection._turn``), the connections its routing wakes
are collected here, and when the read has been acted on each is written
once, with one non-blocking write of everything its ``out`` holds.

Rules kept here (the writer/reader protocol is ``gateway.connection``'s):

* Collected is only a connection nobody writes (``_writer_of`` NOBODY):
  it becomes ``QUEUED`` ("somebody writes this soon, nobody writes it
  now"). Anyone who would write it may claim it instead (its own reader
  after a read, its ``_drain``); ``write_woken`` writes only connections
  still ``QUEUED``, so a socket is never written by two tasks.
* Collection is per task (the reader's): a wake made by any other task
  (a timer, a remoting send, a writer's pump) starts a writer task as
  before, and a reader that waits inside its step (a topic to create, a
  SYNC_FLUSH durability wait) never collects another task's wakes.
* One write per woken connection per step, whatever the number of
  messages routed to it: a read of 100 PUBLISHes fanned in to one
  subscriber reaches it in one ``send``.
* Written directly only a plain TCP stream whose session's pump is not
  due; what the kernel does not take (partial write, EAGAIN), TLS and
  WebSocket streams and a due pump go to a writer task, as before. A
  failed write ends that connection the way a writer's failure does, and
  only that one (the reader's own connection is never collected: it is
  acting, so its wakes do nothing).
* Every collected connection is resolved (written, handed to a writer
  task, or left NOBODY when closing, for its ``_drain``), even when the
  reader's step ends with an error or a cancellation: ``write_woken`` runs
  in the ``finally`` of ``_turn`` and never raises.
"""

from __future__ import annotations

import logging
import os

import trio

log = logging.getLogger("mqgate.gateway")

QUEUED = 3  # ``Connection._writer_of``: collected by a reader's step (see the module docstring)

# The steps under way: a reader task -> the connections its step woke, in wake order.
steps: dict = {}


def write_woken(woken: list) -> None:
    """Write each connection of ``woken`` still ``QUEUED`` (see the module
    docstring). Never raises: a connection whose write fails for a reason
    other than its socket's is logged and ended, the others are written."""
    for conn in woken:
        if conn._writer_of != QUEUED:
            continue  # claimed meanwhile (its reader, its _drain)
        try:
            write_now(conn)
        except Exception:
            log.exception("client %s: writing a delivery failed, closing the connection", conn.client_id)
            conn._writer_of = 0  # NOBODY
            conn.closing = True
            conn._stop_reader()


def write_now(conn) -> None:
    """Write ``conn``'s output now if its socket takes it, else start its
    writer task; ``conn`` is ``QUEUED``."""
    if conn.closing:
        conn._writer_of = 0  # NOBODY: its _drain writes what is left
        return
    stream = conn.stream
    if stream.__class__ is not trio.SocketStream or conn._pump_due():
        conn.start_writer()
        return
    out = conn.out
    if not out:
        conn._writer_of = 0
        return
    data = out[0] if len(out) == 1 else b"".join(out)
    try:
        sent = os.write(stream.socket.fileno(), data)
    except BlockingIOError:
        sent = 0
    except OSError:  # reset, broken pipe, closed: what a writer's send_all would have met
        conn.out = ()  # NO_OUTPUT: as a failed writer, the output is gone with the connection
        conn.out_bytes = 0
        conn._writer_of = 0
        conn.closing = True
        conn._stop_reader()
        return
    conn.gw.stats.bytes_out += sent
    conn._behind = conn._room = None
    if sent == len(data):
        conn.out = ()
        conn.out_bytes = 0
        conn._writer_of = 0
        return
    rest = data[sent:]  # the socket pushed back: a writer task waits for room
    conn.out = [rest]
    conn.out_bytes = len(rest)
    conn.start_writer()
