"""The SparkSession the jobs run in, with the Kafka data source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from .kafka_source import KafkaDataSource


def register(session: SparkSession) -> SparkSession:
    """Make `format("ssekd_kafka")` available in `session` (idempotent)."""
    session.dataSource.register(KafkaDataSource)
    return session


def build_session(master: str = "local[*]", app_name: str = "ssekd-spark",
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """A session on `master` (`local[*]`, `spark://host:7077`, `yarn`, ...).

    Workers import this package to run the data source, so on a cluster every worker needs
    `pip install 'ssekd[spark]'` (confluent-kafka and pyarrow are native wheels; shipping
    sources with --py-files is not enough for them).
    """
    settings = dict(conf or {})
    if master.startswith("local") and "spark.pyspark.python" not in settings:
        # Local Python workers (and the planner processes of Python data sources) are started
        # by the JVM, which would take `python3` from PATH: not the interpreter that has pyarrow
        # and confluent-kafka. The JVM inherits this variable when it is launched.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return register(builder.getOrCreate())
