"""PySpark jobs that build and export ssekd's snapshot topics, and the Kafka data source under them.

Spark's own Kafka connector is a Maven artifact this project cannot reach, so Kafka is read and
written through a PySpark Python Data Source built on confluent-kafka (`ssekd.spark.kafka_source`).
The jobs (`ssekd.spark.snapshot`, `ssekd.spark.export`) and the command line (`ssekd-spark`) sit on top.

Nothing here imports pyspark at package import time: `ssekd` itself never needs Spark, and a
missing `[spark]` extra should surface as a clear message from the command line, not as an
ImportError from an unrelated import.
"""

from __future__ import annotations

#: The short name the data source registers under: `spark.read.format(FORMAT)`.
FORMAT = "ssekd_kafka"

__all__ = ["FORMAT"]
