"""spark: PySpark data sources over the commit log and over a cluster, and the telemetry job.

What other code may use:
- `register(session)`: make ``format("commitlog")`` (a local data
  directory) and ``format("rocketmq")`` (a cluster, through its name
  servers; `spark.rocketmq_source`) available, batch and streaming, in a
  SparkSession.
- `CommitLogDataSource`, `SCHEMA`: the data source and its schema (DDL).
- ``python -m spark.telemetry``: the telemetry aggregation job.
- `spark.stream_start.start_one_by_one(writers)`: start several streaming
  queries over these sources in one process without the start race of
  Spark's Python data sources (see that module).

Importing this package does not import pyspark; `register` does.
"""

from __future__ import annotations

__all__ = ["register", "CommitLogDataSource", "SCHEMA"]


def register(session) -> None:
    """``session.dataSource.register(...)`` for both sources."""
    from .commitlog_source import register as _register
    from .rocketmq_source import register as _register_cluster

    _register(session)
    _register_cluster(session)


def __getattr__(name: str):
    if name in ("CommitLogDataSource", "SCHEMA"):
        from . import commitlog_source

        return getattr(commitlog_source, name)
    raise AttributeError(name)
