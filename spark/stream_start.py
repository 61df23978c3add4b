"""Starting several streaming queries over our Python data sources in one process.

`start_one_by_one(writers)` starts each query only once the one before has
created its source. The reason is a race in Spark (seen with 4.3.0), not in
our sources:

- Every function Spark builds for one registered Python data source shares
  one ``java.util.HashMap``: the registered class's ``envVars``
  (``UserDefinedPythonDataSource.createPythonFunction`` passes
  ``dataSourceCls.envVars`` on). So do the partition-reading functions that
  every task of every query over that source carries.
- A streaming query creates its source in its own thread, and the source's
  driver-side runner puts four keys into that map, with no lock
  (``PythonStreamingSourceRunner.init``: SPARK_LOCAL_DIRS,
  SPARK_AUTH_SOCKET_TIMEOUT, SPARK_BUFFER_SIZE, SPARK_PYTHON_RUNTIME).
- Two queries creating their sources at one moment put the same new keys
  at once; HashMap can then lose a node and still count it. From then on the
  map writes one entry fewer than its size says, and Java's deserialization
  of every task that carries it fails in ``HashMap.readObject`` with
  ``java.io.OptionalDataException``: the first micro-batch of every query
  over that source fails, for as long as the registration lives.
- Only the first puts into a fresh map (a new process, a new
  ``register``) can collide: later ones replace equal values, which a
  concurrent serialization does not mind. So once one query has created its
  source, the others may start at any time.

Whether the queries share one DataFrame does not matter: they share the
registration. ``tests/spark/stress_stream_start.py`` shows the race and
this cure (numbers in docs/SPARK.md).

Invariant kept: when `start_one_by_one` returns, every query it started has
created its source (or has already ended, with its error on the query).
"""

from __future__ import annotations

import time

SOURCE_START_TIMEOUT_S = 300  # a source's creation runs Python planning and starts a Python worker

# StreamExecution's status messages before its sources exist (Spark 4.x)
_BEFORE_SOURCES = ("Initializing StreamExecution", "Initializing sources")


class SourceStartTimeout(RuntimeError):
    """A query did not create its source within SOURCE_START_TIMEOUT_S."""


def source_created(query) -> bool:
    """True once ``query`` has created its sources (or has stopped: its error is on the query)."""
    if not query.isActive:
        return True
    status = query.status
    return status["isTriggerActive"] or status["message"] not in _BEFORE_SOURCES or query.lastProgress is not None


def start_one_by_one(writers, timeout_s: float = SOURCE_START_TIMEOUT_S, poll_s: float = 0.02) -> list:
    """``[w.start() for w in writers]``, each after the previous query has created its source.

    If a query does not get there in ``timeout_s``, the queries started so far
    are stopped and `SourceStartTimeout` names it.
    """
    from pyspark.errors import StreamingQueryException

    queries = []
    try:
        for writer in writers:
            query = writer.start()
            queries.append(query)
            deadline = time.monotonic() + timeout_s
            while not source_created(query):
                if time.monotonic() > deadline:
                    raise SourceStartTimeout(
                        f"streaming query {query.name or query.id} did not create its source in {timeout_s:g} s")
                # Spark has no event for "sources created": its status is polled, woken early by an end
                try:
                    query.awaitTermination(poll_s)
                except StreamingQueryException:
                    break  # it ended with an error, which stays on the query for the caller
    except BaseException:
        for query in queries:
            query.stop()
        raise
    return queries
