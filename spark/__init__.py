"""spark: a PySpark data source over the commit log, and the telemetry job.

What other code may use:
- `register(session)`: make ``format("commitlog")`` available (batch and
  streaming) in a SparkSession.
- `CommitLogDataSource`, `SCHEMA`: the data source and its schema (DDL).
- ``python -m spark.telemetry``: the telemetry aggregation job.

Importing this package does not import pyspark; `register` does.
"""

from __future__ import annotations

__all__ = ["register", "CommitLogDataSource", "SCHEMA"]


def register(session) -> None:
    """``session.dataSource.register(CommitLogDataSource)``."""
    from .commitlog_source import register as _register

    _register(session)


def __getattr__(name: str):
    if name in ("CommitLogDataSource", "SCHEMA"):
        from . import commitlog_source

        return getattr(commitlog_source, name)
    raise AttributeError(name)
