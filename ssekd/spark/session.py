"""The SparkSession the jobs run in, with the Kafka data source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from pyspark.sql import SparkSession

from .kafka_source import KafkaDataSource


def register(session: SparkSession) -> SparkSession:
    """Make `format("ssekd_kafka")` available in `session` (idempotent)."""
    session.dataSource.register(KafkaDataSource)
    return session


def build_session(master: str = "local[*]", app_name: str = "ssekd-spark",
                  conf: Mapping[str, str] | None = None,
                  py_files: Sequence[str] = ()) -> SparkSession:
    """A session on `master` (`local[*]`, `spark://host:7077`, `yarn`, ...).

    Executors import this package to run the data source: `py_files` (zips, such as the one
    `ssekd.spark.pack` makes) are put on their `sys.path` before the data source is registered, since
    a registered data source carries the list of files its Python processes add. Their
    dependencies (confluent-kafka, pyarrow, ...) must be installed where they run.

    `spark.pyspark.python` names the Python that Spark starts, for executors and for the
    planner processes of Python data sources on the driver alike: PySpark reads it from the
    PYSPARK_PYTHON variable when the session starts (spark-submit sets that variable from the
    setting; a session started from Python must do it itself), so it is set here. It must be a
    command that works on the driver's machine and on every worker.
    """
    settings = dict(conf or {})
    if "spark.pyspark.python" in settings:
        os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    elif master.startswith("local"):
        # Local Python workers (and the planner processes of Python data sources) are started
        # by the JVM, which would take `python3` from PATH: not the interpreter that has pyarrow
        # and confluent-kafka. The JVM inherits this variable when it is launched.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if py_files:
        # The streaming source's planner on the driver does not add a data source's files to
        # its path as the other planners do; it inherits the JVM's PYTHONPATH, which the JVM
        # takes from this process when it is launched.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [*py_files, *filter(None, [os.environ.get("PYTHONPATH")])])
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    for path in py_files:
        session.sparkContext.addPyFile(path)
    return register(session)
