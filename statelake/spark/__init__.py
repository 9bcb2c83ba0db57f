"""statelake on Spark: SQL over state history, time travel, maintenance, distributed writes.

* :func:`register` adds ``format("statelake")`` (a PySpark Python data
  source reading the tables through delta-rs) to a session;
  :func:`create_views` creates ``statelake_partials``, ``statelake_commits``,
  ``statelake_sealed_partials`` and friends.
* :func:`local_session` builds a local session with sane settings.
* :func:`read_table`, :func:`table_history`, :func:`vacuum_store` use the
  native ``format("delta")`` / ``DeltaTable`` path when the Delta Lake jars
  are on the classpath, and the data source / delta-rs otherwise.
* :func:`write_partials` writes partials computed on executors with one
  Delta commit per epoch, obeying the fence and idempotence of
  ``write_partial``.
"""

from ._history import last_version_with_epoch
from ._native import delta_jars_available, read_table, table_history, vacuum_store
from ._schema import spark_schema
from ._session import find_delta_jars, local_session
from ._source import FORMAT, StatelakeDataSource
from ._views import VIEWS, create_views, register
from ._write import WriteReport, write_partials

__all__ = [
    "FORMAT",
    "VIEWS",
    "StatelakeDataSource",
    "WriteReport",
    "create_views",
    "delta_jars_available",
    "find_delta_jars",
    "last_version_with_epoch",
    "local_session",
    "read_table",
    "register",
    "spark_schema",
    "table_history",
    "vacuum_store",
    "write_partials",
]
