"""Output woken during a trio step, written at the end of that step (issue 13).

A delivery routed by one client's read (a PUBLISH fanned out, a QoS 1
message, a session's pump made due) lands in the subscriber's ``out`` and
calls its ``Connection.wake``. Starting a writer task for it costs a task
and the two trio steps of its ``send_all``: the subscriber's ``send`` came
three scheduler ticks after the publisher's read. Instead, the connections
woken during a task's step are collected (``MQTTGateway.woken``), and
``StepWrites``, a trio instrument the gateway installs while it runs,
writes each of them once when that step ends (``after_task_step``): in the
publisher's routing step, before the reader waits for anything.

Rules kept here (the writer/reader protocol is ``gateway.connection``'s):

* Collected is only a connection nobody writes (``_writer_of`` NOBODY):
  it becomes ``QUEUED`` ("written at the end of this step, nobody writes
  it now"). Whoever would write it may claim it first (its ``_drain``);
  ``write_woken`` writes only connections still ``QUEUED``, so a socket is
  never written by two tasks. No connection stays ``QUEUED`` past the
  step that queued it.
* One write per woken connection per step, whatever the number of
  messages routed to it in that step: a read of 100 PUBLISHes fanned in to
  one subscriber reaches it in one ``send``.
* Written directly is only a plain TCP stream whose session's pump is not
  due, with one non-blocking ``write`` of everything its ``out`` holds;
  what the kernel does not take (partial write, EAGAIN), TLS and WebSocket
  streams and a due pump go to a writer task, as before (``writeTimeout``,
  the QoS 0 limits behind a write: ``gateway.publish_output``).
* A failed write ends that connection the way a writer's failure does, and
  only that one: the task whose step woke it (a publisher's reader) is not
  touched, and the reader's own connection is never collected (it is
  acting on its read, so its wakes do nothing; it writes after the read).
* The reader writes its own output after a read the same way
  (``write_out`` from ``Connection._turn``), but what the kernel does not
  take it writes itself with ``send_all``, not through a writer task: its
  client's reads wait for its writes. Before it, it writes the connections
  collected so far (``write_collected``): a read's deliveries written
  directly go out before its acks, even when the read is acted on in one
  step.
* ``after_task_step`` never raises (trio would disable the instrument):
  a connection whose write fails for any other reason is logged and ended.
  Without the instrument (a gateway object used outside ``run``) ``woken``
  is None and a wake starts a writer task.
"""

from __future__ import annotations

import logging
import os

import trio

from gateway.publish_output import NO_OUTPUT, NOBODY

log = logging.getLogger("mqgate.gateway")

QUEUED = 3  # ``Connection._writer_of``: collected in this step (see the module docstring)


class StepWrites(trio.abc.Instrument):
    """Writes the connections woken during a task step when the step ends."""

    def __init__(self) -> None:
        self.woken: list = []  # the gateway's ``woken``: appended to by ``Connection.wake``

    def after_task_step(self, task) -> None:
        woken = self.woken
        if woken:
            try:
                write_collected(woken)
            except BaseException:  # an error here would disable the instrument: every later wake would wait
                log.exception("writing the connections woken in a step failed")


def write_collected(woken: list) -> None:
    """Write now the connections collected so far in this step (the gateway's
    ``woken``, emptied): what `StepWrites` does when the step ends. A reader
    calls it before writing its own output, so the deliveries its read
    makes that are written directly (plain TCP, no due pump, the kernel
    takes them) go out before its acks, as Mosquitto writes them; the
    others go to writer tasks, as before."""
    batch = woken.copy()
    woken.clear()
    write_woken(batch)


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
            conn._writer_of = NOBODY
            conn.closing = True
            conn._stop_reader()


def write_now(conn) -> None:
    """Write ``conn``'s output now if its socket takes it, else start its
    writer task; ``conn`` is ``QUEUED``."""
    if conn.closing:
        conn._writer_of = NOBODY  # its _drain writes what is left
    elif not write_out(conn):
        conn.start_writer()  # not a plain TCP socket, a due pump, or the socket pushed back


def write_out(conn) -> bool:
    """One non-blocking write of everything ``conn.out`` holds, when it can
    be written so: a plain TCP socket and no due pump. True: done (all
    written, or the write failed and the connection is ending),
    ``_writer_of`` NOBODY. False: ``conn.out`` holds what was not written
    (all of it when it cannot be written so), for a blocking writer
    (``_writer_of`` unchanged)."""
    if conn.stream.__class__ is not trio.SocketStream or conn._pump_due():
        return False
    out = conn.out
    if not out:
        conn._writer_of = NOBODY
        return True
    data = out[0] if len(out) == 1 else b"".join(out)
    try:
        sent = os.write(conn.stream.socket.fileno(), data)
    except BlockingIOError:
        sent = 0
    except OSError:  # reset, broken pipe, closed: what a writer's send_all would have met
        conn.out = NO_OUTPUT  # as a failed writer, the output is gone with the connection
        conn.out_bytes = 0
        conn._writer_of = NOBODY
        conn.closing = True
        conn._stop_reader()
        return True
    conn.gw.stats.bytes_out += sent
    conn._behind = conn._room = None
    if sent == len(data):
        conn.out = NO_OUTPUT
        conn.out_bytes = 0
        conn._writer_of = NOBODY
        return True
    rest = data[sent:]
    conn.out = [rest]
    conn.out_bytes = len(rest)
    return False
