"""One SparkSession and one broker for every Spark test.

A local SparkSession takes 10-20 s to start on a small machine and its Python workers another
several seconds to warm up, so all Spark tests share one (`local[2]`, no UI, few shuffle
partitions). The broker is the real tansu dev broker; tests keep apart by topic names.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

# Spark binds its driver to the address the host name resolves to unless told otherwise.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from pyspark.sql import SparkSession

from ssekd.dev.broker import Broker
from ssekd.spark.session import build_session

#: Not UTC on purpose: a job whose output depended on the session's time zone would show it.
SESSION_TIME_ZONE = "America/Los_Angeles"


@pytest.fixture(scope="session")
def spark_broker(kafka_broker: Broker) -> Broker:
    """The session's tansu broker (tests/conftest.py); Spark tests keep apart by topic name."""
    return kafka_broker


@pytest.fixture(scope="session")
def spark_session() -> Iterator[SparkSession]:
    session = build_session("local[2]", "ssekd-spark-tests", {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": SESSION_TIME_ZONE,
        "spark.driver.memory": "1g",
        # Tests run short jobs once: the quick C1 compiler alone warms up much faster than
        # tiered compilation on a 2-core machine, and peak speed does not matter here.
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    })
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def kafka_config(spark_broker: Broker) -> dict[str, str]:
    """librdkafka settings for the jobs: the test broker, and short fetch waits (see
    docs/operations.md, the development broker)."""
    return {"bootstrap.servers": spark_broker.bootstrap, "fetch.wait.max.ms": "10"}


@pytest.fixture
def topic_name() -> Iterator[str]:
    """A fresh topic name per test (the broker is shared)."""
    yield f"t-{uuid.uuid4().hex[:10]}"
